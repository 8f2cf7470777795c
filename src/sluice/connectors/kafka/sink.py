"""KafkaSinkConnector: writes sluice topics to topics of a Kafka cluster.

Delivery: exactly-once, with Kafka transactions. Each task's share of a micro-batch is one
transaction of a producer whose ``transactional.id`` is ``sluice-sink-<connector>-<task>``: made
afresh for each micro-batch, its ``init_transactions`` aborts whatever an earlier producer of that
task left open (a worker killed mid-batch, a zombie) and fences it. Inside the transaction, beside
the records, a *batch marker* is committed: the consumer-group offset
``(first target topic, partition 0) = batch number + 1`` (metadata: the run) of the group
``sluice-sink-<connector>-<task>``. Records and marker become visible together or not at all. A
replayed micro-batch reads the marker first (``read_committed``, so only committed markers
count): if it names this batch, the records are already there and nothing is produced; if not,
nothing of the batch is visible and it is produced in a new transaction. Readers of the target
topics see each record once with ``isolation.level=read_committed``.
Unit of parallelism: one task per group of sluice queues (`max.tasks`).

Mapping: the record's topic → target topic by ``topic.rename.format``; sluice queue *q* → target
partition *q mod n*, so one key (one source partition) stays in order; key, value, extensions
(→ headers) and timestamp are kept. Client options pass through as ``target.kafka.<option>``,
under the worker's client policy (see `sluice.connectors.kafka._client`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.clients.kafka import PER_BATCH_PRODUCER, arrow_headers, arrow_millis, produce_rows
from sluice.connectors._replication import check_rename, renamed, target_queue
from sluice.connectors.kafka._client import (
    client,
    client_options,
    kafka,
    log,
    pass_through,
    probe,
    unavailable,
)
from sluice.connectors.kafka._config import SINK_CONFIG, SINK_KEY, SINK_PREFIX
from sluice.sdk import (
    KAFKA_CLIENT,
    BatchId,
    ClientOption,
    ConfigException,
    ConnectException,
    ConnectRecord,
    Delivery,
    RetriableException,
    SinkConnector,
    SinkTask,
)
from sluice.sdk.extras import KAFKA

_TRANSACTIONS = "the sink's exactly-once delivery (transactions, batch markers) depends on it"
#: librdkafka as the sink uses it: the options it sets itself are not the user's to change
FAMILY = KAFKA_CLIENT.reserving(
    {
        "bootstrap.servers": f"set {SINK_KEY}",
        "metadata.broker.list": f"set {SINK_KEY}",
        "enable.idempotence": _TRANSACTIONS,
        "transactional.id": _TRANSACTIONS,
        "isolation.level": _TRANSACTIONS,
        "group.id": _TRANSACTIONS,
        "group.instance.id": _TRANSACTIONS,
        "enable.auto.commit": _TRANSACTIONS,
        "linger.ms": "the sink sets 5 ms",
        "queue.buffering.max.ms": "the sink sets linger.ms=5",
    }
)


def _options(config: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **pass_through(config, SINK_PREFIX, FAMILY),
        "bootstrap.servers": values[SINK_KEY],
        "enable.idempotence": True,
        "linger.ms": 5,
    }


def transactional_id(connector: str, task: int) -> str:
    """The ``transactional.id`` of a sink task's producer (also its batch-marker group)."""
    return f"sluice-sink-{connector}-{task}"


class KafkaSinkTask(SinkTask):
    """Produces its records of each micro-batch in one Kafka transaction, committed in `flush`
    with the batch marker (see the module docstring)."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.servers = values[SINK_KEY]
        self.timeout_s = values["target.timeout.ms"] / 1000
        self.rename = values["topic.rename.format"]
        self.options = _options(config, values)
        self._partitions: dict[str, int] = {}
        self._failures: list[str] = []
        ctx = getattr(self, "context", None)
        name = ctx.connector_name if ctx is not None else "sink"
        self.txn_id = transactional_id(name, ctx.task_id if ctx is not None else 0)
        self.batch = ctx.batch_id if ctx is not None else None
        self._txn: Any = None  # this micro-batch's producer, once its transaction began
        self._marker: Any = None  # the TopicPartition of the batch marker
        self._done = False  # the marker says this batch is already delivered

    def _producer(self) -> Any:
        return client("producer", self.options, SINK_KEY)

    def _begin(self, first_topic: str) -> Any | None:
        """This micro-batch's transactional producer (made at the first record: it fences older
        producers of this task), or None when the batch marker says it was delivered already."""
        if self._txn is not None or self._done:
            return self._txn
        k = kafka()
        producer = _make_txn(
            {
                **PER_BATCH_PRODUCER,
                **self.options,
                "transactional.id": self.txn_id,
                # delivery failures of put_batch's records (put's name their own callback)
                "on_delivery": self._delivered,
                "delivery.report.only.error": True,
            },
            self.timeout_s,
            SINK_KEY,
            self.servers,
        )
        self._marker = k.TopicPartition(first_topic, 0)
        group = {**self.options, "group.id": self.txn_id, "isolation.level": "read_committed"}
        group.pop("enable.idempotence", None)
        group.pop("linger.ms", None)
        self._group = client("consumer", group, SINK_KEY)
        if self.batch is not None and self.batch.number < 0:
            # Spark gave no batch number (no streaming batch id in the task's context): no
            # marker can name this batch, so none is read or written (at-least-once then).
            log.warning("%s: no micro-batch number, the batch marker is not used", self.txn_id)
        elif self.batch is not None:
            try:
                (stored,) = self._group.committed([self._marker], timeout=self.timeout_s)
            except k.KafkaException as exc:
                raise unavailable(SINK_KEY, self.servers, "reading the batch marker", exc) from None
            if stored.offset >= self.batch.number + 1 and stored.metadata == self.batch.run:
                self._done = True  # a replay of a delivered batch: produce nothing
                return None
        try:
            producer.begin_transaction()
        except k.KafkaException as exc:
            raise unavailable(SINK_KEY, self.servers, "beginning a transaction", exc) from None
        self._txn = producer
        return producer

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            try:
                meta = self._producer().list_topics(topic=topic, timeout=self.timeout_s)
            except kafka().KafkaException as exc:
                raise unavailable(SINK_KEY, self.servers, f"metadata of {topic!r}", exc) from None
            found = meta.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise ConnectException(
                    f"{SINK_KEY}={self.servers}: topic {topic!r} does not exist "
                    f"({found.error if found is not None else 'no metadata'})",
                    suggestion="create it, or let the cluster create topics automatically",
                )
            count = self._partitions[topic] = len(found.partitions)
        return count

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failures.append(f"{msg.topic()}: {err}")

    def put(self, records: list[ConnectRecord]) -> None:
        if not records:
            return
        topics = [renamed(self.rename, r.topic or "") for r in records]
        for topic in set(topics):  # before producing: a retried put must not produce twice
            self._partition_count(topic)
        producer = self._begin(topics[0])
        if producer is None:
            return
        for r, topic in zip(records, topics, strict=True):
            queue = int((r.partition or {}).get("queueId", 0))
            key = r.key.encode() if isinstance(r.key, str) else r.key
            value = r.value.encode() if isinstance(r.value, str) else r.value
            stamp = int(r.timestamp.timestamp() * 1000) if r.timestamp else 0
            self._produce(producer, topic, queue, key, value, stamp, list(r.extensions.items()))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        topics = batch.column("topic")
        names = topics.unique().to_pylist()
        targets = {name: renamed(self.rename, name) for name in names}
        for target in set(targets.values()):  # before producing: a retried put must not
            self._partition_count(target)  # produce twice
        producer = self._begin(targets[topics[0].as_py()])
        if producer is None:
            return
        for name in names:
            rows = batch if len(names) == 1 else batch.filter(pc.equal(topics, name))
            target = targets[name]
            count = self._partition_count(target)
            # sluice queue q → target partition q mod n, each partition's rows in batch order
            where = pc.cast(rows.column("queue_id"), pa.int64())
            where = pc.subtract(where, pc.multiply(pc.divide(where, count), count))
            partitions = where.unique().to_pylist()
            for partition in partitions:
                part = rows if len(partitions) == 1 else rows.filter(pc.equal(where, partition))
                self._produce_batch(producer, target, partition, part)

    def _produce_batch(
        self, producer: Any, topic: str, partition: int, rows: pa.RecordBatch
    ) -> None:
        """One target partition's rows, produced column-wise (`sluice.clients.kafka`)."""
        keys = rows.column("key")
        produce_rows(
            producer,
            topic,
            partition,
            _as_bytes(rows.column("value")).to_pylist(),
            keys=None if keys.null_count == len(keys) else _as_bytes(keys).to_pylist(),
            millis=arrow_millis(rows.column("timestamp")),
            headers=arrow_headers(rows.column("headers")),
        )

    def _produce(
        self,
        producer: Any,
        topic: str,
        queue: int,
        key: bytes | None,
        value: bytes | None,
        stamp: int,
        headers: list[tuple[str, str]],
    ) -> None:
        partition = target_queue(queue, self._partition_count(topic))
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp=stamp,
                    headers=headers or None,
                    on_delivery=self._delivered,
                )
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)

    def flush(self, batch_id: BatchId) -> Any:
        producer, self._txn = self._txn, None
        if producer is None:
            return None  # no records, or a replay of a delivered batch
        k = kafka()
        failures, self._failures = self._failures, []
        try:
            if failures:
                producer.abort_transaction(self.timeout_s)
                raise RetriableException(
                    f"{SINK_KEY}={self.servers}: {len(failures)} records were not delivered "
                    f"(the transaction is aborted): {failures[0]}"
                )
            if batch_id.number >= 0:
                marker = k.TopicPartition(
                    self._marker.topic, 0, batch_id.number + 1, metadata=batch_id.run
                )
                producer.send_offsets_to_transaction(
                    [marker], self._group.consumer_group_metadata(), self.timeout_s
                )
            producer.commit_transaction(self.timeout_s)
        except k.KafkaException as exc:
            err = exc.args[0]
            if err.fatal():  # fenced: a newer producer of this task took over
                raise ConnectException(
                    f"{SINK_KEY}={self.servers}: the transaction of {self.txn_id} was refused: "
                    f"{err.str()}",
                    suggestion="another worker runs this task; nothing of this batch is visible",
                ) from None
            # Undecided or aborted: the replay's new producer settles it, then reads the marker.
            raise unavailable(SINK_KEY, self.servers, "committing the transaction", exc) from None
        return None

    def stop(self) -> None:
        producer, self._txn = self._txn, None
        if producer is not None:  # the batch failed before flush: nothing of it becomes visible
            try:
                producer.abort_transaction(self.timeout_s)
            except kafka().KafkaException:
                pass  # the next producer of this task aborts it in init_transactions


def _as_bytes(column: pa.Array) -> pa.Array:
    """A key or value column as bytes: text as its UTF-8, binary as it is."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column
    if not pa.types.is_string(column.type):
        column = column.cast(pa.string())
    return column.cast(pa.binary())


def _make_txn(config: dict[str, Any], timeout_s: float, key: str, servers: str) -> Any:
    """A new transactional producer, initialised (older producers of its id are fenced)."""
    k = kafka()
    try:
        producer = k.Producer({**config, "logger": log})
    except (k.KafkaException, ValueError, TypeError) as exc:
        raise ConfigException(key, f"invalid client configuration: {exc}") from None
    try:
        producer.init_transactions(timeout_s)
    except k.KafkaException as exc:
        raise unavailable(key, servers, "initialising the transactional producer", exc) from None
    return producer


class KafkaSinkConnector(SinkConnector):
    """Writes sluice topics to a Kafka cluster (``target.bootstrap.servers``), renamed by
    ``topic.rename.format``, with keys, headers and timestamps."""

    config_def = SINK_CONFIG
    task_class = KafkaSinkTask
    requires = (KAFKA,)
    guarantee = Delivery.EXACTLY_ONCE

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        return client_options(FAMILY, config, SINK_PREFIX)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        check_rename(values["topic.rename.format"])
        options = {
            **pass_through(config, SINK_PREFIX, FAMILY),
            "bootstrap.servers": values[SINK_KEY],
        }
        client("producer", _options(config, values), SINK_KEY)  # the producer options are valid
        try:
            with probe(options, SINK_KEY) as consumer:
                consumer.list_topics(timeout=min(5.0, values["target.timeout.ms"] / 1000))
        except kafka().KafkaException as exc:
            raise ConfigException(
                SINK_KEY, f"cannot reach the cluster at {values[SINK_KEY]}: {exc}"
            ) from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
