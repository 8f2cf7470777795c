"""Pieces shared by the connectors of message systems (Redis, RabbitMQ, NATS, MQTT).

Sinks: a `Row` is one record reduced to what such a sink sends: its topic queue and offset, key
and value as bytes, and headers as text. ``offset`` is the record's own queue offset (the position
*after* it, ``queueOffset``, minus one), so ``(topic, queue, offset)`` names one record for good:
sinks derive idempotency keys from it. `RowSinkTask` turns both the per-record and the Arrow path
of `SinkTask` into one `write_rows(rows)`; `Refusals` gives up on single rows (dead letters) at
most once per record, however often a micro-batch is retried; `addressed` says where a row goes.

Sources: `NamedSourceConnector` shares out the streams/queues/lists/filters it reads over its
tasks (`shares`), `source_batch` is the Arrow batch a replayable read yields, and `patiently`
rides out a short server outage inside a read.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple, TypeVar

import pyarrow as pa

from sluice.sdk import (
    HEADERS_TYPE,
    TIMESTAMP_TYPE,
    ConnectException,
    ConnectRecord,
    RetriableException,
    Schema,
    SinkTask,
    SinkTaskContext,
    SourceConnector,
)
from sluice.sdk.retry import Backoff, retry

T = TypeVar("T")


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


def to_bytes(value: Any) -> bytes | None:
    """A key or value as bytes: BYTES as they are, text as UTF-8, anything else (a struct, a
    number) as JSON text."""
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


def rows_of_records(records: Iterable[ConnectRecord]) -> list[Row]:
    """Rows of the records `SinkTask.put` receives (each must carry its queue position)."""
    rows = []
    for r in records:
        if r.partition is None or r.offset is None:
            raise ConnectException(f"record of topic {r.topic!r} has no queue position")
        queue, offset = int(r.partition["queueId"]), int(r.offset["queueOffset"]) - 1
        rows.append(
            Row(r.topic or "", queue, offset, to_bytes(r.key), to_bytes(r.value), r.extensions)
        )
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
            column_bytes(batch.column("key")),
            column_bytes(batch.column("value")),
            [json.loads(h) if h else {} for h in headers],
            strict=True,
        )
    ]


class RowSinkTask(SinkTask):
    """A sink task that writes `Row`s: `put` and `put_batch` both end in `write_rows`."""

    @abstractmethod
    def write_rows(self, rows: list[Row]) -> None:
        """Write these rows (executor, once or more per micro-batch), in order."""

    def put(self, records: list[ConnectRecord]) -> None:
        self.write_rows(rows_of_records(records))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        self.write_rows(rows_of_batch(batch))


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


def addressed(row: Row, fmt: str, fmt_key: str, key_header: str, drop: str) -> tuple[str, dict]:
    """Where a message system's sink sends `row` and the headers it carries.

    `fmt` (the value of config key `fmt_key`) has ``${topic}`` and ``${key}`` replaced; the key
    travels as header `key_header` (headers are text: a key that is not UTF-8 fails naming the
    record); the extensions are the other headers, less `drop` (what the system's own source
    recorded about the message it read, e.g. its subject).
    """
    headers = {k: v for k, v in row.headers.items() if k != drop}
    target = fmt.replace("${topic}", row.topic)
    if row.key is not None:
        try:
            text = row.key.decode()
        except UnicodeDecodeError:
            raise ConnectException(
                f"record {row.where}: its key is not UTF-8 text, which a header ({key_header}) "
                "must be",
                suggestion="convert the key to text (key.converter) before this sink",
            ) from None
        headers[key_header] = text
        target = target.replace("${key}", text)
    elif "${key}" in target:
        raise ConnectException(f"record {row.where}: null key, which {fmt_key}={fmt!r} needs")
    return target, headers


def shares(names: list[str], max_tasks: int) -> list[list[str]]:
    """`names` (streams, queues, lists, topic filters) dealt round-robin over at most
    `max_tasks` tasks (never an empty share)."""
    tasks = max(1, min(max_tasks, len(names)))
    return [names[i::tasks] for i in range(tasks)]


class NamedSourceConnector(SourceConnector):
    """A source of BYTES keys and values whose tasks share out the names listed under
    `names_key` (streams, queues, lists, topic filters): one name belongs to one task."""

    names_key: ClassVar[str]

    def names(self, values: Mapping[str, Any]) -> list[str]:
        """The names to share out, from the parsed configuration."""
        return values[self.names_key]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        names = self.names(self.config_def.parse(self.config))
        return [{**self.config, self.names_key: ",".join(s)} for s in shares(names, max_tasks)]

    def key_schema(self) -> Schema:
        return Schema.bytes_()

    def value_schema(self) -> Schema:
        return Schema.bytes_()


def source_batch(
    topic: str,
    keys: list[bytes | None],
    values: list[bytes | None],
    stamps: list[Any] | pa.Array,
    headers: list[list[tuple[str, str]] | None],
) -> pa.RecordBatch:
    """The columns `topic, key, value, timestamp, headers` of records bound for one topic:
    `stamps` are aware datetimes or microseconds since the epoch (None: unknown), or an Arrow
    array of them, `headers` lists of (name, text) pairs or None."""
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), len(values)),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(stamps, TIMESTAMP_TYPE),
            pa.array(headers, HEADERS_TYPE),
        ],
        names=["topic", "key", "value", "timestamp", "headers"],
    )


READ_PATIENCE_S = 120.0  # how long a source's read waits for a server that went away
READ_BACKOFF = Backoff(first_s=0.3, factor=2.0, max_s=5.0)


def patiently(fetch: Callable[[], T], *, after_failure: Callable[[], None] | None = None) -> T:
    """`fetch()`, tried again with backoff (0.3 s doubling to 5 s) while it raises
    `RetriableException`, for up to `READ_PATIENCE_S` (executor, inside a replayable read).

    On an executor nothing retries a failed read for us, and a read cannot be restarted half-way
    (it already yielded): fetching one page again is safe, so the read waits for the server here.
    `after_failure` runs after each failed try, the last one included (e.g. to forget a consumer
    of a lost connection).
    """

    def attempt() -> T:
        try:
            return fetch()
        except RetriableException:
            if after_failure is not None:
                after_failure()
            raise

    return retry(attempt, backoff=READ_BACKOFF, timeout_s=READ_PATIENCE_S)
