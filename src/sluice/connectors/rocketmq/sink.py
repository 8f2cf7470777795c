"""RocketMQSinkConnector: writes sluice topics to topics of a RocketMQ cluster.

Delivery: at-least-once. RocketMQ has no idempotent or transactional batch append its remoting
clients can use, so a micro-batch replayed after a crash may send some messages a second time
(each message carries the property ``sluice.batch`` = ``<run>/<batch>/<task>`` so that a consumer
can recognise them).
Unit of parallelism: one task per group of sluice queues (`max.tasks`).

Mapping: the record's topic → target topic by ``topic.rename.format``; sluice queue *q* → target
queue *q mod n* (n = the target topic's queue count), so one key (one source queue) stays in order;
key → ``KEYS``; extensions → user properties (the extension ``TAGS`` is the message tag); value
(BYTES, or STRING as its UTF-8 bytes) → body; timestamp → the batch's born timestamp and, exactly,
the user property ``sluice.ts`` (ms). A missing target topic is created with ``target.queues``
queues.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.clients.rocketmq import MessageQueue, RocketMQClient, RocketMQUnavailable
from sluice.connectors._replication import check_rename, renamed, target_queue
from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectException,
    ConnectRecord,
    SinkConnector,
    SinkTask,
)

CONFIG = ConfigDef(
    ConfigKey("target.namesrv", doc="name server(s) of the target cluster, host:port[;host:port]"),
    ConfigKey("connect.topicnames", type="list", doc="sluice topics to copy (, or ;)"),
    ConfigKey("topic.rename.format", default="${topic}", doc="target name; ${topic} = old name"),
    ConfigKey("target.queues", type="int", default=8, min=1, doc="queues of a created topic"),
    ConfigKey("target.producer.group", default="sluice-replicator", doc="producer group"),
    ConfigKey("target.timeout.ms", type="int", default=10_000, min=1, doc="request timeout"),
)
_PROPERTY_SEPARATORS = ("\x01", "\x02")


def _client(values: Mapping[str, Any], *, timeout_s: float | None = None) -> RocketMQClient:
    return RocketMQClient(
        values["target.namesrv"],
        key="target.namesrv",
        timeout_s=timeout_s or values["target.timeout.ms"] / 1000,
        group=values["target.producer.group"],
    )


class RocketMQSinkTask(SinkTask):
    """Sends its records of each micro-batch, queue by queue, in order."""

    def start(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        self.client = _client(values)
        self.rename = values["topic.rename.format"]
        self.queues = values["target.queues"]

    def _targets(self, topic: str) -> tuple[MessageQueue, ...]:
        return self.client.queues(topic) or self.client.create_topic(topic, self.queues)

    def put(self, records: list[ConnectRecord]) -> None:
        columns: dict[str, list[Any]] = {
            "topic": [],
            "queue_id": [],
            "key": [],
            "value": [],
            "timestamp": [],
            "headers": [],
        }
        for r in records:
            columns["topic"].append(r.topic)
            columns["queue_id"].append(int((r.partition or {}).get("queueId", 0)))
            columns["key"].append(r.key if r.key is None else str(r.key))
            value = r.value.encode() if isinstance(r.value, str) else r.value
            columns["value"].append(value)
            columns["timestamp"].append(r.timestamp)
            columns["headers"].append(json.dumps(r.extensions) if r.extensions else None)
        types = {"key": pa.string(), "value": pa.binary(), "timestamp": pa.timestamp("us", "UTC")}
        arrays = [pa.array(v, types.get(k)) for k, v in columns.items()]
        self.put_batch(pa.RecordBatch.from_arrays(arrays, names=list(columns)))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        values = batch.column("value")
        if pa.types.is_string(values.type):
            values = values.view(pa.binary())
        elif not pa.types.is_binary(values.type):
            values = values.cast(pa.string()).view(pa.binary())
        keys = batch.column("key")
        if pa.types.is_binary(keys.type):
            try:
                keys = keys.cast(pa.string())
            except pa.ArrowInvalid:
                raise ConnectException(
                    "RocketMQSinkConnector: a record key is not UTF-8 text, which RocketMQ's KEYS "
                    "property cannot carry",
                    suggestion="use key.converter=StringConverter or drop the key",
                ) from None
        millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        batch_tag = f"{self.context.batch_id}/{self.context.task_id}"
        groups: dict[tuple[str, int], list[tuple[bytes, dict[str, str]]]] = {}
        born: dict[tuple[str, int], int] = {}
        topics = batch.column("topic").to_pylist()
        queue_ids = batch.column("queue_id").to_pylist()
        for i, (body, key, headers) in enumerate(
            zip(
                values.to_pylist(),
                keys.to_pylist(),
                batch.column("headers").to_pylist(),
                strict=True,
            )
        ):
            props = json.loads(headers) if headers else {}
            if key is not None:
                props["KEYS"] = key
            if millis[i] is not None:
                props["sluice.ts"] = str(millis[i])
            props["sluice.batch"] = batch_tag
            for text in props.values():
                if any(c in str(text) for c in _PROPERTY_SEPARATORS):
                    raise ConnectException(
                        f"record {topics[i]}/{queue_ids[i]}: a key or extension contains "
                        "\\x01 or \\x02, which RocketMQ uses to separate message properties"
                    )
            where = (renamed(self.rename, topics[i]), queue_ids[i])
            groups.setdefault(where, []).append((body or b"", props))
            born.setdefault(where, millis[i] or 0)
        targets: dict[str, tuple[MessageQueue, ...]] = {}
        for (topic, queue_id), messages in groups.items():
            queues = targets.get(topic) or targets.setdefault(topic, self._targets(topic))
            queue = queues[target_queue(queue_id, len(queues))]
            self.client.send(topic, queue, messages, born_ms=born[(topic, queue_id)] or None)

    def flush(self, batch_id: BatchId) -> Any:
        return None


class RocketMQSinkConnector(SinkConnector):
    """Writes sluice topics to a RocketMQ cluster (``target.namesrv``), renamed by
    ``topic.rename.format``, with keys, tags, properties and timestamps."""

    config_def = CONFIG
    task_class = RocketMQSinkTask
    delivery = "at-least-once"

    def validate(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        check_rename(values["topic.rename.format"])
        probe = _client(values, timeout_s=min(5.0, values["target.timeout.ms"] / 1000))
        try:
            probe.cluster_info()
        except RocketMQUnavailable as exc:
            raise ConfigException("target.namesrv", f"cannot reach the cluster: {exc}") from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
