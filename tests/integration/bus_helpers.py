"""Real brokers for the bus tests, and one harness per backend for the shared contract suite.

* Kafka: librdkafka's own mock cluster (several brokers on 127.0.0.1, real Kafka protocol),
  created through ctypes from the librdkafka that the confluent-kafka wheel bundles. It supports
  produce/fetch by offset, list offsets, consumer-group offset commits and the idempotent
  producer; it has no topic admin API (topics are created here with `rd_kafka_mock_topic_create`)
  and keeps only a few MiB per partition.
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
def kafka_cluster() -> Iterator[MockKafkaCluster]:
    cluster = MockKafkaCluster(brokers=3)
    yield cluster
    cluster.close()


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

    def __init__(self, cluster: MockKafkaCluster) -> None:
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
        # The mock cluster has no CreateTopics: create it the mock's way, with the exact count.
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


def read_all(bus: Any, topic: str, queue: int, start: int, end: int) -> list[dict[str, Any]]:
    """Records of `[start, end)` with their offsets, through the shared reader's range read."""
    from sluice.bus.spark import read_range

    rows: list[dict[str, Any]] = []
    for batch in read_range(bus.log, topic, queue, start, end):
        rows.extend(batch.to_pylist())
    return rows


Committer = Callable[[Any, str, int, list[pa.RecordBatch]], None]
