"""The replicator connectors' pure logic and the error paths that need no broker: topic selection,
renaming, queue ownership and mapping, message → record batches, records the targets cannot
carry, and an unreachable Kafka target."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from sluice.clients.rocketmq import StoredMessage
from sluice.connectors import _replication as rep
from sluice.connectors.kafka.sink import KafkaSinkTask
from sluice.connectors.kafka.source import _batch as kafka_batch
from sluice.connectors.rocketmq.sink import RocketMQSinkTask
from sluice.connectors.rocketmq.source import _batch as rocketmq_batch
from sluice.sdk import (
    BatchId,
    ConfigException,
    ConnectException,
    RetriableException,
    SinkTaskContext,
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _values(topics: list[str] | None = None, regex: str | None = None) -> dict:
    return {"source.topics": topics, "source.topics.regex": regex}


def test_topic_selection() -> None:
    assert rep.topic_filter(_values(["a", "b", "a"])) == ["a", "b"]
    matches = rep.topic_filter(_values(regex="orders-(eu|us)"))
    assert callable(matches)
    assert matches("orders-eu") and not matches("orders-eu-2") and not matches("x-orders-us")
    with pytest.raises(ConfigException, match=r"^source.topics: required key is missing"):
        rep.topic_filter(_values())
    with pytest.raises(ConfigException, match=r"^source.topics.regex: set either"):
        rep.topic_filter(_values(["a"], "b"))
    with pytest.raises(ConfigException, match=r"^source.topics.regex: invalid regular expression"):
        rep.topic_filter(_values(regex="a("))


def test_renaming() -> None:
    assert rep.renamed("${topic}-copy", "orders") == "orders-copy"
    assert rep.renamed("fixed", "orders") == "fixed"
    rep.check_rename("dc2.${topic}")
    with pytest.raises(ConfigException, match=r"^topic.rename.format: gives 'a/topic'"):
        rep.check_rename("a/${topic}")
    with pytest.raises(ConfigException, match=r"^topic.rename.format: gives ''"):
        rep.check_rename("")


def test_each_queue_has_exactly_one_task_and_keeps_its_number_modulo() -> None:
    shares = rep.task_shares(3, 10, {"k": "v"})
    assert len(shares) == 3 and all(s["k"] == "v" for s in shares)
    assert len(rep.task_shares(8, 2, {})) == 2 and len(rep.task_shares(4, 0, {})) == 1
    partitions = [{"topic": "t", "brokerName": "b", "queueId": str(q)} for q in range(64)]
    for p in partitions:
        assert sum(rep.owns(share, p) for share in shares) == 1
    assert [rep.target_queue(q, 3) for q in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_rocketmq_messages_become_records() -> None:
    props = {"KEYS": "k1", "TAGS": "tagA", "UNIQ_KEY": "X", "WAIT": "true", "color": "red"}
    messages = [
        StoredMessage(0, 0, 1_000, 2_000, b"\x00body", "src", props),
        StoredMessage(0, 1, 1_000, 2_000, b"", "src", {"sluice.ts": "1500", "sluice.batch": "x"}),
    ]
    batch = rocketmq_batch(messages, "dst")
    rows = batch.to_pylist()
    assert [r["topic"] for r in rows] == ["dst", "dst"]
    assert rows[0]["key"] == "k1" and rows[0]["value"] == b"\x00body"
    assert sorted(rows[0]["headers"]) == [("TAGS", "tagA"), ("color", "red")]
    assert rows[1]["key"] is None and rows[1]["headers"] is None
    assert rows[0]["timestamp"] == datetime.fromtimestamp(1.0, UTC)  # born timestamp
    assert rows[1]["timestamp"] == datetime.fromtimestamp(1.5, UTC)  # sluice.ts wins


class _KafkaMessage:
    def __init__(self, headers: list, timestamp: tuple[int, int] = (1, 5_000)) -> None:
        self._headers, self._timestamp = headers, timestamp

    def topic(self) -> str:
        return "src"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return 17

    def key(self) -> bytes:
        return b"\xff"

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> list:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


def test_kafka_records_become_records_and_bad_headers_are_named() -> None:
    rows = kafka_batch(
        [_KafkaMessage([("a", b"1"), ("none", None)]), _KafkaMessage([], (0, -1))], "dst"
    ).to_pylist()
    assert rows[0]["headers"] == [("a", "1")] and rows[0]["key"] == b"\xff"
    assert rows[0]["timestamp"] == datetime.fromtimestamp(5.0, UTC)
    assert rows[1]["timestamp"] is None and rows[1]["headers"] is None
    with pytest.raises(ConnectException, match=r"^record src/3@17: header 'bin' is not UTF-8"):
        kafka_batch([_KafkaMessage([("bin", b"\xff\xfe")])], "dst")


def _sink_frame(key: pa.Array, headers: list[str | None]) -> pa.RecordBatch:
    n = len(key)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["t"] * n),
            pa.array([2] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            key,
            pa.array([b"v"] * n),
            pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", "UTC")),
            pa.array(headers, pa.string()),
        ],
        names=["topic", "queue_id", "queue_offset", "key", "value", "timestamp", "headers"],
    )


def _rocketmq_sink() -> RocketMQSinkTask:
    task = RocketMQSinkTask()
    task.context = SinkTaskContext("c", 0, BatchId("run", 1))
    task.start({"target.namesrv": f"127.0.0.1:{_closed_port()}", "connect.topicnames": "t"})
    return task


def test_rocketmq_sink_refuses_what_rocketmq_cannot_carry() -> None:
    with pytest.raises(ConnectException, match="a record key is not UTF-8 text"):
        _rocketmq_sink().put_batch(_sink_frame(pa.array([b"\xff"], pa.binary()), [None]))
    with pytest.raises(ConnectException, match=r"^record t/2: a key or extension contains"):
        _rocketmq_sink().put_batch(_sink_frame(pa.array(["k"]), ['{"h": "a\\u0001b"}']))


def test_rocketmq_sink_on_an_unreachable_cluster_is_retriable_and_names_the_key() -> None:
    task = _rocketmq_sink()
    task.put_batch(_sink_frame(pa.array(["k"]), [None]))  # held until flush
    with pytest.raises(RetriableException, match=r"^target.namesrv=127.0.0.1:\d+: no name server"):
        task.flush(BatchId("run", 1))


def test_kafka_sink_on_an_unreachable_cluster_is_retriable_and_names_the_key() -> None:
    task = KafkaSinkTask()
    task.context = SinkTaskContext("c", 0, BatchId("run", 1))
    address = f"127.0.0.1:{_closed_port()}"
    task.start(
        {
            "target.bootstrap.servers": address,
            "connect.topicnames": "t",
            "target.timeout.ms": "1000",
        }
    )
    with pytest.raises(RetriableException, match=rf"^target.bootstrap.servers={address}: "):
        task.put_batch(_sink_frame(pa.array(["k"]), [None]))
