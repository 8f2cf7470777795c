"""Writes from the executors (`TopicLog.part_writer`) on the real Kafka 4 and RocketMQ 5 brokers
of `scripts/servers.sh`: each task's part of a micro-batch is in the topic exactly once however
often the task runs — after a replay, after an attempt killed mid-part (kill -9 of a real
process), and with a zombie attempt (a real process paused mid-part by SIGSTOP and resumed after
a newer attempt finished the part); a task whose records follow its predecessor's waits for it;
a superseded lease generation sends nothing. Counts are taken in the topic (Kafka: as a
`read_committed` consumer sees it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import (
    ROCKETMQ_NAMESRV,
    RealKafka,
    read_all,
    records,
    topic_frame,
    unique,
)
from tests.integration.part_child import part_route, part_rows

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker

CHILD = Path(__file__).with_name("part_child.py")

BUSES = [
    pytest.param("kafka", id="kafka"),
    pytest.param("rocketmq", id="rocketmq", marks=[pytest.mark.rocketmq]),
]


class Broker:
    """One broker bus for a test: its worker keys, a bus on them, and how to count a topic."""

    def __init__(self, kind: str, state: Path, kafka: RealKafka | None) -> None:
        from sluice.bus import create_bus

        self.kind = kind
        if kind == "kafka":
            assert kafka is not None
            self.kafka = kafka
            self.props = {"bus": "kafka", "bootstrap.servers": kafka.bootstraps}
        else:
            self.props = {"bus": "rocketmq", "namesrvAddr": ROCKETMQ_NAMESRV}
        self.state = state
        self.bus = create_bus(kind, self.props, state)

    def topic(self, queues: int = 2) -> str:
        name = unique("part")
        self.bus.create_topic(name, queues)
        return name

    def values(self, topic: str, queue: int | None = None) -> list[bytes]:
        """Every value in ``topic`` (or one queue), in queue order, as a reader sees them."""
        queues = [queue] if queue is not None else range(self.bus.describe(topic).queues)
        out: list[bytes] = []
        for q in queues:
            rng = self.bus.describe(topic).ranges[q]
            out.extend(r["value"] for r in read_all(self.bus, topic, q, rng.min_offset, 10**12))
        return out

    def committed_count(self, topic: str) -> int:
        """Kafka: what a plain read_committed consumer counts; RocketMQ: every record."""
        if self.kind == "kafka":
            return len(self.kafka.committed_values(topic))
        return records(self.bus, topic)


@pytest.fixture(params=BUSES)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    kafka = request.getfixturevalue("kafka_cluster") if request.param == "kafka" else None
    b = Broker(request.param, tmp_path / "bus", kafka)
    yield b
    b.bus.close()


def frame_of(topic: str, values: list[bytes], route: list[int], *, follows: bool = False) -> Any:
    frame = topic_frame(topic, values, route=route)
    return frame.replace_schema_metadata({b"sluice.follows": b"1"}) if follows else frame


def test_a_part_is_written_once_per_writer_batch_and_task(broker: Broker) -> None:
    topic = broker.topic()
    values = part_rows(300)
    frame = frame_of(topic, values, part_route(300))
    plan = broker.bus.topic_appender(writer_id="c/run-1")
    first = plan.write(iter([frame]), 0, batch_id=4)
    assert first.rows == 300 and not first.replayed
    assert set(first.ends) == {topic}
    plan.commit([first], 4)
    assert sorted(broker.values(topic)) == sorted(values)

    # Spark runs task 0 of batch 4 again (a retry, or the replay after a crash): nothing new
    again = plan.write(iter([frame]), 0, batch_id=4)
    assert again.replayed and again.rows == 0
    plan.commit([again], 4)
    assert broker.committed_count(topic) == 300
    # another task of the batch, the next batch, another writer: each its own part
    plan.commit([plan.write(iter([frame]), 1, batch_id=4)], 4)
    plan.commit([plan.write(iter([frame]), 0, batch_id=5)], 5)
    other = broker.bus.topic_appender(writer_id="c/run-2")
    other.commit([other.write(iter([frame]), 0, batch_id=4)], 4)
    assert broker.committed_count(topic) == 1_200
    # per queue, each part's records in the order they were written
    queue0 = [v for v, q in zip(values, part_route(300), strict=True) if q == 0]
    assert broker.values(topic, 0) == queue0 * 4


def test_an_empty_part_and_a_mismatched_commit(broker: Broker) -> None:
    topic = broker.topic()
    plan = broker.bus.topic_appender(writer_id="c/run-1")
    empty = plan.write(iter([topic_frame(topic, [])]), 0, batch_id=0)
    assert empty.rows == 0 and empty.ends == {}
    plan.commit([empty], 0)
    assert broker.bus.count(topic) == 0
    # the task finished its (empty) part: a task that follows it need not wait
    assert broker.bus.log.task_finished("c/run-1", 0, 0)
    part = plan.write(iter([frame_of(topic, [b"x"], [0])]), 0, batch_id=1)
    with pytest.raises(ValueError, match=r"committed as writer 'c/run-1' batch 2"):
        plan.commit([part], 2)


def test_a_task_that_follows_its_predecessor_sends_after_it(broker: Broker) -> None:
    """Task 1 continues task 0's source range: it starts first and holds its rows while task 0
    writes; its rows arriving after task 0 finished are sent after the held ones, so the queue
    holds task 0's rows, then task 1's, each once."""
    topic = broker.topic(1)
    plan = broker.bus.topic_appender(writer_id="c/run-1")
    first = [f"a{i:04d}".encode() for i in range(500)]
    second = [f"b{i:04d}".encode() for i in range(600)]
    receipts: dict[int, Any] = {}
    held = threading.Event()

    def follower() -> None:
        def frames() -> Any:
            yield frame_of(topic, second[:200], [0] * 200, follows=True)
            yield frame_of(topic, second[200:400], [0] * 200, follows=True)
            # reached once the writer asked for a third frame: it holds the first two
            held.set()
            # the rest comes once task 0 finished: the task is released in mid-stream
            wait_until(lambda: broker.bus.log.task_finished("c/run-1", 0, 0), 60)
            yield frame_of(topic, second[400:], [0] * 200, follows=True)

        receipts[1] = plan.write(frames(), 1, batch_id=0)

    thread = threading.Thread(target=follower)
    thread.start()
    assert held.wait(30)  # the follower is ahead (the order must not depend on who runs first)
    assert 1 not in receipts and broker.bus.count(topic) == 0  # still waiting for task 0
    receipts[0] = plan.write(iter([frame_of(topic, first, [0] * 500)]), 0, batch_id=0)
    thread.join(60)
    plan.commit([receipts[0], receipts[1]], 0)
    assert receipts[1].rows == 600
    assert broker.values(topic, 0) == first + second


def _write_in_thread(
    plan: Any, frames: list[Any], task: int, ordered: bool, receipts: dict[int, Any]
) -> threading.Thread:
    def write() -> None:
        receipts[task] = plan.write(iter(frames), task, batch_id=0, ordered=ordered)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_an_empty_task_between_two_keeps_them_in_order(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks 1 and 2 follow 0 and 1; task 1 has no records (the engine's marker frame only, or
    nothing at all on the JVM path): it still waits for task 0 before it says it finished, so
    task 2's records come after task 0's."""
    log = broker.bus.log
    waiting: set[tuple[str, int]] = set()  # (writer, task waited for) of the tasks now waiting
    wait_task = log.wait_task

    def noted_wait(writer_id: str, batch_id: int, task: int, *, timeout_s: float) -> None:
        waiting.add((writer_id, task))
        wait_task(writer_id, batch_id, task, timeout_s=timeout_s)

    monkeypatch.setattr(log, "wait_task", noted_wait)
    topic = broker.topic(1)
    for writer, empty in (("c/fused", [frame_of(topic, [], [], follows=True)]), ("c/jvm", [])):
        plan = broker.bus.topic_appender(writer_id=writer)
        ordered = writer == "c/jvm"
        receipts: dict[int, Any] = {}
        late = [frame_of(topic, [b"late"], [0], follows=True)]
        threads = [
            _write_in_thread(plan, late, 2, ordered, receipts),
            _write_in_thread(plan, empty, 1, ordered, receipts),
        ]
        # both are waiting for their predecessor (an empty task 1 that did not wait: a timeout)
        wait_until(lambda w=writer: {(w, 0), (w, 1)} <= waiting, 60, f"{writer}: tasks waiting")
        assert not receipts and not log.task_finished(writer, 0, 1)
        receipts[0] = plan.write(iter([frame_of(topic, [b"early"], [0])]), 0, batch_id=0)
        for thread in threads:
            thread.join(60)
        plan.commit([receipts[0], receipts[1], receipts[2]], 0)
    assert broker.values(topic, 0) == [b"early", b"late"] * 2


def test_a_superseded_lease_generation_sends_nothing(broker: Broker) -> None:
    from sluice.bus.base import WriterFenced

    topic = broker.topic()
    old = broker.bus.topic_appender(writer_id="c/run", fence=("c", 1))
    old.commit([old.write(iter([frame_of(topic, [b"a"], [0])]), 0, batch_id=0)], 0)
    late = old.write(iter([frame_of(topic, [b"late"], [1])]), 0, batch_id=1)
    broker.bus.fence("c", 2)
    with pytest.raises(WriterFenced, match="fenced: writer 'c' epoch 1 may no longer commit"):
        old.commit([late], 1)  # a part sent before the takeover: its batch is refused
    with pytest.raises(WriterFenced):
        old.write(iter([frame_of(topic, [b"zombie"], [1])]), 0, batch_id=2)
    new = broker.bus.topic_appender(writer_id="c/run", fence=("c", 2))
    new.commit([new.write(iter([frame_of(topic, [b"b"], [1])]), 0, batch_id=2)], 2)
    assert b"zombie" not in broker.values(topic)
    assert sorted(broker.values(topic)) == [b"a", b"b", b"late"]


# ------------------------------------------------------------------- attempts in real processes
def _attempt(broker: Broker, topic: str, batch: int, rows: int) -> subprocess.Popen[str]:
    """Task 0's part of `batch` of writer `c/run`, in a process of its own, stopped after its
    first half reached the broker (it printed SENT)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    args = [json.dumps(broker.props), str(broker.state), "c/run", str(batch), "0", topic]
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), *args, str(rows)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "SENT", line + proc.stdout.read()
    return proc


def _retry(broker: Broker, topic: str, batch: int, rows: int) -> Any:
    """The newer attempt of the same part (the whole of it), and the driver's commit."""
    plan = broker.bus.topic_appender(writer_id="c/run")
    part = plan.write(iter([frame_of(topic, part_rows(rows), part_route(rows))]), 0, batch_id=batch)
    plan.commit([part], batch)
    return part


def _each_row_once_in_order(broker: Broker, topic: str, rows: int) -> None:
    values, route = part_rows(rows), part_route(rows)
    assert broker.committed_count(topic) == rows
    for queue in (0, 1):
        assert broker.values(topic, queue) == [
            v for v, q in zip(values, route, strict=True) if q == queue
        ]


def test_an_attempt_killed_mid_part_is_completed_by_the_next(broker: Broker) -> None:
    topic = broker.topic()
    rows = 4_000
    proc = _attempt(broker, topic, 3, rows)
    if broker.kind == "kafka":
        # the first half is in the broker, in the open transaction: no reader sees it
        assert broker.kafka.committed_values(topic) == []
    else:  # RocketMQ has no transactions: the half is visible, and will not be sent again
        # (readable once the broker dispatched it to the consume queues, shortly after SENT)
        wait_until(lambda: records(broker.bus, topic) == rows // 2, 30, "the first half read")
    proc.kill()
    proc.wait(30)
    part = _retry(broker, topic, 3, rows)
    # Kafka: the dead attempt's transaction was aborted, all rows sent again in a new one;
    # RocketMQ: the stored half was counted and only the rest sent
    assert part.rows == (rows if broker.kind == "kafka" else rows - rows // 2)
    _each_row_once_in_order(broker, topic, rows)


def test_a_zombie_attempt_cannot_make_its_records_visible(broker: Broker) -> None:
    """An attempt paused mid-part (SIGSTOP) outlives it: a newer attempt writes the whole part
    and the micro-batch commits; resumed, the zombie sends its second half and tries to
    finish. Kafka fences its producer (its transaction was aborted by the newer attempt's
    initialisation, its produce and commit are refused); on RocketMQ the newer attempt took
    the part over and the zombie stops before its next round trip."""
    topic = broker.topic()
    rows = 4_000
    zombie = _attempt(broker, topic, 7, rows)
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        _retry(broker, topic, 7, rows)
        _each_row_once_in_order(broker, topic, rows)
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    assert zombie.stdin is not None and zombie.stdout is not None
    zombie.stdin.write("go\n")
    zombie.stdin.flush()
    out = zombie.stdout.read()
    assert zombie.wait(60) == 3, out
    expected = "ProducerFenced" if broker.kind == "kafka" else "PartTakenOver"
    (failed,) = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert failed.startswith(f"FAILED {expected}"), out
    assert "DONE" not in out
    _each_row_once_in_order(broker, topic, rows)
