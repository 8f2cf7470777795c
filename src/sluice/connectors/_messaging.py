"""Pieces shared by the connectors of message systems (Redis, NATS, MQTT).

What a sink writes of each record, as plain tuples: a `Row` is ``(topic, queue, offset, key,
value, headers)``; ``offset`` is the record's own queue offset (the position *after* it,
``queueOffset``, minus one), so ``(topic, queue, offset)`` names one record for good: sinks derive
idempotency keys from it.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sluice.sdk import ConnectException, ConnectRecord

Row = tuple[str, int, int, bytes | None, bytes | None, dict[str, str]]


def to_bytes(value: Any) -> bytes | None:
    """A key or value as bytes: BYTES as they are, text as UTF-8, anything else as JSON text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")).encode()


def column_bytes(column: pa.Array) -> list[bytes | None]:
    """`to_bytes` of each element of an Arrow column (binary and text without a Python loop)."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.binary()).to_pylist()
    return [to_bytes(v) for v in column.to_pylist()]


def rows_of_batch(batch: pa.RecordBatch) -> list[Row]:
    """The rows of a sink's Arrow batch (`SinkTask.put_batch`'s columns)."""
    headers = batch.column("headers").to_pylist()
    return list(
        zip(
            batch.column("topic").to_pylist(),
            batch.column("queue_id").to_pylist(),
            batch.column("queue_offset").to_pylist(),
            column_bytes(batch.column("key")),
            column_bytes(batch.column("value")),
            [json.loads(h) if h else {} for h in headers],
            strict=True,
        )
    )


def rows_of_records(records: list[ConnectRecord]) -> list[Row]:
    """The rows of records handed to `SinkTask.put`."""
    rows: list[Row] = []
    for r in records:
        if r.partition is None or r.offset is None:
            raise ConnectException(f"record of topic {r.topic!r} has no queue position")
        queue, offset = int(r.partition["queueId"]), int(r.offset["queueOffset"]) - 1
        rows.append(
            (r.topic or "", queue, offset, to_bytes(r.key), to_bytes(r.value), r.extensions)
        )
    return rows


def row_record(row: Row) -> ConnectRecord:
    """The record a row came from (for `SinkTaskContext.dead_letter`)."""
    topic, queue, offset, key, value, headers = row
    return ConnectRecord(
        value=value,
        key=key,
        partition={"topic": topic, "queueId": str(queue)},
        offset={"queueOffset": offset + 1},
        extensions=dict(headers),
        topic=topic,
    )


def row_name(row: Row) -> str:
    """How errors name a record: ``record {topic='t', queue=3, offset=17}``."""
    return f"record {{topic={row[0]!r}, queue={row[1]}, offset={row[2]}}}"


def shares(names: list[str], max_tasks: int) -> list[list[str]]:
    """`names` (streams, lists, topic filters) spread over at most `max_tasks` tasks."""
    tasks = max(1, min(max_tasks, len(names)))
    return [names[i::tasks] for i in range(tasks)]


def addressed(row: Row, fmt: str, fmt_key: str, key_header: str, drop: str) -> tuple[str, dict]:
    """Where a message system's sink sends `row` and the headers it carries.

    `fmt` (the value of config key `fmt_key`) has ``${topic}`` and ``${key}`` replaced; the key
    travels as header `key_header` (headers are text: a key that is not UTF-8 fails naming the
    record); the extensions are the other headers, less `drop` (what the system's own source
    recorded about the message it read, e.g. its subject).
    """
    topic, key = row[0], row[3]
    headers = {k: v for k, v in row[5].items() if k != drop}
    target = fmt.replace("${topic}", topic)
    if key is not None:
        try:
            text = key.decode()
        except UnicodeDecodeError:
            raise ConnectException(
                f"{row_name(row)}: its key is not UTF-8 text, which a header ({key_header}) "
                "must be",
                suggestion="convert the key to text (key.converter) before this sink",
            ) from None
        headers[key_header] = text
        target = target.replace("${key}", text)
    elif "${key}" in target:
        raise ConnectException(f"{row_name(row)}: null key, which {fmt_key}={fmt!r} needs")
    return target, headers
