"""RocketMQSinkConnector: writes sluice topics to topics of a RocketMQ cluster.

Delivery: exactly-once per micro-batch, for one writer per target queue. RocketMQ has no
idempotent batch append, so each task keeps a small journal in the target broker's consumer
offsets (three groups ``sluice-sink-<connector>-<run>-<task>-{start,pending,done}``, per target
queue): before it sends a micro-batch's messages to a queue it records the queue's end offset and
the batch number; after, it marks the batch done. A replayed micro-batch (Spark re-runs it after
a crash, with the same `BatchId`) skips queues marked done, and for a queue whose send was under
way counts the messages tagged with this batch (property ``sluice.batch`` =
``<run>/<batch>/<task>``) from the recorded offset and sends only the rest: sends to a queue are
sequential and each SEND_BATCH_MESSAGE is stored whole, so what arrived is a prefix.
Unit of parallelism: one task per group of sluice queues (`max.tasks`).

Mapping: the record's topic → target topic by ``topic.rename.format``; sluice queue *q* → target
queue *q mod n* (n = the target topic's queue count), so one key (one source queue) stays in order;
key → ``KEYS``; extensions → user properties (the extension ``TAGS`` is the message tag); value
(BYTES, or STRING as its UTF-8 bytes) → body; timestamp → the batch's born timestamp and, exactly,
the user property ``sluice.ts`` (ms). A missing target topic is created with ``target.queues``
queues. A task's share of a micro-batch is held in memory until `flush` (bound it with
``read.max.rows``).

ACL: ``target.acl.enable=true`` signs every request with ``target.access.key`` /
``target.secret.key``. The sink creates missing target topics and its journal's consumer groups,
so the account needs ``admin: true`` unless those exist; `validate` checks the account.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.clients.rocketmq import (
    AclKeys,
    MessageQueue,
    RocketMQAccessDenied,
    RocketMQClient,
    RocketMQUnavailable,
    acl_credentials,
)
from sluice.connectors._replication import check_rename, renamed, target_queue
from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectException,
    ConnectRecord,
    Delivery,
    SinkConnector,
    SinkTask,
)

ACL_KEYS = AclKeys.prefixed("target")
CONFIG = ConfigDef(
    ConfigKey("target.namesrv", doc="name server(s) of the target cluster, host:port[;host:port]"),
    ConfigKey("connect.topicnames", type="list", doc="sluice topics to copy (, or ;)"),
    ConfigKey("topic.rename.format", default="${topic}", doc="target name; ${topic} = old name"),
    ConfigKey("target.queues", type="int", default=8, min=1, doc="queues of a created topic"),
    ConfigKey("target.producer.group", default="sluice-replicator", doc="producer group"),
    ConfigKey("target.timeout.ms", type="int", default=10_000, min=1, doc="request timeout"),
    *ACL_KEYS.config_keys(),
)
_PROPERTY_SEPARATORS = ("\x01", "\x02")


def _client(values: Mapping[str, Any], *, timeout_s: float | None = None) -> RocketMQClient:
    return RocketMQClient(
        values["target.namesrv"],
        key="target.namesrv",
        timeout_s=timeout_s or values["target.timeout.ms"] / 1000,
        group=values["target.producer.group"],
        credentials=acl_credentials(values, *ACL_KEYS),
        acl_keys=ACL_KEYS,
    )


class RocketMQSinkTask(SinkTask):
    """Collects its share of each micro-batch per target queue and sends it once in `flush`."""

    def start(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        self.client = _client(values)
        self.rename = values["topic.rename.format"]
        self.queues = values["target.queues"]
        self._pending: dict[tuple[str, int], list[tuple[bytes, dict[str, str]]]] = {}
        self._born: dict[tuple[str, int], int] = {}

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
        for where, messages in groups.items():
            self._pending.setdefault(where, []).extend(messages)
            self._born.setdefault(where, born[where])

    def flush(self, batch_id: BatchId) -> Any:
        """Send this task's share of the micro-batch, queue by queue, once (see the module
        docstring)."""
        pending, self._pending, born, self._born = self._pending, {}, self._born, {}
        if not pending:
            return None
        journal = _journal_group(self.context.connector_name, batch_id.run, self.context.task_id)
        tag = f"{batch_id}/{self.context.task_id}"
        mark = batch_id.number + 1  # stored values are > 0 (see RocketMQClient.query_offset)
        targets: dict[str, tuple[MessageQueue, ...]] = {}
        # sluice queues q and q + n share target queue q mod n: one journal entry, one send
        merged: dict[tuple[str, MessageQueue], list[tuple[bytes, dict[str, str]]]] = {}
        first: dict[tuple[str, MessageQueue], int] = {}
        for (topic, queue_id), messages in sorted(pending.items()):
            queues = targets.get(topic) or targets.setdefault(topic, self._targets(topic))
            where = (topic, queues[target_queue(queue_id, len(queues))])
            merged.setdefault(where, []).extend(messages)
            first.setdefault(where, born[(topic, queue_id)])
        for (topic, queue), messages in merged.items():
            self._send_once(journal, tag, mark, topic, queue, messages, first[(topic, queue)])
        return None

    def _send_once(
        self,
        journal: str,
        tag: str,
        mark: int,
        topic: str,
        queue: MessageQueue,
        messages: list[tuple[bytes, dict[str, str]]],
        born_ms: int,
    ) -> None:
        client = self.client
        if client.query_offset(f"{journal}-done", topic, queue) == mark:
            return  # a replay: this queue's share was sent completely
        if client.query_offset(f"{journal}-pending", topic, queue) == mark:
            start = client.query_offset(f"{journal}-start", topic, queue) - 1
            messages = messages[client.count_tagged(topic, queue, start, "sluice.batch", tag) :]
        else:
            end = client.offsets(topic, [queue])[queue][1]
            client.commit_offset(f"{journal}-start", topic, queue, end + 1)
            client.commit_offset(f"{journal}-pending", topic, queue, mark)
        if messages:
            client.send(topic, queue, messages, born_ms=born_ms or None)
        client.commit_offset(f"{journal}-done", topic, queue, mark)


def _journal_group(connector: str, run: str, task: int) -> str:
    """The journal's consumer group prefix (RocketMQ's group name rule: ``[%|a-zA-Z0-9_-]``)."""
    safe = re.sub(r"[^a-zA-Z0-9_-]", "_", connector)[:180]
    return f"sluice-sink-{safe}-{run}-{task}"


class RocketMQSinkConnector(SinkConnector):
    """Writes sluice topics to a RocketMQ cluster (``target.namesrv``), renamed by
    ``topic.rename.format``, with keys, tags, properties and timestamps."""

    config_def = CONFIG
    task_class = RocketMQSinkTask
    guarantee = Delivery.EXACTLY_ONCE

    def validate(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        check_rename(values["topic.rename.format"])
        probe = _client(values, timeout_s=min(5.0, values["target.timeout.ms"] / 1000))
        try:
            probe.check_access()
        except RocketMQUnavailable as exc:
            raise ConfigException("target.namesrv", f"cannot reach the cluster: {exc}") from None
        except RocketMQAccessDenied as exc:
            raise ConfigException(exc.key, str(exc)) from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
