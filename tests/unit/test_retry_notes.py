"""Retry notes: a retry loop tells the task's status it rides out an outage, cheaply, and the note
goes once the loop settles (sdk._retry.watching, engine.retry.RetryNotes, the counters store, the
status shapes and the CLI's views)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.cli._render import connectors_table, render_text, status_view
from sluice.engine.retry import NOTE_GRACE_S, ConnectorNotes, RetryNotes, watched
from sluice.rest._shapes import task_status_body
from sluice.runtime.herder import Retrying, State, TaskStatus
from sluice.runtime.herder.base import _task_status
from sluice.sdk import RetriableException
from sluice.sdk.retry import Backoff, retry, watching
from sluice.store.counters import SqliteCounters
from sluice.store.statuses import Status


class Clock:
    """A settable clock, in epoch seconds."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A `RetryWatcher` that records what it is told."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def retrying(self, error: BaseException, wait_s: float) -> None:
        self.calls.append(f"retrying {error} {wait_s}")

    def settled(self) -> None:
        self.calls.append("settled")


def failing(times: int, error: str = "down"):
    left = [times]

    def call() -> str:
        if left[0]:
            left[0] -= 1
            raise RetriableException(error)
        return "ok"

    return call


def test_a_retry_loop_tells_the_watcher_of_its_thread_each_retry_and_that_it_settled() -> None:
    fast = Backoff.fixed(0.0)
    seen = Recorder()
    assert retry(failing(2), backoff=fast, sleep=lambda _: None) == "ok"  # nobody watching
    with watching(seen):
        assert retry(failing(0), backoff=fast) == "ok"
        assert seen.calls == []  # no retry, nothing to say
        assert retry(failing(2), backoff=fast, sleep=lambda _: None) == "ok"
        assert seen.calls == ["retrying down 0.0", "retrying down 0.0", "settled"]
        seen.calls.clear()
        with pytest.raises(RetriableException):
            retry(failing(5), backoff=fast, attempts=2, sleep=lambda _: None)
        assert seen.calls == ["retrying down 0.0", "settled"]  # gave up: settled too
        inner = Recorder()
        with watching(inner):
            retry(failing(1), backoff=fast, sleep=lambda _: None)
        assert len(inner.calls) == 2 and len(seen.calls) == 2  # the innermost is told
    retry(failing(1), backoff=fast, sleep=lambda _: None)
    assert len(seen.calls) == 2  # not watching any more


def test_notes_are_written_at_most_once_a_second_counted_and_cleared(tmp_path: Path) -> None:
    store = SqliteCounters(tmp_path / "counters.sqlite")
    clock = Clock()
    notes = RetryNotes(store, "c", 2, clock=clock)
    start_ms = int(clock.now * 1000)
    notes.retrying(ConnectionError("refused\nmore lines"), 0.3)
    assert store.retrying(start_ms) == {
        "c": {2: {"since_ms": start_ms, "attempts": 1, "error": "ConnectionError: refused"}}
    }
    for _ in range(50):  # a tight loop within the same second: no store write
        clock.now += 0.01
        notes.retrying(ConnectionError("again"), 0.3)
    note = store.retrying(start_ms)["c"][2]
    assert note["attempts"] == 1 and note["error"] == "ConnectionError: refused"
    assert store.get("c") == {"total-retries": 1}
    clock.now += 1.0
    notes.retrying(TimeoutError("slow"), 2.0)
    note = store.retrying(start_ms)["c"][2]
    assert note == {"since_ms": start_ms, "attempts": 52, "error": "TimeoutError: slow"}
    assert store.get("c") == {"total-retries": 52}
    notes.settled()
    assert store.retrying(start_ms) == {}
    assert store.get("c") == {"total-retries": 52}
    # the next outage starts a new note, with its own start and count
    clock.now += 100
    notes.retrying(ConnectionError("refused"), 0.3)
    note = store.retrying(int(clock.now * 1000))["c"][2]
    assert note["since_ms"] == int(clock.now * 1000) and note["attempts"] == 1
    assert store.get("c") == {"total-retries": 53}


def test_a_loop_that_holds_up_every_task_notes_each_and_counts_once(tmp_path: Path) -> None:
    """The bus's commits and reader planning (`ConnectorNotes()`): every task of the connector
    shows the note, `total-retries` grows by the loop's retries, not times the tasks; a reader's
    partition (`ConnectorNotes(partition)`) notes the task it reads for (partition mod tasks)."""
    import pickle

    store = SqliteCounters(tmp_path / "counters.sqlite")
    notes = pickle.loads(pickle.dumps(ConnectorNotes(store, "c", 3)))  # it crosses to Spark
    fast = Backoff.fixed(0.0)
    every = notes()
    with watching(every):
        retry(failing(1), backoff=fast, sleep=lambda _: None)
    assert store.retrying(0) == {} and store.get("c") == {"total-retries": 1}
    every.retrying(OSError("broker away"), 0.0)  # a reader's plan failed (no loop)
    assert set(store.retrying(0)["c"]) == {0, 1, 2}
    assert store.get("c") == {"total-retries": 2}
    every.settled()
    assert store.retrying(0) == {}
    with watching(notes(4)):
        retry(failing(1), backoff=fast, sleep=lambda _: None)
    assert store.get("c") == {"total-retries": 3}
    one = notes(4)
    one.retrying(OSError("broker away"), 0.0)
    assert set(store.retrying(0)["c"]) == {1}


def test_a_note_expires_when_its_writer_went_quiet_and_restart_clears_all(tmp_path: Path) -> None:
    store = SqliteCounters(tmp_path / "counters.sqlite")
    clock = Clock()
    RetryNotes(store, "c", 0, clock=clock).retrying(OSError("gone"), 5.0)
    RetryNotes(store, "c", 1, clock=clock).retrying(OSError("gone"), 5.0)
    RetryNotes(store, "d", 0, clock=clock).retrying(OSError("gone"), 5.0)
    due = clock.now + 5.0 + NOTE_GRACE_S
    assert set(store.retrying(int((due - 1) * 1000))["c"]) == {0, 1}
    assert store.retrying(int(due * 1000)) == {}  # the writer died mid-outage: the note expired
    store.clear_retrying("c")  # every task of c (a connector starting again)
    assert set(store.retrying(int(clock.now * 1000))) == {"d"}


def test_a_store_that_fails_is_logged_not_raised(tmp_path: Path, caplog) -> None:
    class Broken:
        def note_retrying(self, *args, **kwargs) -> None:
            raise OSError("disk full")

        def clear_retrying(self, *args, **kwargs) -> None:
            raise OSError("disk full")

    notes = RetryNotes(Broken(), "c", 3)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="sluice.engine.retry"):
        notes.retrying(OSError("away"), 0.1)
        notes.settled()
    assert caplog.text.count("c task 3: retry note not stored: disk full") == 2


def test_a_generator_is_watched_only_while_it_runs(tmp_path: Path) -> None:
    store = SqliteCounters(tmp_path / "counters.sqlite")
    fast = Backoff.fixed(0.0)
    closed = []

    def read():
        try:
            yield retry(failing(1), backoff=fast, sleep=lambda _: None)
            yield "second"
        finally:
            closed.append(True)

    items = watched(store, "c", 4, read())
    assert next(items) == "ok"
    assert store.get("c") == {"total-retries": 1}  # the read's retry, noted and counted
    outside = Recorder()
    with watching(outside):  # suspended: the generator's watcher is not this thread's
        retry(failing(1), backoff=fast, sleep=lambda _: None)
    assert len(outside.calls) == 2 and store.get("c") == {"total-retries": 1}
    items.close()
    assert closed == [True]


def test_status_shows_a_note_beside_running_tasks_only() -> None:
    notes = {0: {"since_ms": 1_700_000_000_000, "attempts": 7, "error": "ConnectionError: x"}}
    running = _task_status(0, Status("RUNNING", None, "w1", 0), notes)
    assert running.retrying == Retrying(1_700_000_000_000, 7, "ConnectionError: x")
    assert _task_status(0, Status("FAILED", "Boom", "w1", 0), notes).retrying is None
    assert _task_status(1, Status("RUNNING", None, "w1", 1), notes).retrying is None
    body = task_status_body(running)
    assert body == {
        "id": 0,
        "state": "RUNNING",
        "trace": None,
        "workerId": "w1",
        "retrying": {"since": 1_700_000_000_000, "attempts": 7, "error": "ConnectionError: x"},
    }
    plain = task_status_body(TaskStatus(1, State("RUNNING", None, "w1")))
    assert "retrying" not in plain  # Kafka Connect's shape when nothing retries


def test_the_cli_shows_the_note() -> None:
    task = {
        "id": 0,
        "state": "RUNNING",
        "trace": None,
        "workerId": "w1",
        "retrying": {"since": 1_700_000_000_000, "attempts": 7, "error": "ConnectionError: x"},
    }
    status = {"name": "src", "type": "source", "connector": {"state": "RUNNING"}, "tasks": [task]}
    text = render_text(status_view(status))
    assert "RETRYING" in text
    assert "since 22:13:20 UTC, 7 retries: ConnectionError: x" in text
    listed = render_text(connectors_table({"src": {"status": status}}))
    assert "task 0: RUNNING (retrying)" in listed
    del task["retrying"]
    assert "retrying" not in render_text(connectors_table({"src": {"status": status}}))
