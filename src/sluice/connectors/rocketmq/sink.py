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
    MessageQueue,
    RocketMQAccessDenied,
    RocketMQClient,
    RocketMQUnavailable,
    acl_credentials,
    encode_messages,
)
from sluice.connectors._replication import check_rename, renamed, target_queue
from sluice.connectors.rocketmq._config import SINK_ACL_KEYS, SINK_CONFIG
from sluice.sdk import (
    BatchId,
    ConfigException,
    ConnectException,
    ConnectRecord,
    Delivery,
    SinkConnector,
    SinkTask,
)


def _client(values: Mapping[str, Any], *, timeout_s: float | None = None) -> RocketMQClient:
    return RocketMQClient(
        values["target.namesrv"],
        key="target.namesrv",
        timeout_s=timeout_s or values["target.timeout.ms"] / 1000,
        group=values["target.producer.group"],
        credentials=acl_credentials(values, *SINK_ACL_KEYS),
        acl_keys=SINK_ACL_KEYS,
    )


class RocketMQSinkTask(SinkTask):
    """Collects its share of each micro-batch per target queue and sends it once in `flush`."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.client = _client(values)
        self.rename = values["topic.rename.format"]
        self.queues = values["target.queues"]
        # (target topic, sluice queue) → encoded messages (`encode_messages`), first born ms
        self._pending: dict[tuple[str, int], list[pa.Array]] = {}
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
        """Encode the batch's messages column-wise (`sluice.clients.rocketmq.encode_messages`),
        grouped by target topic and sluice queue, for `flush`."""
        if batch.num_rows == 0:
            return
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
        elif not pa.types.is_string(keys.type):
            keys = keys.cast(pa.string())
        headers = batch.column("headers")
        for text in (keys, headers):
            # as raw characters, or as JSON escapes in the extensions' text
            bad = pc.match_substring_regex(text, r"[\x01\x02]|\\u000[12]").fill_null(False)
            if pc.any(bad).as_py():
                i = pc.index(bad, True).as_py()
                raise ConnectException(
                    f"record {batch.column('topic')[i]}/{batch.column('queue_id')[i]}: a key or "
                    "extension contains \\x01 or \\x02, which RocketMQ uses to separate message "
                    "properties"
                )
        rows = pa.table(
            {
                "topic": batch.column("topic"),
                "queue_id": batch.column("queue_id").cast(pa.int64()),
                "key": keys.cast(pa.binary()),
                "value": _as_bytes(batch.column("value")).fill_null(b""),
                "timestamp": batch.column("timestamp"),
                "headers": headers,
            }
        )
        tag = f"{self.context.batch_id}/{self.context.task_id}"
        messages = encode_messages(rows, "sluice.batch", tag)
        topics = rows.column("topic").combine_chunks()
        queue_ids = rows.column("queue_id").combine_chunks()
        millis = pc.divide(rows.column("timestamp").cast(pa.int64()), 1000)
        groups = pa.table({"t": topics, "q": queue_ids}).group_by(["t", "q"]).aggregate([])
        for topic, queue_id in zip(
            groups.column("t").to_pylist(), groups.column("q").to_pylist(), strict=True
        ):
            mask = pc.and_(pc.equal(topics, topic), pc.equal(queue_ids, queue_id))
            where = (renamed(self.rename, topic), queue_id)
            self._pending.setdefault(where, []).append(messages.filter(mask))
            if where not in self._born:
                first = pc.index(mask, True).as_py()
                self._born[where] = millis[first].as_py() or 0

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
        merged: dict[tuple[str, MessageQueue], list[pa.Array]] = {}
        first: dict[tuple[str, MessageQueue], int] = {}
        for (topic, queue_id), messages in sorted(pending.items()):
            queues = targets.get(topic) or targets.setdefault(topic, self._targets(topic))
            where = (topic, queues[target_queue(queue_id, len(queues))])
            merged.setdefault(where, []).extend(messages)
            first.setdefault(where, born[(topic, queue_id)])
        for (topic, queue), arrays in merged.items():
            messages = pa.chunked_array(arrays, pa.binary()).combine_chunks()
            self._send_once(journal, tag, mark, topic, queue, messages, first[(topic, queue)])
        return None

    def _send_once(
        self,
        journal: str,
        tag: str,
        mark: int,
        topic: str,
        queue: MessageQueue,
        messages: pa.Array,
        born_ms: int,
    ) -> None:
        client = self.client
        if client.query_offset(f"{journal}-done", topic, queue) == mark:
            return  # a replay: this queue's share was sent completely
        if client.query_offset(f"{journal}-pending", topic, queue) == mark:
            start = client.query_offset(f"{journal}-start", topic, queue) - 1
            messages = messages.slice(client.count_tagged(topic, queue, start, "sluice.batch", tag))
        else:
            end = client.offsets(topic, [queue])[queue][1]
            client.commit_offset(f"{journal}-start", topic, queue, end + 1)
            client.commit_offset(f"{journal}-pending", topic, queue, mark)
        if len(messages):
            client.send_encoded(topic, queue, messages, born_ms=born_ms or None)
        client.commit_offset(f"{journal}-done", topic, queue, mark)


def _as_bytes(column: pa.Array) -> pa.Array:
    """A value column as bytes: text as its UTF-8, binary as it is."""
    if pa.types.is_binary(column.type):
        return column
    if not pa.types.is_string(column.type):
        column = column.cast(pa.string())
    return column.cast(pa.binary())


def _journal_group(connector: str, run: str, task: int) -> str:
    """The journal's consumer group prefix (RocketMQ's group name rule: ``[%|a-zA-Z0-9_-]``)."""
    safe = re.sub(r"[^a-zA-Z0-9_-]", "_", connector)[:180]
    return f"sluice-sink-{safe}-{run}-{task}"


class RocketMQSinkConnector(SinkConnector):
    """Writes sluice topics to a RocketMQ cluster (``target.namesrv``), renamed by
    ``topic.rename.format``, with keys, tags, properties and timestamps."""

    config_def = SINK_CONFIG
    task_class = RocketMQSinkTask
    guarantee = Delivery.EXACTLY_ONCE

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
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
