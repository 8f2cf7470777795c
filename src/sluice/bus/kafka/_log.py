"""Topics on Kafka through confluent-kafka (librdkafka): the `TopicLog` of `bus=kafka`.

* A sluice topic is a Kafka topic, a queue is a partition, a queue offset is the Kafka offset.
* Writes go through the commit journal of :mod:`sluice.bus._external` and an idempotent producer
  with ``enable.gapless.guarantee`` (a failure that could leave a gap in a partition is fatal
  instead), so what reached a partition is always a prefix of what was sent; each message carries
  the ``sluice.writer`` header. Key → Kafka key, extensions → headers, timestamp → CreateTime.
* Reads are ``assign`` + position at the exact start offset, consuming up to the end offset, with
  ``auto.offset.reset=error``: a range that retention removed is reported, never silently skipped.
* Consumer-group offsets (``commit_group_offsets``) are committed for monitoring only.

Clients are created lazily, once per process and configuration (Spark reuses its Python workers,
so a task usually finds its consumer already connected), and are never pickled.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sluice.bus._external import WRITER_TAG, ExternalLog, headers_without_tag
from sluice.bus.base import (
    STORED_SCHEMA,
    BusError,
    BusUnavailable,
    OffsetOutOfRange,
    QueueRange,
    TopicInfo,
    UnknownTopic,
)

log = logging.getLogger(__name__)
_client_log = logging.getLogger("sluice.bus.kafka.librdkafka")

_T = TypeVar("_T")
_CHUNK = 10_000  # messages per consume() call and per Arrow batch
_LOCK = threading.Lock()
# (pid, role, config) -> client: shared by every KafkaLog copy in a process (each Spark task
# unpickles its own copy of the plan).
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENT_LOCKS: dict[tuple[Any, ...], threading.RLock] = {}
_ABANDONED: dict[str, float] = {}  # bootstrap.servers -> when a failed producer was dropped


def _kafka() -> Any:
    try:
        import confluent_kafka
        import confluent_kafka.admin  # a submodule the package does not import itself
    except ImportError as exc:  # pragma: no cover - a dependency of sluice
        raise BusError(
            "bus=kafka needs the confluent-kafka package: pip install confluent-kafka"
        ) from exc
    return confluent_kafka


class _Sender:
    """An idempotent producer plus the delivery errors it reported (only errors are reported)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.errors: list[str] = []
        self.fatal: str | None = None

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"partition {msg.partition()}: {err.str()}")

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = err.str()

        self.producer = _kafka().Producer(
            {
                **config,
                "on_delivery": on_delivery,
                "error_cb": on_error,
                "delivery.report.only.error": True,
            }
        )


class KafkaLog(ExternalLog):
    """Topics on a Kafka cluster (``bootstrap.servers``), with ``client_config`` passed through to
    every librdkafka client (security, timeouts, …). Picklable; see the module docstring."""

    broker_name = "kafka"

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
        outage_s: float = 300.0,
    ) -> None:
        super().__init__(state_dir, outage_s=outage_s)
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"KafkaLog(bootstrap.servers={self.bootstrap_servers!r})"

    # -- clients ---------------------------------------------------------------------------------
    def _base(self) -> dict[str, Any]:
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers}

    def _client(
        self, role: str, extra: Mapping[str, Any], make: Callable[[dict], _T]
    ) -> tuple[_T, threading.RLock]:
        """This process's client for ``role`` (created on first use) and the lock that
        serialises its use by threads (a consumer's assignment is shared state)."""
        config = {**self._base(), **extra}
        key = (os.getpid(), role, tuple(sorted((k, str(v)) for k, v in config.items())))
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                try:
                    client = make({**config, "logger": _client_log})
                except _kafka().KafkaException as exc:
                    raise self._error("cannot create a client", exc) from None
                _CLIENTS[key] = client
                _CLIENT_LOCKS[key] = threading.RLock()
            return client, _CLIENT_LOCKS[key]

    def _admin(self) -> Any:
        return self._client("admin", {}, lambda c: _kafka().admin.AdminClient(c))[0]

    _CONSUMER = {
        "group.id": "sluice-reader",  # never joined: the reader assigns partitions itself
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
    }

    def _consumer(self) -> tuple[Any, threading.RLock]:
        return self._client("consumer", self._CONSUMER, lambda c: _kafka().Consumer(c))

    _PRODUCER = {
        "enable.idempotence": True,
        "enable.gapless.guarantee": True,
        "linger.ms": 5,
        "queue.buffering.max.messages": 500_000,
    }

    def _sender(self) -> tuple[_Sender, threading.RLock]:
        return self._client("producer", self._PRODUCER, _Sender)

    def _drop_sender(self, sender: _Sender) -> None:
        """Forget a producer that failed. Its queued messages are purged (so they can never be
        sent later, behind the replay's back); requests already in flight may still land for a
        while, which `_before_recount` waits out."""
        config = {**self._base(), **self._PRODUCER}
        key = (os.getpid(), "producer", tuple(sorted((k, str(v)) for k, v in config.items())))
        with _LOCK:
            _CLIENTS.pop(key, None)
            _ABANDONED[self.bootstrap_servers] = time.monotonic()
        try:
            sender.producer.purge(in_queue=True, in_flight=True, blocking=True)
            sender.producer.poll(0)
        except Exception as exc:  # it is being thrown away anyway
            log.debug("purging a failed producer: %s", exc)

    def _before_recount(self, topic: str) -> None:
        # A producer dropped after a failure may still have requests in flight: wait until they
        # have certainly landed or failed before counting what a batch left in its partitions.
        dropped = _ABANDONED.get(self.bootstrap_servers)
        if dropped is not None:
            window = int(self._base().get("request.timeout.ms", 30_000)) / 1000.0
            time.sleep(max(0.0, dropped + window - time.monotonic()))

    def _error(self, what: str, exc: Exception, *, transient: tuple[int, ...] = ()) -> BusError:
        err = exc.args[0] if exc.args else None
        text = f"{err.str()} ({err.name()})" if hasattr(err, "str") else str(exc)
        message = f"kafka bootstrap.servers={self.bootstrap_servers}: {what}: {text}"
        kafka_error = _kafka().KafkaError
        transient = {
            kafka_error._TRANSPORT,
            kafka_error._TIMED_OUT,
            kafka_error._ALL_BROKERS_DOWN,
            kafka_error._RESOLVE,
            kafka_error._MSG_TIMED_OUT,
            kafka_error._WAIT_COORD,
            kafka_error.LEADER_NOT_AVAILABLE,
            kafka_error.NOT_LEADER_FOR_PARTITION,
            kafka_error.REQUEST_TIMED_OUT,
            kafka_error.NETWORK_EXCEPTION,
            *transient,
        }
        if hasattr(err, "code") and (err.code() in transient or err.retriable()):
            return BusUnavailable(message, suggestion="is the Kafka cluster up and reachable?")
        return BusError(message)

    # -- admin -----------------------------------------------------------------------------------
    def _metadata(self) -> dict[str, int]:
        """Partition count per topic."""
        try:
            md = self._admin().list_topics(timeout=self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error("cannot list topics", exc) from None
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def check(self) -> None:
        """Raise :class:`BusUnavailable` unless the cluster answers (used at worker start)."""
        self._metadata()

    def topics(self) -> list[str]:
        return sorted(self._metadata())

    def topic_exists(self, topic: str) -> bool:
        return topic in self._metadata()

    def queue_count(self, topic: str) -> int:
        count = self._metadata().get(topic)
        if count is None:
            raise UnknownTopic(topic)
        return count

    def create_topic(self, topic: str, queues: int = 8, *, exist_ok: bool = True) -> TopicInfo:
        if topic in self._metadata():
            if not exist_ok:
                raise FileExistsError(f"topic {topic!r} already exists")
            return self.describe(topic)
        kafka = _kafka()
        future = self._admin().create_topics(
            [kafka.admin.NewTopic(topic, queues)], request_timeout=self.timeout_s
        )[topic]
        try:
            future.result()
        except kafka.KafkaException as exc:
            code = exc.args[0].code()
            if code == kafka.KafkaError._UNSUPPORTED_FEATURE:
                # No topic admin API (e.g. librdkafka's mock cluster): let the broker create it
                # on first use, with its own default partition count (`num.partitions`).
                self._auto_create(topic)
            elif code != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._error(f"cannot create topic {topic!r}", exc) from None
        deadline = time.monotonic() + self.timeout_s
        while (count := self._metadata().get(topic)) is None:
            if time.monotonic() > deadline:
                raise BusError(f"kafka: topic {topic!r} was created but never became visible")
            time.sleep(0.1)
        if count != queues:
            log.warning(
                "kafka topic %r has %d partitions (the broker's default), not %d",
                topic,
                count,
                queues,
            )
        return self.describe(topic)

    def _auto_create(self, topic: str) -> None:
        try:
            self._sender()[0].producer.list_topics(topic, timeout=self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot create topic {topic!r}", exc) from None

    def offsets(self, topic: str) -> dict[int, QueueRange]:
        count = self.queue_count(topic)
        lows = self._list_offsets(topic, list(range(count)), latest=False)
        highs = self._list_offsets(topic, list(range(count)), latest=True)
        return {q: QueueRange(q, lows[q], highs[q]) for q in range(count)}

    def _list_offsets(self, topic: str, queues: list[int], *, latest: bool) -> dict[int, int]:
        if not queues:
            return {}
        kafka = _kafka()
        spec = kafka.admin.OffsetSpec.latest() if latest else kafka.admin.OffsetSpec.earliest()
        futures = self._admin().list_offsets(
            {kafka.TopicPartition(topic, q): spec for q in queues},
            request_timeout=self.timeout_s,
        )
        out = {}
        try:
            for tp, future in futures.items():
                out[tp.partition] = future.result().offset
        except kafka.KafkaException as exc:
            # "no leaders found" (_NOENT) for a topic that exists: its brokers are down
            raise self._error(
                f"cannot list offsets of topic {topic!r}", exc, transient=(kafka.KafkaError._NOENT,)
            ) from None
        return out

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (needs the topic admin API)."""
        future = self._admin().delete_topics([topic], request_timeout=self.timeout_s)[topic]
        try:
            future.result()
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot delete topic {topic!r}", exc) from None

    # -- reading ---------------------------------------------------------------------------------
    def read(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        ranges = self.offsets(topic)
        if queue not in ranges:
            raise ValueError(f"invalid queue {queue!r} for topic {topic!r}")
        rng = ranges[queue]
        if start < rng.min_offset or start > rng.max_offset:
            raise OffsetOutOfRange(topic, queue, start, rng.min_offset, rng.max_offset)
        stop = min(end, rng.max_offset)
        if stop <= start:
            return iter(())
        return self._read(topic, queue, start, stop)

    def _read(
        self, topic: str, queue: int, start: int, stop: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        for first, rows in self._consume(topic, queue, start, stop):
            yield first, _to_batch(rows)

    def _consume(
        self, topic: str, queue: int, start: int, stop: int
    ) -> Iterator[tuple[int, list[Any]]]:
        """Messages with ``start <= offset < stop`` in chunks of ``(first offset, messages)``."""
        kafka = _kafka()
        consumer, lock = self._consumer()
        with lock:
            consumer.assign([kafka.TopicPartition(topic, queue, start)])
            try:
                pos = start
                idle_since = time.monotonic()
                while pos < stop:
                    msgs = consumer.consume(num_messages=min(stop - pos, _CHUNK), timeout=0.2)
                    rows = []
                    for m in msgs:
                        err = m.error()
                        if err is not None:
                            self._raise_read_error(topic, queue, pos, err)
                        if m.offset() >= stop:
                            break
                        rows.append(m)
                    if rows:
                        idle_since = time.monotonic()
                        first = rows[0].offset()
                        pos = rows[-1].offset() + 1
                        yield first, rows
                    elif msgs and msgs[0].offset() >= stop:
                        break  # the records left before `stop` were not data (gaps)
                    elif time.monotonic() - idle_since > self.timeout_s:
                        raise BusUnavailable(
                            f"kafka bootstrap.servers={self.bootstrap_servers}: no data from "
                            f"topic {topic!r} partition {queue} at offset {pos} (expected up to "
                            f"{stop}) for {self.timeout_s:.0f}s"
                        )
            finally:
                consumer.unassign()

    def _raise_read_error(self, topic: str, queue: int, pos: int, err: Any) -> None:
        kafka = _kafka()
        if err.code() in (
            kafka.KafkaError._AUTO_OFFSET_RESET,
            kafka.KafkaError.OFFSET_OUT_OF_RANGE,
        ):
            rng = self.offsets(topic)[queue]
            raise OffsetOutOfRange(topic, queue, pos, rng.min_offset, rng.max_offset)
        raise self._error(f"reading topic {topic!r} partition {queue}", kafka.KafkaException(err))

    # -- the commit steps (see sluice.bus._external) ---------------------------------------------
    def _end_offsets(self, topic: str, queues: list[int]) -> dict[int, int]:
        return self._list_offsets(topic, queues, latest=True)

    def _count_tagged(self, topic: str, queue: int, start: int, tag: str) -> int:
        end = self._end_offsets(topic, [queue])[queue]
        wanted = tag.encode()
        count = 0
        for _, rows in self._consume(topic, queue, start, end) if end > start else ():
            for m in rows:
                if (WRITER_TAG, wanted) in (m.headers() or ()):
                    count += 1
        return count

    def _send(self, topic: str, tables: Mapping[int, pa.Table], tag: str) -> None:
        sender, lock = self._sender()
        with lock:  # one commit at a time per producer: its errors belong to that commit
            self._send_locked(sender, topic, tables, tag)

    def _send_locked(
        self, sender: _Sender, topic: str, tables: Mapping[int, pa.Table], tag: str
    ) -> None:
        producer = sender.producer
        sender.errors.clear()
        tag_header = (WRITER_TAG, tag.encode())
        try:
            for queue, table in sorted(tables.items()):
                for batch in table.to_batches(max_chunksize=_CHUNK):
                    self._produce(producer, topic, queue, batch, tag_header)
                    if sender.fatal or sender.errors:
                        break
            left = producer.flush(self.timeout_s)
        except _kafka().KafkaException as exc:
            self._drop_sender(sender)
            raise self._error(f"cannot write to topic {topic!r}", exc) from None
        if sender.fatal or sender.errors or left:
            self._drop_sender(sender)
            problem = sender.fatal or (sender.errors[0] if sender.errors else None)
            detail = problem or f"{left} messages not acknowledged within {self.timeout_s:.0f}s"
            raise BusUnavailable(
                f"kafka bootstrap.servers={self.bootstrap_servers}: writing topic {topic!r} "
                f"failed: {detail}",
                suggestion="the micro-batch is completed when it is replayed",
            )

    @staticmethod
    def _produce(
        producer: Any, topic: str, queue: int, batch: pa.RecordBatch, tag: tuple[str, bytes]
    ) -> None:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).fill_null(0)
        headers = batch.column("headers").to_pylist()
        for key, value, stamp, text in zip(keys, values, stamps.to_pylist(), headers, strict=True):
            hdrs = [tag]
            if text:
                hdrs.extend(
                    (k, None if v is None else str(v).encode()) for k, v in json.loads(text).items()
                )
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, partition=queue, timestamp=stamp, headers=hdrs
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it

    # -- monitoring ------------------------------------------------------------------------------
    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        if not offsets:
            return
        kafka = _kafka()
        extra = {"group.id": group, "enable.auto.commit": False}
        consumer, lock = self._client(f"group:{group}", extra, lambda c: kafka.Consumer(c))
        parts = [kafka.TopicPartition(t, q, o) for (t, q), o in sorted(offsets.items())]
        with lock:
            try:
                consumer.commit(offsets=parts, asynchronous=False)
            except kafka.KafkaException as exc:
                raise self._error(f"cannot commit offsets of group {group!r}", exc) from None

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The offsets committed under ``group`` for each partition of ``topic`` (-1: none)."""
        kafka = _kafka()
        extra = {"group.id": group, "enable.auto.commit": False}
        consumer, lock = self._client(f"group:{group}", extra, lambda c: kafka.Consumer(c))
        parts = [kafka.TopicPartition(topic, q) for q in range(self.queue_count(topic))]
        with lock:
            try:
                committed = consumer.committed(parts, timeout=self.timeout_s)
            except kafka.KafkaException as exc:
                raise self._error(f"cannot read offsets of group {group!r}", exc) from None
        return {tp.partition: tp.offset for tp in committed}


def _to_batch(rows: list[Any]) -> pa.RecordBatch:
    """Consumed messages as a STORED_SCHEMA batch plus their real offsets."""
    keys, values, stamps, headers, offsets = [], [], [], [], []
    for m in rows:
        keys.append(m.key())
        values.append(m.value())
        kind, millis = m.timestamp()
        stamps.append(millis * 1000 if kind else None)
        pairs = m.headers()
        headers.append(
            headers_without_tag(
                [(k, v.decode("utf-8", "replace") if v is not None else None) for k, v in pairs]
            )
            if pairs
            else None
        )
        offsets.append(m.offset())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(stamps, pa.int64()).cast(STORED_SCHEMA.field("timestamp").type),
            pa.array(headers, pa.string()),
            pa.array(offsets, pa.int64()),
        ],
        names=[*STORED_SCHEMA.names, "offset"],
    )
