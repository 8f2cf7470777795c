"""KafkaSinkConnector: writes sluice topics to topics of a Kafka cluster.

Delivery: at-least-once. Each task's producer is idempotent (no duplicates from its own
retries), but a micro-batch replayed after a crash is produced again.
Unit of parallelism: one task per group of sluice queues (`max.tasks`).

Mapping: the record's topic → target topic by ``topic.rename.format``; sluice queue *q* → target
partition *q mod n*, so one key (one source partition) stays in order; key, value, extensions
(→ headers) and timestamp are kept. Client options pass through as ``target.kafka.<option>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors._replication import check_rename, renamed, target_queue
from sluice.connectors.kafka._client import client, kafka, pass_through, probe, unavailable
from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectException,
    ConnectRecord,
    RetriableException,
    SinkConnector,
    SinkTask,
)

KEY = "target.bootstrap.servers"
PREFIX = "target.kafka."
CONFIG = ConfigDef(
    ConfigKey(KEY, doc="bootstrap servers of the target cluster, host:port[,host:port]"),
    ConfigKey("connect.topicnames", type="list", doc="sluice topics to copy (, or ;)"),
    ConfigKey("topic.rename.format", default="${topic}", doc="target name; ${topic} = old name"),
    ConfigKey("target.timeout.ms", type="int", default=30_000, min=1, doc="request timeout"),
)


def _options(config: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **pass_through(config, PREFIX),
        "bootstrap.servers": values[KEY],
        "enable.idempotence": True,
        "linger.ms": 5,
    }


class KafkaSinkTask(SinkTask):
    """Produces its records of each micro-batch and waits for them in `flush`."""

    def start(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        self.servers = values[KEY]
        self.timeout_s = values["target.timeout.ms"] / 1000
        self.rename = values["topic.rename.format"]
        self.options = _options(config, values)
        self._partitions: dict[str, int] = {}
        self._failures: list[str] = []

    def _producer(self) -> Any:
        return client("producer", self.options, KEY)

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            try:
                meta = self._producer().list_topics(topic=topic, timeout=self.timeout_s)
            except kafka().KafkaException as exc:
                raise unavailable(KEY, self.servers, f"metadata of {topic!r}", exc) from None
            found = meta.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise ConnectException(
                    f"{KEY}={self.servers}: topic {topic!r} does not exist "
                    f"({found.error if found is not None else 'no metadata'})",
                    suggestion="create it, or let the cluster create topics automatically",
                )
            count = self._partitions[topic] = len(found.partitions)
        return count

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failures.append(f"{msg.topic()}: {err}")

    def put(self, records: list[ConnectRecord]) -> None:
        producer = self._producer()
        for r in records:
            topic = renamed(self.rename, r.topic or "")
            queue = int((r.partition or {}).get("queueId", 0))
            key = r.key.encode() if isinstance(r.key, str) else r.key
            value = r.value.encode() if isinstance(r.value, str) else r.value
            stamp = int(r.timestamp.timestamp() * 1000) if r.timestamp else 0
            self._produce(producer, topic, queue, key, value, stamp, list(r.extensions.items()))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        producer = self._producer()
        millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        columns = [
            batch.column(name).to_pylist()
            for name in ("topic", "queue_id", "key", "value", "headers")
        ]
        for i, (topic, queue, key, value, headers) in enumerate(zip(*columns, strict=True)):
            key = key.encode() if isinstance(key, str) else key
            value = value.encode() if isinstance(value, str) else value
            pairs = [(n, v) for n, v in json.loads(headers).items()] if headers else []
            self._produce(
                producer, renamed(self.rename, topic), queue, key, value, millis[i] or 0, pairs
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
        left = self._producer().flush(self.timeout_s)
        failures, self._failures = self._failures, []
        if left:
            raise unavailable(KEY, self.servers, f"{left} records not acknowledged", "timeout")
        if failures:
            raise RetriableException(
                f"{KEY}={self.servers}: {len(failures)} records were not delivered: {failures[0]}"
            )
        return None


class KafkaSinkConnector(SinkConnector):
    """Writes sluice topics to a Kafka cluster (``target.bootstrap.servers``), renamed by
    ``topic.rename.format``, with keys, headers and timestamps."""

    config_def = CONFIG
    task_class = KafkaSinkTask
    delivery = "at-least-once"

    def validate(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        check_rename(values["topic.rename.format"])
        options = {**pass_through(config, PREFIX), "bootstrap.servers": values[KEY]}
        client("producer", _options(config, values), KEY)  # the producer options are valid
        try:
            with probe(options, KEY) as consumer:
                consumer.list_topics(timeout=min(5.0, values["target.timeout.ms"] / 1000))
        except kafka().KafkaException as exc:
            raise ConfigException(
                KEY, f"cannot reach the cluster at {values[KEY]}: {exc}"
            ) from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
