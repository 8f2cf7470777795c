"""Real brokers for the bus tests, and one harness per backend for the shared contract suite.

* Kafka: the real Apache Kafka 4 broker of `scripts/servers.sh up kafka` (`kafka_cluster`, one
  per run, started on demand by `tests.servers.ensure`). Each test uses its own topics.
* Kafka fault injection: librdkafka's own mock cluster (`kafka_mock`: several brokers on
  127.0.0.1, real Kafka protocol, created through ctypes from the librdkafka that the
  confluent-kafka wheel bundles), only for what the real broker cannot give cheaply: taking every
  broker down and up again in the middle of a commit, and a cluster without the topic admin API.
* RocketMQ: the 5.x broker of `scripts/servers.sh up rocketmq`, started on demand for the tests
  marked `rocketmq` (`rocketmq_namesrv`); `SLUICE_ROCKETMQ_NAMESRV` points them at another one.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.conftest import wait_until

ROCKETMQ_NAMESRV = os.environ.get("SLUICE_ROCKETMQ_NAMESRV") or "127.0.0.1:9876"


def rocketmq_namesrv() -> str:
    """The test broker's name server: `SLUICE_ROCKETMQ_NAMESRV` if set, else the one of
    `scripts/servers.sh up rocketmq` (started unless it runs already)."""
    if os.environ.get("SLUICE_ROCKETMQ_NAMESRV"):
        return ROCKETMQ_NAMESRV
    from tests.servers import ensure

    address = ensure("rocketmq")
    assert address == ROCKETMQ_NAMESRV, (address, ROCKETMQ_NAMESRV)
    return address


# ------------------------------------------------------------------------------- Kafka mock
def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    libs = os.path.join(
        os.path.dirname(confluent_kafka.__file__), os.pardir, "confluent_kafka.libs"
    )
    found = glob.glob(os.path.join(libs, "librdkafka*.so*"))
    if not found:  # pragma: no cover - a wheel without a bundled librdkafka
        raise RuntimeError(f"no bundled librdkafka under {libs}")
    lib = ctypes.CDLL(found[0])
    vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
    signatures: dict[str, tuple[list[Any], Any]] = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
        "rd_kafka_mock_cluster_destroy": ([vp], None),
        "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
        "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], ctypes.c_int),
        "rd_kafka_mock_set_controller_id": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_partition_delete_records": ([vp, cp, i32, ctypes.c_int64], ctypes.c_int),
        "rd_kafka_mock_broker_set_down": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_broker_set_up": ([vp, i32], ctypes.c_int),
    }
    for name, (args, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, restype
    return lib


class MockKafkaCluster:
    """A librdkafka mock cluster with `brokers` brokers on 127.0.0.1 (lives in this process)."""

    def __init__(self, brokers: int = 3) -> None:
        self.lib = _librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self.lib.rd_kafka_conf_new()
        for key, value in ((b"log_level", b"2"),):
            self.lib.rd_kafka_conf_set(conf, key, value, errstr, len(errstr))
        # The mock cluster needs a client instance for its bookkeeping (a producer, type 0).
        self.rk = self.lib.rd_kafka_new(0, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self.cluster = self.lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.cluster:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.brokers = brokers
        self._check(self.lib.rd_kafka_mock_set_controller_id(self.cluster, 1), "controller")
        self._check(self.lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self.cluster, 0), "cg")
        self.bootstraps: str = self.lib.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()

    @staticmethod
    def _check(err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"mock cluster {what}: librdkafka error {err}")

    def create_topic(self, name: str, partitions: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.cluster, name.encode(), partitions, 1)
        self._check(err, f"create topic {name}")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Make `before` the partition's first offset (what retention does)."""
        err = self.lib.rd_kafka_mock_partition_delete_records(
            self.cluster, topic.encode(), partition, before
        )
        self._check(err, f"delete records of {topic}/{partition}")

    def set_down(self) -> None:
        """Disconnect every broker and refuse new connections (a broker outage)."""
        self._check(self.lib.rd_kafka_mock_broker_set_down(self.cluster, -1), "down")

    def set_up(self) -> None:
        self._check(self.lib.rd_kafka_mock_broker_set_up(self.cluster, -1), "up")

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.cluster)
        self.lib.rd_kafka_destroy(self.rk)


@pytest.fixture(scope="session")
def kafka_mock() -> Iterator[MockKafkaCluster]:
    cluster = MockKafkaCluster(brokers=3)
    yield cluster
    cluster.close()


class RealKafka:
    """The real broker of `scripts/servers.sh up kafka` (or `kafka-cluster`), with the few admin
    calls the tests need (the same names as :class:`MockKafkaCluster`'s)."""

    def __init__(self, bootstraps: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstraps = bootstraps
        self.admin = AdminClient({"bootstrap.servers": bootstraps})

    def create_topic(self, name: str, partitions: int, replication_factor: int = -1) -> None:
        from confluent_kafka.admin import NewTopic

        new = NewTopic(name, partitions, replication_factor=replication_factor)
        self.admin.create_topics([new], request_timeout=30)[name].result()

        # CreateTopics answers once the controller has the topic; a broker lists it (with a
        # leader for every partition) a moment later, and a busy machine makes that moment long
        def listed() -> bool:
            topic = self.admin.list_topics(name, timeout=30).topics.get(name)
            return (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            )

        wait_until(listed, 60, f"topic {name!r} listed with a leader for each partition")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        from confluent_kafka import TopicPartition

        tp = TopicPartition(topic, partition, before)
        for future in self.admin.delete_records([tp], request_timeout=30).values():
            future.result()

    def replication_factor(self, topic: str) -> int:
        """How many copies each partition of ``topic`` has, as the brokers describe it."""
        from confluent_kafka import TopicCollection

        described = self.admin.describe_topics(TopicCollection([topic]))[topic].result()
        return len(described.partitions[0].replicas)

    def committed_values(self, topic: str) -> list[bytes]:
        """Every value of ``topic`` as a ``read_committed`` consumer sees it (all partitions)."""
        return [m.value() for m in self.committed_messages(topic)]

    def committed_messages(self, topic: str) -> list[Any]:
        from confluent_kafka import Consumer, IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        md = self.admin.list_topics(topic, timeout=30).topics[topic]
        parts = [TopicPartition(topic, p) for p in md.partitions]
        ends = {
            tp.partition: f.result().offset
            for tp, f in self.admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in parts},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=30,
            ).items()
        }
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstraps,
                "group.id": "sluice-test-counter",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        out: list[Any] = []
        try:
            live = {p for p, end in ends.items() if end > 0}
            consumer.assign([TopicPartition(topic, p, 0) for p in live])
            while live:
                for m in consumer.consume(1000, timeout=1.0):
                    if m.error() is not None:
                        if m.error().code() == m.error()._PARTITION_EOF:
                            if m.offset() >= ends[m.partition()]:
                                live.discard(m.partition())
                            continue
                        raise RuntimeError(str(m.error()))
                    out.append(m)
        finally:
            consumer.close()
        return out


@pytest.fixture(scope="session")
def kafka_cluster() -> RealKafka:
    from tests.servers import ensure

    return RealKafka(ensure("kafka"))


# ----------------------------------------------------------------------------- harnesses
def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Harness:
    """How the contract suite drives one backend."""

    name = ""
    #: Whether `truncate` can simulate retention on this backend.
    can_truncate = True
    #: Whether a commit is atomic (a crash mid-commit leaves nothing to roll forward).
    atomic_commit = False
    #: Offsets a commit adds to each queue it writes beyond its records (Kafka: the transaction's
    #: commit marker), so offsets are dense only where this is 0.
    marker = 0

    def make_bus(self, state: Path, default_queues: int = 8) -> Any:
        raise NotImplementedError

    def new_topic(self, bus: Any, queues: int) -> str:
        topic = unique()
        bus.create_topic(topic, queues)
        return topic

    def truncate(self, bus: Any, topic: str, queue: int, before: int) -> None:
        raise NotImplementedError


class EmbeddedHarness(Harness):
    name = "embedded"
    atomic_commit = True

    def make_bus(self, state: Path, default_queues: int = 8) -> Any:
        from sluice.bus.embedded import EmbeddedBus

        return EmbeddedBus(state / "bus", default_queues=default_queues)

    def truncate(self, bus: Any, topic: str, queue: int, before: int) -> None:
        # Retention removes whole segments: keep the bytes of the segments at or after `before`
        # (the test writes segment boundaries there), read from the documented index.
        with sqlite3.connect(Path(bus.root) / topic / "index.sqlite") as db:
            keep = db.execute(
                "SELECT COALESCE(SUM(byte_size), 0) FROM segments "
                "WHERE queue = ? AND base_offset >= ?",
                (queue, before),
            ).fetchone()[0]
        bus.log.apply_retention(topic, max_bytes=keep)
        assert bus.log.offsets(topic)[queue].min_offset == before


class KafkaHarness(Harness):
    name = "kafka"
    # A commit is one transaction, but the journal's roll-forward of a partly sent batch (a
    # transaction that committed part of it, as the contract's crash test simulates) still holds.
    atomic_commit = False
    marker = 1

    def __init__(self, cluster: MockKafkaCluster | RealKafka) -> None:
        self.cluster = cluster

    def make_bus(self, state: Path, default_queues: int = 8) -> Any:
        from sluice.bus.kafka import KafkaBus

        return KafkaBus(
            state / "bus",
            bootstrap_servers=self.cluster.bootstraps,
            default_queues=default_queues,
            timeout_s=20.0,
        )

    def new_topic(self, bus: Any, queues: int) -> str:
        # (The mock cluster has no CreateTopics: there it is created the mock's way.)
        topic = unique()
        self.cluster.create_topic(topic, queues)
        return topic

    def truncate(self, bus: Any, topic: str, queue: int, before: int) -> None:
        self.cluster.delete_records(topic, queue, before)


class RocketMQHarness(Harness):
    name = "rocketmq"
    can_truncate = False  # retention is by commit-log file age (fileReservedTime=48h)

    def make_bus(self, state: Path, default_queues: int = 8) -> Any:
        from sluice.bus.rocketmq import RocketMQBus

        return RocketMQBus(
            state / "bus", namesrv_addr=ROCKETMQ_NAMESRV, default_queues=default_queues
        )


BACKENDS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("kafka", id="kafka"),
    pytest.param(
        "rocketmq",
        id="rocketmq",
        marks=[pytest.mark.rocketmq],
    ),
]


def backends(applies: Callable[[type[Harness]], bool]) -> list[Any]:
    """The entries of BACKENDS whose harness class a contract test applies to (so a test that
    cannot apply to a backend is not generated for it, rather than generated and skipped)."""
    classes = {"embedded": EmbeddedHarness, "kafka": KafkaHarness, "rocketmq": RocketMQHarness}
    return [p for p in BACKENDS if applies(classes[p.values[0]])]


def harness_for(name: str, request: pytest.FixtureRequest) -> Harness:
    if name == "embedded":
        return EmbeddedHarness()
    if name == "kafka":
        return KafkaHarness(request.getfixturevalue("kafka_cluster"))
    return RocketMQHarness()


def topic_frame(
    topic: str,
    values: list[bytes],
    *,
    keys: list[bytes | None] | None = None,
    headers: list[str | None] | None = None,
    route: list[int | None] | None = None,
    timestamps: list[int | None] | None = None,
) -> pa.RecordBatch:
    """Rows as the topic writer receives them (what the engine's source frame becomes)."""
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(keys or [None] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(timestamps or [None] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(headers or [None] * n, pa.string()),
            pa.array(route if route is not None else [None] * n, pa.int32()),
        ],
        names=["topic", "key", "value", "timestamp", "headers", "route"],
    )


def records(bus: Any, topic: str) -> int:
    """How many records ``topic`` holds, read back (offsets are not dense on every bus)."""
    return sum(
        len(read_all(bus, topic, r.queue, r.min_offset, r.max_offset))
        for r in bus.describe(topic).ranges
    )


def read_all(bus: Any, topic: str, queue: int, start: int, end: int) -> list[dict[str, Any]]:
    """Records of `[start, end)` with their offsets, through the shared reader's range read."""
    from sluice.bus.spark import read_range

    rows: list[dict[str, Any]] = []
    for batch in read_range(bus.log, topic, queue, start, end):
        rows.extend(batch.to_pylist())
    return rows


Committer = Callable[[Any, str, int, list[pa.RecordBatch]], None]


def sink_reader(bus: Any, topic: str, folder: Path, **options: Any) -> Any:
    """The driver side of a sink `snk`'s topic reader of `topic` (one task, no position store,
    its control file in `folder`), as Spark's streaming engine drives it; `options` add to or
    replace the reader's keywords (e.g. `notes`, `max_tasks`)."""
    keywords = {
        "name": "snk",
        "topics": [topic],
        "max_tasks": 1,
        "control_path": str(folder / "control.json"),
        "positions": None,
        **options,
    }
    return bus.topic_reader(**keywords)(options={}).streamReader(schema=None)
