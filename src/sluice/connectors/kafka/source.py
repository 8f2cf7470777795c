"""KafkaSourceConnector: copies topics of a Kafka cluster into sluice topics.

Delivery: exactly-once into the topic. A partition is read by exact offset ranges (assign + seek),
so a replayed micro-batch reads the same records again.
Unit of parallelism: one source partition; a partition belongs to one task (`max.tasks` at most).
Position: ``{"topic", "partition"}`` → ``{"offset": <offset after the record>}``. A new connector
starts at each partition's first offset.

Record mapping: key → key (BYTES), value → value (BYTES), headers → extensions (UTF-8 text; a
header that is not is an error naming the record; of repeated header names the last one wins),
the record timestamp → timestamp. Which partition a record came from decides its sluice queue
(records without a key keep their partition's order), and `KafkaSinkConnector` and
`RocketMQSinkConnector` map sluice queue *q* to target partition/queue *q mod n*.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from sluice.clients.kafka import next_consume_wait
from sluice.connectors._replication import (
    check_rename,
    owns,
    renamed,
    task_shares,
    topic_filter,
)
from sluice.connectors.kafka._client import (
    client,
    client_options,
    kafka,
    pass_through,
    probe,
    unavailable,
)
from sluice.connectors.kafka._config import SOURCE_CONFIG, SOURCE_KEY, SOURCE_PREFIX
from sluice.sdk import (
    HEADERS_TYPE,
    KAFKA_CLIENT,
    TIMESTAMP_TYPE,
    ClientOption,
    ConfigException,
    ConnectException,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    RetriableException,
    Schema,
    SourceConnector,
)
from sluice.sdk.extras import KAFKA

_ROWS = 8192
_TOPICS_TTL_S = 10.0
_EXACT = "the source reads exact offset ranges of committed records (exactly-once)"
#: librdkafka as the source uses it: the options it sets itself are not the user's to change
FAMILY = KAFKA_CLIENT.reserving(
    {
        "bootstrap.servers": f"set {SOURCE_KEY}",
        "metadata.broker.list": f"set {SOURCE_KEY}",
        "group.id": "the source reads by offset, outside any consumer group",
        "group.instance.id": "the source reads by offset, outside any consumer group",
        "enable.auto.commit": _EXACT,
        "enable.auto.offset.store": _EXACT,
        "auto.offset.reset": _EXACT,
        "isolation.level": _EXACT,
    }
)


class _Source:
    """The source cluster as the connector and its tasks use it (picklable settings)."""

    def __init__(self, config: Mapping[str, str], values: Mapping[str, Any]) -> None:
        self.servers = values[SOURCE_KEY]
        self.timeout_s = values["source.timeout.ms"] / 1000
        self.options = {
            **pass_through(config, SOURCE_PREFIX, FAMILY),
            "bootstrap.servers": self.servers,
            "group.id": "sluice-replicator",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            # only committed transactions; the high watermark it is given is the LSO
            "isolation.level": "read_committed",
        }

    def consumer(self) -> Any:
        return client("consumer", self.options, SOURCE_KEY)

    def topics(self, consumer: Any = None) -> dict[str, int]:
        """Partition counts of the cluster's topics (internal ``__`` topics left out)."""
        try:
            meta = (consumer or self.consumer()).list_topics(timeout=self.timeout_s)
        except kafka().KafkaException as exc:
            raise unavailable(SOURCE_KEY, self.servers, "cannot list topics", exc) from None
        return {
            name: len(t.partitions)
            for name, t in meta.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        k = kafka()
        try:
            return self.consumer().get_watermark_offsets(
                k.TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
            )
        except k.KafkaException as exc:
            raise unavailable(
                SOURCE_KEY, self.servers, f"offsets of {topic}/{partition}", exc
            ) from None


class KafkaSourceTask(ReplayableSourceTask):
    """Reads its share of the source partitions in exact offset ranges."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        self.config = dict(config)
        self.source = _Source(config, values)
        self.topics = topic_filter(values)
        self.rename = values["topic.rename.format"]
        self.fixed_topic = config.get("connect.topicname") or None
        self._listed: tuple[float, dict[str, int]] = (0.0, {})

    def _partition_counts(self) -> dict[str, int]:
        now = time.monotonic()
        if now >= self._listed[0]:
            found = self.source.topics()
            if isinstance(self.topics, list):
                counts = {t: found[t] for t in self.topics if t in found}
            else:
                counts = {t: n for t, n in found.items() if self.topics(t)}
            self._listed = (now + _TOPICS_TTL_S, counts)
        return self._listed[1]

    def partitions(self) -> list[RecordPartition]:
        out = []
        for topic, count in sorted(self._partition_counts().items()):
            for p in range(count):
                partition = {"topic": topic, "partition": str(p)}
                if owns(self.config, partition):
                    out.append(partition)
        return out

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        low, high = self.source.watermarks(partition["topic"], int(partition["partition"]))
        pos = int(start["offset"]) if start else low
        end = high if limit.max_rows is None else min(high, pos + limit.max_rows)
        return {"offset": end} if end > pos else start

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        k = kafka()
        topic, number = partition["topic"], int(partition["partition"])
        pos = int(start["offset"]) if start else self.source.watermarks(topic, number)[0]
        stop = int(end["offset"])
        target = self.fixed_topic or renamed(self.rename, topic)
        consumer = self.source.consumer()
        consumer.assign([k.TopicPartition(topic, number, pos)])
        try:
            rows: list[Any] = []
            idle_since = time.monotonic()
            wait = next_consume_wait(None, False)
            while pos < stop:
                messages = consumer.consume(num_messages=min(stop - pos, _ROWS), timeout=wait)
                wait = next_consume_wait(wait, bool(messages))
                for m in messages:
                    if m.error() is not None:
                        raise ConnectException(
                            f"{SOURCE_KEY}={self.source.servers}: reading {topic}/{number} "
                            f"at {pos}: {m.error()}"
                        )
                    if m.offset() >= stop:
                        pos = stop
                        break
                    rows.append(m)
                    pos = m.offset() + 1
                if messages:
                    idle_since = time.monotonic()
                elif consumer.position([k.TopicPartition(topic, number)])[0].offset >= stop:
                    pos = stop  # the rest were transaction markers or aborted records
                elif time.monotonic() - idle_since > self.source.timeout_s:
                    raise RetriableException(
                        f"{SOURCE_KEY}={self.source.servers}: no data from {topic}/{number} "
                        f"at offset {pos} (expected up to {stop})"
                    )
                if len(rows) >= _ROWS or (rows and pos >= stop):
                    yield _batch(rows, target)
                    rows = []
        finally:
            consumer.unassign()


def _batch(messages: list[Any], topic: str) -> pa.RecordBatch:
    stamps, headers = [], []
    for m in messages:
        kind, millis = m.timestamp()
        stamps.append(millis * 1000 if kind else None)
        pairs = []
        for name, value in m.headers() or ():
            try:
                pairs.append((name, None if value is None else value.decode("utf-8")))
            except UnicodeDecodeError:
                raise ConnectException(
                    f"record {m.topic()}/{m.partition()}@{m.offset()}: header {name!r} is not "
                    "UTF-8 text, which record extensions must be"
                ) from None
        headers.append([(n, v) for n, v in pairs if v is not None] or None)
    n = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array(stamps, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(headers, HEADERS_TYPE),
        ],
        names=["topic", "key", "value", "timestamp", "headers"],
    )


class KafkaSourceConnector(SourceConnector):
    """Copies Kafka topics (a list or a regex) into sluice topics, renamed by
    ``topic.rename.format``, with keys, headers and timestamps."""

    config_def = SOURCE_CONFIG
    task_class = KafkaSourceTask
    requires = (KAFKA,)
    offset_counts = ("offset",)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        return client_options(FAMILY, config, SOURCE_PREFIX)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        topics = topic_filter(values)
        check_rename(values["topic.rename.format"])
        values = {**values, "source.timeout.ms": min(5000, values["source.timeout.ms"])}
        source = _Source(config, values)
        try:
            with probe(source.options, SOURCE_KEY) as consumer:
                found = source.topics(consumer)
        except RetriableException as exc:
            raise ConfigException(SOURCE_KEY, f"cannot reach the cluster: {exc}") from None
        if isinstance(topics, list):
            missing = [t for t in topics if t not in found]
            if missing:
                raise ConfigException(
                    "source.topics",
                    f"topic(s) {', '.join(map(repr, missing))} do not exist on "
                    f"{SOURCE_KEY}={values[SOURCE_KEY]}",
                )

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        values = SOURCE_CONFIG.parse(self.config)
        topics = topic_filter(values)
        found = _Source(self.config, values).topics()
        names = topics if isinstance(topics, list) else [t for t in found if topics(t)]
        return task_shares(max_tasks, sum(found.get(t, 0) for t in names), self.config)

    def key_schema(self) -> Schema:
        return Schema.bytes_()

    def value_schema(self) -> Schema:
        return Schema.bytes_()
