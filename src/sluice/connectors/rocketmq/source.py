"""RocketMQSourceConnector: copies topics of a RocketMQ cluster into sluice topics.

Delivery: exactly-once into the topic. A source queue is read by exact offset ranges (pull from
an offset), so a replayed micro-batch reads the same messages again.
Unit of parallelism: one source queue; a queue belongs to one task (`max.tasks` tasks at most).
Position: ``{"topic", "brokerName", "queueId"}`` → ``{"queueOffset": <offset after the message>}``.
A new connector starts at each queue's first stored offset.

ACL: ``source.acl.enable=true`` signs every request with ``source.access.key`` /
``source.secret.key`` (the account needs SUB on the topics; `validate` checks the account).

Message mapping (as RocketMQ Connect): ``KEYS`` → record key (STRING), body → value (BYTES),
user properties and the tag (as ``TAGS``) → extensions, the born timestamp (or the ``sluice.ts``
property a sluice sink wrote) → timestamp.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from sluice.clients.rocketmq import (
    SYSTEM_PROPERTIES,
    MessageQueue,
    RocketMQAccessDenied,
    RocketMQClient,
    RocketMQUnavailable,
    StoredMessage,
    acl_credentials,
)
from sluice.connectors._replication import (
    check_rename,
    owns,
    renamed,
    task_shares,
    topic_filter,
)
from sluice.connectors.rocketmq._config import SOURCE_ACL_KEYS, SOURCE_CONFIG
from sluice.sdk import (
    HEADERS_TYPE,
    TIMESTAMP_TYPE,
    ConfigException,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    Schema,
    SourceConnector,
)

TIMESTAMP_PROPERTY = "sluice.ts"

_ROWS = 8192  # rows per Arrow batch
_TOPICS_TTL_S = 10.0


def client(values: Mapping[str, Any], *, timeout_s: float | None = None) -> RocketMQClient:
    """The source cluster's client for parsed config ``values``."""
    return RocketMQClient(
        values["source.namesrv"],
        key="source.namesrv",
        timeout_s=timeout_s or values["source.timeout.ms"] / 1000,
        group=values["source.group"],
        credentials=acl_credentials(values, *SOURCE_ACL_KEYS),
        acl_keys=SOURCE_ACL_KEYS,
    )


class RocketMQSourceTask(ReplayableSourceTask):
    """Reads its share of the source queues in exact offset ranges."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        self.config = dict(config)
        self.client = client(values)
        self.topics = topic_filter(values)
        self.rename = values["topic.rename.format"]
        self.fixed_topic = config.get("connect.topicname") or None
        self._listed: tuple[float, list[str]] = (0.0, [])

    def _source_topics(self) -> list[str]:
        if isinstance(self.topics, list):
            return self.topics
        now = time.monotonic()
        if now >= self._listed[0]:
            self._listed = (
                now + _TOPICS_TTL_S,
                [t for t in self.client.topics() if self.topics(t)],
            )
        return self._listed[1]

    def partitions(self) -> list[RecordPartition]:
        out = []
        for topic in self._source_topics():
            for q in self.client.queues(topic):
                partition = {"topic": topic, "brokerName": q.broker, "queueId": str(q.queue_id)}
                if owns(self.config, partition):
                    out.append(partition)
        return out

    def _queue(self, partition: RecordPartition) -> MessageQueue:
        for q in self.client.queues(partition["topic"]):
            if q.broker == partition["brokerName"] and str(q.queue_id) == partition["queueId"]:
                return q
        raise RocketMQUnavailable(
            f"source.namesrv={self.client.namesrv_addr}: queue {partition} has no route now"
        )

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        queue = self._queue(partition)
        low, high = self.client.offsets(partition["topic"], [queue])[queue]
        pos = int(start["queueOffset"]) if start else low
        end = high if limit.max_rows is None else min(high, pos + limit.max_rows)
        return {"queueOffset": end} if end > pos else start

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        topic = partition["topic"]
        queue = self._queue(partition)
        pos = int(start["queueOffset"]) if start else self.client.offsets(topic, [queue])[queue][0]
        target = self.fixed_topic or renamed(self.rename, topic)
        rows: list[StoredMessage] = []
        for message in self.client.pull(topic, queue, pos, int(end["queueOffset"])):
            rows.append(message)
            if len(rows) >= _ROWS:
                yield _batch(rows, target)
                rows = []
        if rows:
            yield _batch(rows, target)


def _batch(messages: list[StoredMessage], topic: str) -> pa.RecordBatch:
    keys, stamps, headers = [], [], []
    for m in messages:
        props = m.properties
        keys.append(props.get("KEYS"))
        stamp = props.get(TIMESTAMP_PROPERTY)
        stamps.append((int(stamp) if stamp else m.born_timestamp) * 1000)
        user = [
            (k, v)
            for k, v in props.items()
            if k not in SYSTEM_PROPERTIES and not k.startswith("sluice.")
        ]
        headers.append(user or None)
    n = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.array(keys, pa.string()),
            pa.array([m.body for m in messages], pa.binary()),
            pa.array(stamps, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(headers, HEADERS_TYPE),
        ],
        names=["topic", "key", "value", "timestamp", "headers"],
    )


class RocketMQSourceConnector(SourceConnector):
    """Copies RocketMQ topics (a list or a regex) into sluice topics, renamed by
    ``topic.rename.format``, with keys, tags, properties and timestamps."""

    config_def = SOURCE_CONFIG
    task_class = RocketMQSourceTask
    offset_counts = ("queueOffset",)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        topics = topic_filter(values)
        check_rename(values["topic.rename.format"])
        probe = client(values, timeout_s=min(5.0, int(values["source.timeout.ms"]) / 1000))
        try:
            probe.check_access()
            if isinstance(topics, list):
                missing = [t for t in topics if not probe.queues(t, fresh=True)]
                if missing:
                    raise ConfigException(
                        "source.topics",
                        f"topic(s) {', '.join(map(repr, missing))} do not exist on "
                        f"source.namesrv={probe.namesrv_addr}",
                    )
                for topic in topics:  # the account may read them (ACL)
                    probe.check_readable(topic)
        except RocketMQUnavailable as exc:
            raise ConfigException("source.namesrv", f"cannot reach the cluster: {exc}") from None
        except RocketMQAccessDenied as exc:
            raise ConfigException(exc.key, str(exc)) from None

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        values = SOURCE_CONFIG.parse(self.config)
        probe = client(values)
        topics = topic_filter(values)
        names = topics if isinstance(topics, list) else [t for t in probe.topics() if topics(t)]
        queues = sum(len(probe.queues(t)) for t in names)
        return task_shares(max_tasks, queues, self.config)

    def key_schema(self) -> Schema:
        return Schema.string()

    def value_schema(self) -> Schema:
        return Schema.bytes_()
