"""Pieces shared by the connectors of message systems (Redis, NATS, MQTT).

What a sink writes of each record, as plain tuples: a `Row` is ``(topic, queue, offset, key,
value, headers)``; ``offset`` is the record's own queue offset (the position *after* it,
``queueOffset``, minus one), so ``(topic, queue, offset)`` names one record for good: sinks derive
idempotency keys from it.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from sluice.sdk import (
    HEADERS_TYPE,
    ConnectException,
    ConnectRecord,
    RetriableException,
    Schema,
    SinkTask,
    SourceConnector,
)

T = TypeVar("T")
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


class NamedSourceConnector(SourceConnector):
    """A source of BYTES keys and values whose tasks share out the names listed under
    `names_key` (streams, lists, topic filters): one name belongs to one task."""

    names_key: ClassVar[str]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        names = self.config_def.parse(self.config)[self.names_key]
        return [{**self.config, self.names_key: ",".join(s)} for s in shares(names, max_tasks)]

    def key_schema(self) -> Schema:
        return Schema.bytes_()

    def value_schema(self) -> Schema:
        return Schema.bytes_()


class RowSinkTask(SinkTask):
    """A sink task that writes `Row`s: `put` and `put_batch` both end in `write_rows`."""

    @abstractmethod
    def write_rows(self, rows: list[Row]) -> None:
        """Write these rows (executor, once or more per micro-batch), in order."""

    def put(self, records: list[ConnectRecord]) -> None:
        self.write_rows(rows_of_records(records))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        self.write_rows(rows_of_batch(batch))


def bytes_batch(
    topic: str, keys: list, values: list, stamps: pa.Array, headers: list
) -> pa.RecordBatch:
    """A replayable source's batch of BYTES keys and values, all for `topic`: `stamps` typed
    `TIMESTAMP_TYPE`, `headers` lists of (name, text) pairs or None."""
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), len(values)),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            stamps,
            pa.array(headers, HEADERS_TYPE),
        ],
        names=["topic", "key", "value", "timestamp", "headers"],
    )


READ_PATIENCE_S = 120.0  # how long a source's read waits for a server that went away


def patiently(fetch: Callable[[], T], *, after_failure: Callable[[], None] | None = None) -> T:
    """`fetch()`, tried again with backoff (0.3 s doubling to 5 s) while it raises
    `RetriableException`, for up to `READ_PATIENCE_S` (executor, inside a replayable read).

    On an executor nothing retries a failed read for us, and a read cannot be restarted half-way
    (it already yielded): fetching one page again is safe, so the read waits for the server here.
    `after_failure` runs before each new try (e.g. to forget a consumer of a lost connection).
    """
    deadline = time.monotonic() + READ_PATIENCE_S
    delay = 0.3
    while True:
        try:
            return fetch()
        except RetriableException:
            if after_failure is not None:
                after_failure()
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
