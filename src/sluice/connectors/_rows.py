"""What a sink that sends each record as one message (Redis, RabbitMQ) sees of a micro-batch.

A `Row` is one record reduced to what such a sink writes: its topic queue and offset (0-based:
the record's position minus one), key and value as bytes, and headers as text. `rows_of_records`
and `rows_of_batch` build rows from the per-record and the Arrow paths of `SinkTask`, so a sink
implements one `_write(rows)`; `Refusals` gives up on single rows (dead letters) at most once per
record, however often a micro-batch is retried.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

import pyarrow as pa

from sluice.sdk import ConnectException, ConnectRecord, SinkTaskContext


class Row(NamedTuple):
    """One record as a message-writing sink sends it."""

    topic: str
    queue: int
    offset: int  # 0-based offset in the topic queue
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]

    @property
    def where(self) -> str:
        """The record named in messages: ``{topic='t', queue=3, offset=17}``."""
        return f"{{topic={self.topic!r}, queue={self.queue}, offset={self.offset}}}"


def encode(value: Any) -> bytes | None:
    """Bytes as they are, text as UTF-8, anything else (a struct, a number) as JSON text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")).encode()


def as_bytes(column: pa.Array) -> list[bytes | None]:
    """A key or value column as `encode` would give it, without a Python object per binary cell."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.binary()).to_pylist()
    return [encode(v) for v in column.to_pylist()]


def rows_of_records(records: Iterable[ConnectRecord]) -> list[Row]:
    """Rows of the records `SinkTask.put` receives (each must carry its queue position)."""
    rows = []
    for r in records:
        if r.partition is None or r.offset is None:
            raise ConnectException(f"record of topic {r.topic!r} has no queue position")
        queue, offset = int(r.partition["queueId"]), int(r.offset["queueOffset"]) - 1
        rows.append(Row(r.topic or "", queue, offset, encode(r.key), encode(r.value), r.extensions))
    return rows


def rows_of_batch(batch: pa.RecordBatch) -> list[Row]:
    """Rows of the Arrow batch `SinkTask.put_batch` receives."""
    headers = batch.column("headers").to_pylist()
    return [
        Row(*fields)
        for fields in zip(
            batch.column("topic").to_pylist(),
            batch.column("queue_id").to_pylist(),
            batch.column("queue_offset").to_pylist(),
            as_bytes(batch.column("key")),
            as_bytes(batch.column("value")),
            [json.loads(h) if h else {} for h in headers],
            strict=True,
        )
    ]


class Refusals:
    """Gives up on single rows through `SinkTaskContext.dead_letter`: dead-lettered with
    ``errors.tolerance=all``, else the micro-batch fails naming the record."""

    def __init__(self, context: SinkTaskContext) -> None:
        self.context = context
        self._done: set[tuple[str, int, int]] = set()

    def refuse(self, row: Row, message: str) -> None:
        """Refuse `row` once (executor): `put_batch` may be retried within one micro-batch."""
        if (row.topic, row.queue, row.offset) in self._done:
            return
        self._done.add((row.topic, row.queue, row.offset))
        record = ConnectRecord(
            value=row.value,
            key=row.key,
            partition={"topic": row.topic, "queueId": str(row.queue)},
            offset={"queueOffset": row.offset + 1},
            extensions=dict(row.headers),
            topic=row.topic,
        )
        self.context.dead_letter(record, message, exception_class="ConnectException")
