"""Reading a topic's records for people (`GET /v1/topics/{name}/records`, `sluice topics peek`).

Records are decoded with the converters of the source connector that writes the topic (its
`key.converter`/`value.converter` and the topic's registered schemas); a topic nobody writes
through a converter (a dead-letter topic keeps the original bytes) shows text, or base64 for
bytes that are not UTF-8. Headers are the record's extensions, `__connect.errors.*` included.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from sluice.bus.base import TopicLog
from sluice.engine.converters import plan_decoders

MAX_LIMIT = 1000


def jsonable(value: Any) -> Any:
    """A decoded value as JSON can carry it (bytes: UTF-8 text, else `base64:…`)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # a map column comes back as [(key, value), …]
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {str(k): jsonable(v) for k, v in value}
        return [jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _decode(column: pa.Array, decoder: Any) -> tuple[list[Any], str | None]:
    """Decoded values, or the raw ones and why not."""
    if decoder is None:
        return [jsonable(v) for v in column.to_pylist()], None
    try:
        result = decoder.arrow(column)
        values = result.values.to_pylist()
        errors = result.errors.to_pylist() if result.errors is not None else [None] * len(values)
    except Exception as exc:  # a record its converter cannot read is still shown, raw
        return [jsonable(v) for v in column.to_pylist()], f"{type(exc).__name__}: {exc}"
    raw = column.to_pylist()
    return [jsonable(raw[i] if errors[i] else v) for i, v in enumerate(values)], None


def read_records(
    log: TopicLog,
    topic: str,
    *,
    queue: int | None,
    offset: int | None,
    limit: int,
    writer_config: dict[str, str] | None,
    registry: Any,
) -> dict[str, Any]:
    """See `Herder.topic_records`. `log.offsets` raises UnknownTopic for an unknown topic."""
    ranges = log.offsets(topic)
    queues = sorted(ranges) if queue is None else [queue]
    codecs = None
    converter = "raw (UTF-8 text or base64)"
    if writer_config is not None:
        try:
            codecs = plan_decoders(writer_config, [topic], registry)
            converter = f"{codecs.key.converter} / {codecs.value.converter}"
        except Exception:  # no schema registered yet…: show the bytes
            codecs = None
    records: list[dict[str, Any]] = []
    following: dict[str, int] = {}
    problems: set[str] = set()
    for q in queues:
        span = ranges[q]
        start = max(span.max_offset - limit, span.min_offset) if offset is None else offset
        start = min(max(start, span.min_offset), span.max_offset)
        end = min(start + limit, span.max_offset)
        following[str(q)] = end
        for first, batch in log.read(topic, q, start, end):
            n = batch.num_rows
            offsets = (
                batch.column("offset").to_pylist()
                if "offset" in batch.schema.names
                else list(range(first, first + n))
            )
            keys, why_k = _decode(batch.column("key"), codecs.key if codecs else None)
            values, why_v = _decode(batch.column("value"), codecs.value if codecs else None)
            problems.update(p for p in (why_k, why_v) if p)
            stamps = batch.column("timestamp").to_pylist()
            headers = batch.column("headers").to_pylist()
            partition = log.queue_partition(topic, q)
            for i in range(n):
                records.append(
                    {
                        "queue": q,
                        "offset": offsets[i],
                        "timestamp": jsonable(stamps[i]),
                        "key": keys[i],
                        "value": values[i],
                        "headers": json.loads(headers[i]) if headers[i] else {},
                        "position": {
                            "partition": partition,
                            "offset": {"queueOffset": offsets[i]},
                        },
                    }
                )
    if offset is None and queue is None:  # the latest `limit` records over all queues
        records.sort(key=lambda r: (r["timestamp"] or "", r["queue"], r["offset"]))
        records = records[-limit:]
    out: dict[str, Any] = {
        "topic": topic,
        "converter": converter,
        "records": records,
        "next": following,
    }
    if problems:
        out["decode_errors"] = sorted(problems)
    return out
