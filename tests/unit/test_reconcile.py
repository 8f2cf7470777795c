"""The reconciliation's logic (`sluice.runtime.herder.reconcile`, `.status_board`) over a
fake runner and a status store that can be made to refuse writes: a query that died while the
store was away is remembered, shown truthfully and started again; a status the store refused is
written later; starts that fail are judged like failed queries. (The same against real worker
processes: tests/e2e/test_worker_faults.py, tests/e2e/test_distributed_outage.py.)"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import patch

import pytest

from sluice.runtime.herder.reconcile import Duty, NotOurs, Reconciler
from sluice.runtime.herder.restarts import TransientRestarts
from sluice.runtime.herder.status_board import StatusBoard
from sluice.runtime.runner import RunningConnector
from sluice.sdk import ConfigException, RetriableException
from sluice.store.statuses import Status


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Store:
    """A status store that raises while `away`."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, int, str | None]] = {}
        self.away = False

    def put(self, connector: str, state: str, worker_id: str, **kw: Any) -> None:
        if self.away:
            raise OSError("disk I/O error")
        self.rows[connector] = (state, kw.get("tasks", 0), kw.get("trace"))

    def get(self, connector: str) -> tuple[Status | None, list[Status]]:
        if connector not in self.rows:
            return None, []
        state, tasks, trace = self.rows[connector]
        return Status(state, trace, "w"), [Status(state, trace, "w", i) for i in range(tasks)]

    def all(self) -> dict[str, tuple[Status | None, list[Status]]]:
        return {name: self.get(name) for name in self.rows}

    def delete(self, connector: str) -> None:
        if self.away:
            raise OSError("disk I/O error")
        self.rows.pop(connector, None)


@dataclass
class _Query:
    isActive: bool = True
    error: str | None = None

    def exception(self) -> str | None:
        return self.error


@dataclass
class _Runner:
    """Queries by name; `stop` raises while `store.away` (it saves positions there)."""

    store: _Store
    running: dict[str, RunningConnector] = field(default_factory=dict)

    def stop(self, name: str, timeout_s: float = 60.0) -> None:
        if self.running.pop(name, None) is not None and self.store.away:
            raise OSError("positions not saved: disk I/O error")


def _state(board: StatusBoard, name: str) -> str | None:
    own, _tasks = board.get(name)
    return own.state if own else None


@pytest.fixture
def world() -> tuple[_Store, _Runner, StatusBoard, Reconciler, list[str], _Clock]:
    store = _Store()
    runner = _Runner(store)
    board = StatusBoard(store)
    clock = _Clock()
    launched: list[str] = []
    failures: dict[str, BaseException] = {}

    def launch(name: str, duty: Duty) -> RunningConnector:
        if name in failures:
            raise failures.pop(name)
        if store.away:
            raise sqlite3.OperationalError("database or disk is full")  # a start writes there
        launched.append(name)
        running = RunningConnector(name, "sink", "r1", _Query(), ({},))  # type: ignore[arg-type]
        runner.running[name] = running
        return running

    reconciler = Reconciler("w", runner, board, launch, restarts=TransientRestarts(clock))
    reconciler.failures = failures  # type: ignore[attr-defined]
    return store, runner, board, reconciler, launched, clock


def test_a_query_that_dies_while_the_store_is_away_is_remembered_and_restarted(world) -> None:
    store, runner, board, reconciler, launched, clock = world
    reconciler.assign("c", {"connector.class": "X"})
    reconciler.round()
    assert launched == ["c"] and store.rows["c"][0] == "RUNNING"

    store.away = True
    runner.running["c"].query.isActive = False  # type: ignore[attr-defined]
    runner.running["c"].query.error = "ConnectException: put failed\nRetriableException: gone"  # type: ignore[attr-defined]
    reconciler.round()  # collected although the store raises (positions, status)
    assert "c" not in runner.running and "c" in reconciler.duties
    assert store.rows["c"][0] == "RUNNING"  # the store could not be told …
    assert _state(board, "c") == "RESTARTING"  # … but this worker says the truth
    assert board.pending == ["c"]
    clock.now += 1
    reconciler.round()  # due: the start fails too (the store is away), rescheduled
    assert launched == ["c"] and _state(board, "c") == "RESTARTING"
    assert reconciler.restarts.waiting("c")

    store.away = False
    assert board.flush() and board.pending == []
    assert store.rows["c"][0] == "RESTARTING"  # corrected as soon as it could be
    assert reconciler.restarts.hasten() == ["c"]
    reconciler.round()
    assert launched == ["c", "c"] and store.rows["c"][0] == "RUNNING"


def test_a_failure_of_its_own_stays_failed_until_restarted(world) -> None:
    store, runner, _board, reconciler, launched, _clock = world
    reconciler.assign("c", {})
    reconciler.round()
    runner.running["c"].query.isActive = False  # type: ignore[attr-defined]
    runner.running["c"].query.error = "ValueError: line 3 is not JSON"  # type: ignore[attr-defined]
    reconciler.round()
    reconciler.round()
    assert launched == ["c"] and store.rows["c"][0] == "FAILED"
    assert "line 3 is not JSON" in (store.rows["c"][2] or "")
    reconciler.restart("c")  # through REST
    assert launched == ["c", "c"] and store.rows["c"][0] == "RUNNING"


def test_starts_that_fail_are_judged_like_queries(world) -> None:
    store, _runner, _board, reconciler, launched, clock = world
    failures = reconciler.failures  # type: ignore[attr-defined]
    # a database that is away, reported by a start-time check as a config error naming the URL
    try:
        try:
            raise RetriableException("cannot connect to db: Connection refused")
        except RetriableException as exc:
            raise ConfigException("connection.url", exc.message) from None
    except ConfigException as exc:
        failures["down"] = exc
    reconciler.assign("down", {})
    reconciler.round()
    assert store.rows["down"][0] == "RESTARTING" and reconciler.restarts.waiting("down")
    clock.now += 1
    reconciler.round()
    assert launched == ["down"] and store.rows["down"][0] == "RUNNING"
    # a refused password is the config's: FAILED, not retried
    failures["bad"] = ConfigException("connection.password", "refused the credentials")
    reconciler.assign("bad", {})
    reconciler.round()
    clock.now += 100
    reconciler.round()
    assert store.rows["bad"][0] == "FAILED" and "bad" not in launched
    # no longer ours: dropped without a status
    failures["gone"] = NotOurs("gone")
    reconciler.assign("gone", {})
    reconciler.round()
    assert "gone" not in reconciler.duties and "gone" not in store.rows


def test_a_sink_waiting_for_a_schema_is_running_with_the_reason_until_it_starts(world) -> None:
    from sluice.engine.converters import SchemaNotRegisteredError

    store, _runner, _board, reconciler, launched, clock = world
    failures = reconciler.failures  # type: ignore[attr-defined]
    for _ in range(3):  # not yet, not yet, not yet …
        failures["early"] = SchemaNotRegisteredError("value.converter", "no schema of topic t")
        reconciler.assign("early", {})
        reconciler.round()
        state, _tasks, trace = store.rows["early"]
        assert state == "RUNNING" and "value.converter: no schema of topic t" in (trace or "")
        assert reconciler.restarts.waiting("early") and "early" not in reconciler.last_error
        clock.now += 5
    reconciler.round()  # … the schema is there: it starts, its note gone
    assert launched == ["early"] and store.rows["early"] == ("RUNNING", 1, None)


def test_a_refused_config_is_raised_not_judged(world) -> None:
    store, _runner, _board, reconciler, _launched, _clock = world
    reconciler.failures["c"] = ConfigException("transforms.t", "invalid SQL")  # type: ignore[attr-defined]
    reconciler.assign("c", {})
    with pytest.raises(ConfigException):
        reconciler.start("c", refuse=lambda exc: isinstance(exc, ConfigException))
    assert "c" not in store.rows


def test_the_board_shows_a_write_at_once_and_keeps_only_the_newest(world) -> None:
    store, _runner, board, _reconciler, _launched, _clock = world
    store.away = True
    board.put("a", "RUNNING", "w", tasks=2)
    board.put("a", "FAILED", "w", trace="boom", tasks=2)
    board.put("b", "PAUSED", "w")
    own, tasks = board.get("a")
    assert own == Status("FAILED", "boom", "w") and [t.state for t in tasks] == ["FAILED"] * 2
    assert sorted(board.all()) == ["a", "b"] and board.pending == ["a", "b"]
    assert not board.flush()
    board.forget("b")  # no longer ours to report
    store.away = False
    assert board.flush()
    assert store.rows == {"a": ("FAILED", 2, "boom")}
    board.put("a", "RUNNING", "w")
    board.delete("a")
    assert store.rows == {} and board.pending == []


def test_a_released_duty_is_not_started_and_forgets_its_restarts(world) -> None:
    _store, runner, _board, reconciler, launched, clock = world
    reconciler.assign("c", {})
    reconciler.round()
    runner.running["c"].query.isActive = False  # type: ignore[attr-defined]
    runner.running["c"].query.error = "SparkException: Python worker exited unexpectedly"  # type: ignore[attr-defined]
    reconciler.round()
    assert reconciler.restarts.waiting("c")
    reconciler.release("c")
    clock.now += 10
    reconciler.round()
    assert launched == ["c"] and not reconciler.restarts.waiting("c")


def test_a_round_starts_nothing_once_the_worker_is_stopping(world) -> None:
    _store, _runner, _board, reconciler, launched, _clock = world
    for name in ("a", "b"):
        reconciler.assign(name, {})
    reconciler.round(stopping=lambda: bool(launched))  # stopping after the first start
    assert launched == ["a"]


def test_several_starts_overlap_and_stop_once_the_worker_is_stopping() -> None:
    # Each launch waits at a barrier of two: the test finishes only if two starts run at once
    # (a sequential start_several would break the barrier by its timeout, failing the start).
    store = _Store()
    runner = _Runner(store)
    both = threading.Barrier(2, timeout=30)
    launched: list[str] = []
    stopping = threading.Event()

    def launch(name: str, duty: Duty) -> RunningConnector:
        launched.append(name)
        if len(launched) == 2:
            stopping.set()  # before either start ends: no thread can pick a third one
        both.wait()
        running = RunningConnector(name, "sink", "r1", _Query(), ({},))  # type: ignore[arg-type]
        runner.running[name] = running
        return running

    board = StatusBoard(store)
    reconciler = Reconciler("w", runner, board, launch, restarts=TransientRestarts(_Clock()))
    names = ["a", "b", "c", "d", "e", "f"]
    for name in names:
        reconciler.assign(name, {})
    with patch("sluice.runtime.herder.reconcile.PARALLEL_STARTS", 2):
        reconciler.start_several(names, go_on=lambda: not stopping.is_set())
    assert sorted(launched) == ["a", "b"]  # the rest were not started: the worker was stopping
    assert {_state(board, n) for n in ("a", "b")} == {"RUNNING"}
    assert {_state(board, n) for n in names[2:]} == {None}
