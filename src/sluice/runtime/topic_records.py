"""Reading a topic's records for people (`GET /v1/topics/{name}/records`, `sluice topics peek`,
the console's topic page).

Records are decoded with the converters of the source connector that writes the topic (its
`key.converter`/`value.converter` and the topic's registered schemas). A topic no connector
names as its `connect.topicname` (a CDC topic `<topic.prefix>.<schema>.<table>`, a JDBC source's
per-table topic, a stream's, a dead-letter topic) is decoded by what its bytes are: Confluent's
Avro wire format (a zero byte and a schema id the registry knows: decoded with that schema, so
each record with the version it was written with), Kafka Connect's JSON with its schema envelope
(`{"schema": …, "payload": …}`: the payload decoded as the schema says), other UTF-8 text as
text, and `base64:…` only for bytes nothing decodes. Headers are the record's extensions,
`__connect.errors.*` included.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
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


class Sniffer:
    """Decodes one value at a time by what its bytes are (module docstring), with the schemas
    the registry holds; schemas and decoders are kept for the values after."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._avro: dict[int, Any] = {}
        self._json: dict[str, Any] = {}

    def value(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        decoded = self._avro_value(raw)
        if decoded is not _UNKNOWN:
            return decoded
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return jsonable(raw)
        decoded = self._json_value(text)
        return text if decoded is _UNKNOWN else decoded

    def _avro_value(self, raw: bytes) -> Any:
        if len(raw) < 5 or raw[0] != 0 or self.registry is None:
            return _UNKNOWN
        schema_id = int.from_bytes(raw[1:5], "big")
        if schema_id not in self._avro:
            self._avro[schema_id] = self._avro_schema(schema_id)
        parsed = self._avro[schema_id]
        if parsed is None:
            return _UNKNOWN
        import fastavro

        stream = io.BytesIO(raw[5:])
        try:
            value = fastavro.schemaless_reader(stream, parsed)
        except Exception:  # not Avro after all (or bytes that do not fit): shown otherwise
            return _UNKNOWN
        if stream.tell() != len(raw) - 5:
            return _UNKNOWN
        return jsonable(value)

    def _avro_schema(self, schema_id: int) -> Any:
        import fastavro

        from sluice.converters._avro import avro_schema
        from sluice.converters._schemas import from_connect

        try:
            text = self.registry.by_id(schema_id)
            if text is None:
                return None
            return fastavro.parse_schema(avro_schema(from_connect(json.loads(text))))
        except Exception:  # a registry entry that is no Connect schema
            return None

    def _json_value(self, text: str) -> Any:
        if not text.startswith("{") or '"schema"' not in text:
            return _UNKNOWN
        try:
            doc = json.loads(text)
        except ValueError:
            return _UNKNOWN
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            return _UNKNOWN
        decoder = self._json_decoder(doc["schema"])
        if decoder is None:
            return jsonable(doc["payload"])
        try:
            result = decoder.arrow(pa.array([text.encode("utf-8")], pa.binary()))
            if result.errors is not None and result.errors[0].as_py():
                return jsonable(doc["payload"])
            return jsonable(result.values.to_pylist()[0])
        except Exception:
            return jsonable(doc["payload"])

    def _json_decoder(self, schema: Any) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._json:
            from sluice.converters import converter_from_config
            from sluice.converters._schemas import from_connect

            try:
                converter = converter_from_config({"value.converter": "JsonConverter"}, "value")
                self._json[key] = converter.decoder(from_connect(schema))
            except Exception:  # a schema sluice does not read: the payload as it is
                self._json[key] = None
        return self._json[key]


_UNKNOWN = object()


def _decode(
    column: pa.Array, decoder: Any, sniffer: Sniffer | None = None
) -> tuple[list[Any], str | None]:
    """Decoded values, or the raw ones and why not."""
    if decoder is None:
        if sniffer is not None:
            return [sniffer.value(v) for v in column.to_pylist()], None
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
    converter = "by content (Avro with the registry, JSON, text; base64 otherwise)"
    if writer_config is not None:
        try:
            codecs = plan_decoders(writer_config, [topic], registry)
            converter = f"{codecs.key.converter} / {codecs.value.converter}"
        except Exception:  # no schema registered yet…: decoded by content
            codecs = None
    sniffer = Sniffer(registry) if codecs is None else None
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
            keys, why_k = _decode(batch.column("key"), codecs.key if codecs else None, sniffer)
            values, why_v = _decode(
                batch.column("value"), codecs.value if codecs else None, sniffer
            )
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
