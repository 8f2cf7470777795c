"""RabbitMQ sources: stream queues by offset (exactly-once) and classic queues (at-least-once).

`RabbitMQStreamSourceConnector` — delivery: exactly-once. A stream queue
(``x-queue-type=stream``) keeps its messages and numbers them; the task reads exact offset ranges
(consuming with ``x-stream-offset``), so a replayed micro-batch reads the same messages again.
Position: ``{"queue": <name>}`` → ``{"offset": n}``, the stream offset of the last delivered
message. Where the stream ends now is found by consuming its last chunk (``x-stream-offset=last``)
on the driver; an empty stream costs up to ``rabbitmq.stream.wait.ms`` per micro-batch. Messages
removed by the stream's retention after the committed position before they were read fail the task
naming the queue: they cannot be delivered. Unit of parallelism: one stream queue per task.

`RabbitMQSourceConnector` — delivery: at-least-once. A classic (or quorum) queue is consumed with
manual acknowledgements: each poll hands over what arrived, and the messages are acknowledged
(``basic.ack``, multiple) only after the micro-batch that carried them committed. At most
``rabbitmq.prefetch.count`` unacknowledged messages per queue are held (``basic.qos``), which
bounds a micro-batch and the memory it takes. When the process dies or the connection drops, the
broker gives the unacknowledged messages to the next consumer: they reach the topic again.
Unit of parallelism: one queue per task.

Record mapping (both): the body → value (BYTES); the routing key → key (or the header named by
``rabbitmq.key.header``); the other headers → extensions (text), except the broker's
``x-stream-*``; the ``timestamp`` property (seconds) → timestamp. `RabbitMQSinkConnector` routes
by the record key by default, so a topic copied through an exchange into a queue keeps its keys.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from sluice.connectors._messaging import NamedSourceConnector, source_batch
from sluice.connectors.rabbitmq._client import check_exists, connect, failure, header_text, probe
from sluice.connectors.rabbitmq._config import QUEUE_CONFIG, STREAM_CONFIG, Settings
from sluice.connectors.rabbitmq._config import client_options as rabbitmq_options
from sluice.sdk import (
    ClientOption,
    ConfigException,
    ConnectException,
    ConnectRecord,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    RetriableException,
    SourceTask,
)
from sluice.sdk.extras import RABBITMQ
from sluice.sdk.retry import LoopReport

_ROWS = 5000  # records per Arrow batch read() yields
_READ_RETRY_S = 120.0  # how long read() waits for a server that went away
_CHUNK_IDLE_S = 0.02  # a chunk's messages come in one burst: this quiet means it ended


class _Mapping:
    """Messages → record columns, the same for both sources."""

    def __init__(self, topic: str | None, key_header: str) -> None:
        self.topic = topic
        self.key_header = key_header

    def key(self, method: Any, headers: dict[str, Any]) -> bytes | None:
        if self.key_header:
            value = headers.get(self.key_header)
            return None if value is None else header_text(value).encode()
        return method.routing_key.encode()

    def extensions(self, headers: dict[str, Any]) -> dict[str, str]:
        return {
            k: header_text(v)
            for k, v in headers.items()
            if not k.startswith("x-stream-") and k != self.key_header
        }

    def batch(self, queue: str, messages: list[tuple[Any, Any, bytes]]) -> pa.RecordBatch:
        keys, stamps, headers = [], [], []
        for method, props, _ in messages:
            found = props.headers or {}
            keys.append(self.key(method, found))
            stamps.append(props.timestamp * 1_000_000 if props.timestamp else None)
            headers.append(list(self.extensions(found).items()) or None)
        values = [m[2] for m in messages]
        return source_batch(self.topic or queue, keys, values, stamps, headers)


def _stream_offset(queue: str, props: Any) -> int:
    offset = (props.headers or {}).get("x-stream-offset")
    if offset is None:
        raise ConnectException(
            f"rabbitmq.queues: queue {queue!r} is not a stream queue (its messages carry no "
            "x-stream-offset)",
            suggestion="declare it with x-queue-type=stream, or read it with "
            "RabbitMQSourceConnector",
        )
    return int(offset)


class RabbitMQStreamSourceTask(ReplayableSourceTask):
    """Reads its stream queues in exact offset ranges."""

    def start(self, config: Mapping[str, str]) -> None:
        values = STREAM_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.queues: list[str] = values["rabbitmq.queues"]
        self.prefetch = values["rabbitmq.prefetch.count"]
        self.wait_s = values["rabbitmq.stream.wait.ms"] / 1000
        self.mapping = _Mapping(values["connect.topicname"] or None, values["rabbitmq.key.header"])
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None or not self._conn.is_open:
            self._conn = connect(self.settings)
        return self._conn

    def _guarded(self, doing: str, fn: Any) -> Any:
        try:
            return fn()
        except (ConnectException, RetriableException):
            raise
        except Exception as exc:
            self._conn = None
            raise failure(self.settings, doing, exc, name_key="rabbitmq.queues") from None

    def partitions(self) -> list[RecordPartition]:
        return [{"queue": q} for q in self.queues]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        queue = partition["queue"]
        last = self._guarded(f"finding the end of stream {queue}", lambda: self._last(queue))
        if last is None:
            return start
        if start is not None and last <= start["offset"]:
            return start
        if limit.max_rows is not None:
            if start is None:
                first = self._guarded(f"reading stream {queue}", lambda: self._first(queue))
                last = min(last, first + limit.max_rows - 1)
            else:
                last = min(last, start["offset"] + limit.max_rows)
        return {"offset": last}

    def _offsets(self, queue: str, where: Any, idle_s: float, prefetch: int) -> list[int]:
        """Offsets of the messages a consumer from `where` gets until the stream goes quiet."""
        conn = self._connection()
        channel = conn.channel()
        seen: list[int] = []

        def on_message(ch: Any, method: Any, props: Any, _body: bytes) -> None:
            seen.append(_stream_offset(queue, props))
            if idle_s:
                ch.basic_ack(method.delivery_tag)  # credit for the rest of the chunk

        try:
            channel.basic_qos(prefetch_count=prefetch)
            channel.basic_consume(queue, on_message, arguments={"x-stream-offset": where})
            deadline = time.monotonic() + self.wait_s
            while not seen and time.monotonic() < deadline:
                conn.process_data_events(time_limit=min(0.05, self.wait_s))
            count = -1
            while len(seen) != count and idle_s:
                count = len(seen)
                conn.process_data_events(time_limit=idle_s)
        finally:
            self._close(channel)
        return seen

    def _close(self, channel: Any) -> None:
        # pika rejects the messages it received but did not hand over yet when a consumer is
        # cancelled, and a stream queue answers a reject by closing the connection: harmless
        # here (the stream keeps its messages), so the connection is just opened again.
        try:
            if channel.is_open:
                channel.close()
        except Exception:
            self._conn = None

    def _last(self, queue: str) -> int | None:
        seen = self._offsets(queue, "last", _CHUNK_IDLE_S, self.prefetch)
        return max(seen) if seen else None

    def _first(self, queue: str) -> int:
        return min(self._offsets(queue, "first", 0, 1))

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        queue, stop = partition["queue"], int(end["offset"])
        following = None if start is None else int(start["offset"]) + 1
        # On an executor nothing retries a failed read for us, and a read cannot be restarted
        # half-way (it already yielded): after a lost connection, consume again from the message
        # after the last one yielded, with backoff, for up to _READ_RETRY_S.
        # Each retry is reported to the task's watcher (the status's "retrying" note), read
        # when it happens: the engine sets it around each step of this generator.
        deadline = time.monotonic() + _READ_RETRY_S
        delay, report = 0.3, LoopReport()
        while following is None or following <= stop:
            try:
                for batch, last in self._range(queue, following, stop):
                    report.settled()
                    yield batch
                    following, deadline = last + 1, time.monotonic() + _READ_RETRY_S
                report.settled()
                return
            except RetriableException as exc:
                self._conn = None
                if time.monotonic() + delay > deadline:
                    report.settled()
                    raise
                report.retrying(exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _range(
        self, queue: str, following: int | None, stop: int
    ) -> Iterator[tuple[pa.RecordBatch, int]]:
        """Batches of the messages from offset `following` (None: the first) to `stop`, each
        with its last offset."""
        doing = f"reading stream {queue}"
        channel = self._guarded(doing, lambda: self._connection().channel())
        where = "first" if following is None else following
        messages: list[tuple[Any, Any, bytes]] = []
        last, credit = -1, max(1, self.prefetch // 2)
        try:
            self._guarded(doing, lambda: channel.basic_qos(prefetch_count=self.prefetch))
            stream = self._guarded(
                doing,
                lambda: channel.consume(
                    queue,
                    arguments={"x-stream-offset": where},
                    inactivity_timeout=self.settings.timeout_s,
                ),
            )
            while last < stop:
                method, props, body = self._guarded(doing, lambda: next(stream))
                if method is None:
                    continue  # the range exists: wait for it (a read timeout raises)
                offset = _stream_offset(queue, props)
                if following is not None and last < 0 and offset > following:
                    raise ConnectException(
                        f"rabbitmq.queues: messages of stream {queue!r} from offset {following} "
                        f"to {offset - 1} were removed (retention) before they were read",
                        suggestion="raise the stream's retention, or reset the connector's offsets",
                    )
                if offset > stop:
                    break
                last = offset
                messages.append((method, props, body))
                if len(messages) % credit == 0:  # acks are a stream consumer's credit
                    channel.basic_ack(method.delivery_tag, multiple=True)
                if len(messages) >= _ROWS or last == stop:
                    yield self.mapping.batch(queue, messages), last
                    messages = []
            if messages:
                yield self.mapping.batch(queue, messages), last
        finally:
            self._close(channel)

    def stop(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()
        self._conn = None


def _check_stream(connection: Any, settings: Settings, queue: str) -> None:
    """`queue` is a stream queue: the broker refuses an ``x-stream-offset`` consumer on others."""
    channel = connection.channel()
    try:
        channel.basic_qos(prefetch_count=1)
        tag = channel.basic_consume(queue, lambda *_: None, arguments={"x-stream-offset": "next"})
        channel.basic_cancel(tag)
        channel.close()
    except Exception as exc:
        raise ConfigException(
            "rabbitmq.queues",
            f"queue {queue!r} on {settings.where} is not a stream queue ({exc!r})",
            suggestion="declare it with x-queue-type=stream, or read it with "
            "RabbitMQSourceConnector",
        ) from None


class RabbitMQStreamSourceConnector(NamedSourceConnector):
    """Copies RabbitMQ stream queues (``rabbitmq.queues``) into a topic by offset, exactly once,
    with keys (routing keys), headers and timestamps."""

    names_key = "rabbitmq.queues"
    config_def = STREAM_CONFIG
    task_class = RabbitMQStreamSourceTask
    requires = (RABBITMQ,)
    offset_counts = ("offset",)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters of rabbitmq.url (each ssl_options entry on its own)."""
        return rabbitmq_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = STREAM_CONFIG.parse(config)
        settings = Settings.of(values)
        check_exists(settings, "rabbitmq.queues", "queue", values["rabbitmq.queues"])
        connection = probe(settings)
        try:
            for queue in values["rabbitmq.queues"]:
                _check_stream(connection, settings, queue)
        finally:
            connection.close()

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=100_000)


def _queue_names(values: Mapping[str, Any]) -> list[str]:
    names = values["rabbitmq.queues"] or (
        [values["destinationName"]] if values["destinationName"] else []
    )
    if not names:
        raise ConfigException("rabbitmq.queues", "required key is missing (or destinationName)")
    return names


class RabbitMQSourceTask(SourceTask):
    """Consumes its queues with manual acks; acknowledges after the commit."""

    def start(self, config: Mapping[str, str]) -> None:
        values = QUEUE_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.queues = _queue_names(values)
        self.prefetch = values["rabbitmq.prefetch.count"]
        self.take = max(1, self.prefetch // 2)
        self.mapping = _Mapping(values["connect.topicname"] or None, values["rabbitmq.key.header"])
        self._conn: Any = None
        self._channels: dict[str, Any] = {}
        self._generation = 0  # delivery tags belong to one channel: count the channels opened
        self._arrived: list[tuple[str, Any, Any, bytes]] = []

    def _open(self) -> None:
        self._conn = connect(self.settings)
        self._generation += 1
        self._arrived.clear()
        for queue in self.queues:
            channel = self._conn.channel()
            channel.basic_qos(prefetch_count=self.prefetch)
            channel.basic_consume(
                queue, lambda _ch, m, p, b, q=queue: self._arrived.append((q, m, p, b))
            )
            self._channels[queue] = channel

    def poll(self) -> list[ConnectRecord]:
        try:
            if self._conn is None or not self._conn.is_open:
                self._open()
            self._conn.process_data_events(time_limit=0)
        except ConnectException:  # from connecting: already ours
            self._drop()
            raise
        except Exception as exc:
            self._drop()
            raise failure(self.settings, "consuming", exc, name_key="rabbitmq.queues") from None
        # At most half the prefetch per poll: the broker sends no more than the prefetch
        # unacknowledged, and the messages of a micro-batch are acknowledged only when Spark plans
        # the next one, which needs records — the other half, waiting here.
        arrived, self._arrived = self._arrived[: self.take], self._arrived[self.take :]
        records = []
        for queue, method, props, body in arrived:
            found = props.headers or {}
            records.append(
                ConnectRecord(
                    value=body,
                    key=self.mapping.key(method, found),
                    partition={"queue": queue},
                    offset={"tag": method.delivery_tag, "channel": self._generation},
                    timestamp=datetime.fromtimestamp(props.timestamp, UTC)
                    if props.timestamp
                    else None,
                    extensions=self.mapping.extensions(found),
                    topic=self.mapping.topic or queue,
                )
            )
        return records

    def commit(self, records: list[ConnectRecord]) -> None:
        last: dict[str, int] = {}
        for record in records:
            offset, queue = record.offset or {}, (record.partition or {}).get("queue")
            if offset.get("channel") == self._generation and queue in self._channels:
                last[queue] = max(last.get(queue, 0), int(offset["tag"]))
        # Commits come in poll order, so every tag up to the last one is committed. A tag of a
        # channel since lost is not acknowledged: the broker gives that message again.
        for queue, tag in last.items():
            try:
                self._channels[queue].basic_ack(tag, multiple=True)
            except Exception:
                self._drop()  # the next poll opens a new connection

    def _drop(self) -> None:
        """Forget the connection, closing it first (best effort): while the broker still sees
        a connection open, the messages delivered on it stay unacknowledged there and are not
        given to the next one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                if conn.is_open:
                    conn.close()

    def stop(self) -> None:
        self._drop()


class RabbitMQSourceConnector(NamedSourceConnector):
    """Consumes RabbitMQ queues (``rabbitmq.queues``) with manual acks after the commit:
    at-least-once, at most ``rabbitmq.prefetch.count`` unacknowledged messages per queue."""

    names_key = "rabbitmq.queues"
    config_def = QUEUE_CONFIG
    task_class = RabbitMQSourceTask
    requires = (RABBITMQ,)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters of rabbitmq.url (each ssl_options entry on its own)."""
        return rabbitmq_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = QUEUE_CONFIG.parse(config)
        key = "rabbitmq.queues" if values["rabbitmq.queues"] else "destinationName"
        check_exists(Settings.of(values), key, "queue", _queue_names(values))

    def names(self, values: Mapping[str, Any]) -> list[str]:
        return _queue_names(values)


__all__ = [
    "RabbitMQSourceConnector",
    "RabbitMQSourceTask",
    "RabbitMQStreamSourceConnector",
    "RabbitMQStreamSourceTask",
]
