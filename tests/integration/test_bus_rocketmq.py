"""The RocketMQ bus on a real broker (the 5.x one of `scripts/servers.sh up rocketmq`, or the one
`SLUICE_ROCKETMQ_NAMESRV` names): interoperability with the official client, binary data,
consumer-group offsets, queues added while running, and records RocketMQ cannot carry."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.bus.rocketmq import RocketMQBus
from sluice.clients import rocketmq as rm
from tests.conftest import wait_until
from tests.integration.bus_helpers import (
    ROCKETMQ_NAMESRV,
    RocketMQHarness,
    read_all,
    topic_frame,
    unique,
)

pytestmark = [
    pytest.mark.rocketmq,
]


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[RocketMQBus]:
    b = RocketMQHarness().make_bus(tmp_path)
    yield b
    b.close()


def _commit(bus: RocketMQBus, frame: Any, batch: int = 0) -> None:
    appender = bus.topic_appender(writer_id="w")
    appender.commit([appender.write(iter([frame]), 0)], batch)


@pytest.fixture
def official(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The `rocketmq` PyPI client (rocketmq-client-cpp): an independent implementation."""
    # It writes its logs under $HOME/logs: somewhere disposable, before the library loads and
    # while the test's clients start; HOME is restored after the test (the servers' jar cache
    # and everything else started later read the real one).
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("rocketmq-client-home")))
    from rocketmq import client

    return client


def _official_pull(client: Any, topic: str, queue: int, offset: int) -> list[dict[str, Any]]:
    """Messages of one queue from `offset`, copied out at once (they die with their batch); the
    package's own `pull()` loops forever on a broker timeout, so this one is bounded."""
    from rocketmq.ffi import _CMessageQueue, _CPullStatus, dll

    consumer = client.PullConsumer(f"probe-{unique()}")
    consumer.offset_table = {}  # the class attribute is shared by every instance
    consumer.set_namesrv_addr(ROCKETMQ_NAMESRV)
    consumer.start()
    out: list[dict[str, Any]] = []
    try:
        handles = ctypes.POINTER(_CMessageQueue)()
        size = ctypes.c_int()
        dll.FetchSubscriptionMessageQueues(
            consumer._handle, topic.encode(), ctypes.pointer(handles), ctypes.pointer(size)
        )
        # the client's own queue struct (it names the broker)
        (mq,) = [handles[i] for i in range(size.value) if handles[i].queueId == queue]
        mq = _CMessageQueue(topic=mq.topic, brokerName=mq.brokerName, queueId=mq.queueId)
        dll.ReleaseSubscriptionMessageQueue(handles)
        for _attempt in range(50):
            result = dll.Pull(consumer._handle, ctypes.pointer(mq), b"*", offset, 32)
            try:
                if result.pullStatus == _CPullStatus.FOUND:
                    for i in range(result.size):
                        m = client.RecvMessage(result.msgFoundList[i])
                        out.append(
                            {
                                "keys": m.keys,
                                "tags": m.tags,
                                "body": m.body,
                                "a": m.get_property("a"),
                                "offset": m.queue_offset,
                            }
                        )
                    offset = result.nextBeginOffset
                elif result.pullStatus == _CPullStatus.NO_NEW_MSG:
                    break
            finally:
                dll.ReleasePullResult(result)
    finally:
        consumer.shutdown()
    return out


def test_the_official_client_reads_what_sluice_writes(bus: RocketMQBus, official: Any) -> None:
    topic = unique()
    bus.create_topic(topic, 2)
    frame = topic_frame(
        topic,
        [b"hello", b"world"],
        keys=[b"k1", None],
        headers=['{"a": "1", "TAGS": "tagA"}', None],
        route=[1, 1],
    )
    _commit(bus, frame)
    got = _official_pull(official, topic, 1, 0)
    assert [(m["keys"], m["tags"], m["body"], m["a"], m["offset"]) for m in got] == [
        (b"k1", b"tagA", b"hello", b"1", 0),
        (b"", b"", b"world", b"", 1),  # the C client reports a missing property as b""
    ]


def test_sluice_reads_what_the_official_client_writes(bus: RocketMQBus, official: Any) -> None:
    topic = unique()
    bus.create_topic(topic, 1)
    producer = official.Producer(f"probe-{unique()}")
    producer.set_namesrv_addr(ROCKETMQ_NAMESRV)
    producer.start()
    try:
        for i in range(3):
            msg = official.Message(topic)
            msg.set_keys(f"key-{i}")
            msg.set_tags("tagB")
            msg.set_property("seq", str(i))
            msg.set_body(f"body {i}")
            producer.send_sync(msg)
    finally:
        producer.shutdown()
    wait_until(lambda: bus.count(topic) == 3, 30, "three messages")
    rows = read_all(bus, topic, 0, 0, 3)
    assert [r["key"] for r in rows] == [b"key-0", b"key-1", b"key-2"]
    assert [r["value"] for r in rows] == [b"body 0", b"body 1", b"body 2"]
    assert rows[1]["headers"] == '{"TAGS": "tagB", "seq": "1"}'
    assert all(r["timestamp"] is not None for r in rows)  # the born timestamp


def test_binary_values_and_keys_round_trip(bus: RocketMQBus) -> None:
    topic = unique()
    bus.create_topic(topic, 1)
    values = [bytes(range(256)), b"\x00", b"", b"x" * 300_000]
    keys = [b"\xff\xfe", b"text", b"a\x01b", None]
    _commit(bus, topic_frame(topic, values, keys=keys, route=[0] * 4))
    rows = read_all(bus, topic, 0, 0, 10)
    assert [r["value"] for r in rows] == values
    assert [r["key"] for r in rows] == keys


def test_reader_commits_consumer_group_offsets(
    bus: RocketMQBus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique()
    bus.create_topic(topic, 2)
    _commit(bus, topic_frame(topic, [b"a", b"b", b"c"], route=[0, 0, 1]))
    reader = bus.topic_reader(
        name="snk",
        topics=[topic],
        max_tasks=1,
        control_path=str(tmp_path / "c.json"),
        positions=None,
    )(options={}).streamReader(schema=None)
    end = reader.latestOffset(reader.initialOffset(), None)
    # a group that never committed reads as 0 or "not found" on RocketMQ 4.9 (the broker
    # answers 0 while the queue's first message is still in memory)
    assert set(bus.log.group_offsets("connect-snk", topic).values()) <= {0, -1}
    assert end["q"] == {f"{topic}/0": 2, f"{topic}/1": 1}, end
    with caplog.at_level(logging.WARNING, logger="sluice.bus.spark"):
        reader.commit(end)
    # the reader only logs a failed group commit (monitoring never fails a batch): show it here
    assert "not committed" not in caplog.text, caplog.text
    assert bus.log.group_offsets("connect-snk", topic) == {0: 2, 1: 1}
    assert bus.queue_partition(topic, 1) == {
        "topic": topic,
        "brokerName": "broker-a",
        "queueId": "1",
    }


def test_a_new_groups_first_commit_keeps_every_queue(bus: RocketMQBus) -> None:
    # The broker creates a (topic, group)'s offset table on its first commit without a lock, and
    # handles pipelined requests on several threads: concurrent first commits each created a
    # table, and the last one replaced the others (CI once read queue 0 back as 0).
    topic = unique()
    bus.create_topic(topic, 16)
    for round_ in range(8):
        group = f"first-{round_}-{unique()}"
        offsets = {(topic, q): 100 + q for q in range(16)}
        bus.log.commit_group_offsets(group, offsets)
        assert bus.log.group_offsets(group, topic) == {q: 100 + q for q in range(16)}, group


def test_queues_added_while_running_are_picked_up(bus: RocketMQBus, tmp_path: Path) -> None:
    topic = unique()
    bus.create_topic(topic, 2)
    reader = bus.topic_reader(
        name="grow",
        topics=[topic],
        max_tasks=1,
        control_path=str(tmp_path / "g.json"),
        positions=None,
    )(options={}).streamReader(schema=None)
    start = reader.initialOffset()
    assert set(reader.latestOffset(start, None)["q"]) == {f"{topic}/0", f"{topic}/1"}
    # an operator gives the topic two more queues (what `mqadmin updateTopic -r 4 -w 4` does)
    route = bus.log._require(topic)
    ext = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": "false",
    }
    for address in {q.address for q in route}:
        (resp,) = rm.POOL.invoke_many(
            address, [(rm.UPDATE_AND_CREATE_TOPIC, ext, b"")], timeout_s=10
        )
        assert resp.code == rm.SUCCESS, resp.remark
    wait_until(lambda: bus.log.queue_count(topic) == 4, 30, "the route to show four queues")
    _commit(bus, topic_frame(topic, [b"new"], route=[3]))
    wait_until(
        lambda: reader.latestOffset(start, None)["q"].get(f"{topic}/3") == 1,
        30,
        "the new queue to be planned",
    )


def test_records_rocketmq_cannot_carry_fail_their_task_with_a_clear_message(
    tmp_path: Path,
) -> None:
    bus = RocketMQBus(tmp_path, namesrv_addr=ROCKETMQ_NAMESRV, max_message_size=10)
    topic = unique()
    bus.create_topic(topic, 1)
    appender = bus.topic_appender(writer_id="w")
    with pytest.raises(ValueError, match=r"11 bytes, more than maxMessageSize=10"):
        appender.write(iter([topic_frame(topic, [b"x" * 11], route=[0])]), 0)
    with pytest.raises(ValueError, match=r"control character"):
        appender.write(
            iter([topic_frame(topic, [b"x"], headers=['{"a": "\\u0001"}'], route=[0])]), 0
        )
    assert bus.count(topic) == 0


def test_topic_list_hides_system_topics(bus: RocketMQBus) -> None:
    topic = unique()
    info = bus.create_topic(topic, 3)
    assert info.queues == 3
    topics = bus.log.topics()
    assert topic in topics
    assert not {"TBW102", "SCHEDULE_TOPIC_XXXX", "DefaultCluster", "broker-a"} & set(topics)
    assert not any(t.startswith("%RETRY%") for t in topics)
