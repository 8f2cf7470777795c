"""A poll-only source still polls while its micro-batch waits for a core (the poll-ahead thread of
`sluice.engine.source`): an outage shows in its status although Spark plans nothing, and what
it polls meanwhile is delivered once the cores are free."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.topics import topic_count

pytestmark = pytest.mark.spark


def _hold_every_core(spark, release: Path) -> threading.Thread:
    """Run a job with a task per slot of the session (every core) that wait until `release`
    exists, as sinks retrying a write hold them; returns once all run."""
    flag = str(release)

    def hold(_: object) -> None:
        import os
        import time

        deadline = time.monotonic() + 300  # never hold the shared session forever
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.05)

    sc = spark.sparkContext
    slots = sc.defaultParallelism  # local[N]: N
    job = threading.Thread(
        target=lambda: sc.parallelize(range(slots), slots).foreach(hold), daemon=True
    )
    job.start()

    def all_running() -> bool:
        infos = [sc.statusTracker().getStageInfo(s) for s in sc.statusTracker().getActiveStageIds()]
        return sum(i.numActiveTasks for i in infos if i is not None) >= slots

    wait_until(all_running, 60, "every core held")
    return job


def _start_queue(runner, queue: Path, topic: str, timeout_ms: str, delay_ms: str) -> None:
    """The poll-only queue source on `queue`, its first message delivered to `topic`."""
    queue.mkdir()
    runner.start(
        "q",
        {
            "connector.class": "tests.e2e.replay_sources.DownableQueueSource",
            "queue.dir": str(queue),
            "connect.topicname": topic,
            "errors.retry.timeout": timeout_ms,
            "errors.retry.delay.max.ms": delay_ms,
        },
    )
    query = runner.running["q"].query
    (queue / "000.msg").write_text("first")

    def delivered() -> bool:
        assert query.exception() is None, query.exception()
        return topic_count(Path(runner.root), topic) == 1

    wait_until(delivered, 120, "the first message")


def _noted(runner) -> bool:
    """Whether the source's task has a retry note now."""
    return "q" in runner.counters.retrying(int(time.time() * 1000))


def _down_while_a_batch_waits(runner, spark, queue: Path, release: Path) -> threading.Thread:
    """Hold every core, let a second message be polled and planned (its micro-batch then waits
    for a core and Spark asks no more), take the queue down, and wait for the task's note."""
    job = _hold_every_core(spark, release)
    try:
        (queue / "001.msg").write_text("second")
        # the first message is acknowledged when Spark plans the micro-batch after it
        wait_until(lambda: not (queue / "000.msg").exists(), 60, "the second batch planned")
        (queue / "DOWN").touch()
        wait_until(lambda: _noted(runner), 60, "the source's note")
    except BaseException:
        release.touch()  # never leave the shared session's cores held
        raise
    return job


def test_a_poll_only_source_notes_an_outage_while_its_batch_waits_for_a_core(
    runner, spark, tmp_path: Path
) -> None:
    queue, release, root = tmp_path / "queue", tmp_path / "release", Path(runner.root)
    _start_queue(runner, queue, "held", "-1", "500")
    query = runner.running["q"].query

    def held(n: int) -> bool:
        assert query.exception() is None, query.exception()
        return topic_count(root, "held") == n

    job = _down_while_a_batch_waits(runner, spark, queue, release)
    try:
        [note] = runner.counters.retrying(int(time.time() * 1000))["q"].values()
        assert "the queue is down" in note["error"], note
        assert topic_count(root, "held") == 1  # the cores were held all along
        (queue / "002.msg").write_text("third")
        (queue / "DOWN").unlink()
        # polled while the batch still waits: staged ahead, offered to the next micro-batch
        wait_until(lambda: not _noted(runner), 60, "the note cleared")
    finally:
        release.touch()
        job.join(60)
    wait_until(lambda: held(3), 120, "every message")
    # acknowledged once the micro-batch after theirs is planned: all but the last
    acked = lambda: [p.name for p in queue.glob("*.msg")] == ["002.msg"]  # noqa: E731
    wait_until(acked, 60, "the first two acknowledged")
    assert topic_count(root, "held") == 3  # nothing twice


def test_a_poll_ahead_that_gives_up_fails_the_query_at_sparks_next_call(
    runner, spark, tmp_path: Path
) -> None:
    queue, release, root = tmp_path / "queue", tmp_path / "release", Path(runner.root)
    _start_queue(runner, queue, "gives-up", "1500", "300")
    query = runner.running["q"].query
    job = _down_while_a_batch_waits(runner, spark, queue, release)
    try:
        wait_until(lambda: not _noted(runner), 60, "the poll-ahead gave up")
        # the queue is back, but the poll that gave up fails the query at Spark's next call
        (queue / "DOWN").unlink()
    finally:
        release.touch()
        job.join(60)
    wait_until(lambda: query.exception() is not None, 120, "the query to fail")
    message = str(query.exception())
    assert "poll of task 0 of q failed after" in message and "the queue is down" in message
    assert topic_count(root, "gives-up") == 2  # what was polled before is delivered
