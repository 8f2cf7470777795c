"""The reconciliation: what should run on this worker against what runs here, every round.

A herder gives the `Reconciler` its *duties*: the connectors this worker must run (target state
STARTED and, in distributed mode, allocated here under a lease), each with the config to run it
with and its lease generation. `round()` compares them with the runner's live queries and repairs
the difference. It reads no store, so a store that is away cannot make the worker forget a
connector (a dead query used to be dropped from the runner before its status was written: when
that write raised, nothing remembered it, and its status said RUNNING for good):

* a query that ended is collected: its failure decides (`sluice.runtime.herder.restarts`) between an
  automatic restart, shown RESTARTING until it is due, and FAILED, which waits for a restart,
  resume or config change through REST;
* a duty without a live query is started, unless it failed for good or its restart's backoff
  still runs: at boot, when a restart is due, after a start that failed for a retriable reason
  (a start failure is judged like a query's);
* statuses go through a `StatusBoard` (`sluice.runtime.herder.status_board`): a write the store
  refuses is shown by this worker and written again when it can (the herder flushes it each round).

The herder holds its lock around every call, as around its REST writes.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from sluice.runtime.herder.restarts import (
    Restart,
    TransientRestarts,
    requested_reason,
    retriable_start_error,
)
from sluice.runtime.herder.status_board import StatusBoard
from sluice.runtime.runner import RunningConnector

log = logging.getLogger(__name__)

#: queries started at once at a boot or a failover: a start is mostly waiting on Spark (planning,
#: its first Python workers), so a few overlap well even on two cores; more only queue in the JVM
PARALLEL_STARTS = 4


@dataclass
class Duty:
    """A connector this worker must run: the config to run, the lease generation it runs under
    (distributed mode) and whether it failed for good (then it waits for REST)."""

    config: dict[str, str]
    generation: int | None = None
    failed: bool = False


class NotOurs(Exception):
    """Raised by a herder's launch: the connector is no longer this worker's (its lease is
    gone). The duty is dropped without a status: the new owner reports it."""


class Runs(Protocol):
    """What the reconciliation uses of the query runner."""

    @property
    def running(self) -> Mapping[str, RunningConnector]: ...

    def stop(self, name: str, timeout_s: float = 60.0) -> None: ...


#: starts the query of a duty (raises on failure; `NotOurs` when the duty is not ours any more)
Launch = Callable[[str, Duty], RunningConnector]


def start_failure(exc: BaseException) -> tuple[str, str]:
    """`(cause, trace)` of a start that raised: the cause on the first line (what status tables
    show), the full traceback after it."""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


class Reconciler:
    """Keeps the queries of this worker's duties running; see the module docstring."""

    def __init__(
        self,
        worker_id: str,
        runner: Runs,
        statuses: StatusBoard,
        launch: Launch,
        *,
        restarts: TransientRestarts | None = None,
        on_started: Callable[[str, RunningConnector], None] = lambda name, running: None,
        disowned: Callable[[str, Duty, tuple[str, str] | None], bool] = lambda *_: False,
        last_error: dict[str, float] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.runner = runner
        self.statuses = statuses
        self._launch = launch
        self.restarts = restarts or TransientRestarts()
        self._on_started = on_started
        self._disowned = disowned
        #: connector -> unix time it last failed (for /metrics)
        self.last_error = last_error if last_error is not None else {}
        self.duties: dict[str, Duty] = {}

    # -- duties -----------------------------------------------------------------------------------
    def assign(self, name: str, config: Mapping[str, str], generation: int | None = None) -> Duty:
        """Make `name` a duty, or change its config or generation (which clears FAILED: a new
        config deserves a new try). Starting it is `start`'s or the next round's job."""
        duty = self.duties.get(name)
        config = dict(config)
        if duty is None or duty.config != config or duty.generation != generation:
            duty = self.duties[name] = Duty(config, generation)
        return duty

    def release(self, name: str) -> Duty | None:
        """`name` is no longer to run here (stopping its query is the caller's): its duty,
        automatic restarts and pending status are dropped."""
        self.restarts.forget(name)
        self.statuses.forget(name)
        return self.duties.pop(name, None)

    # -- one round --------------------------------------------------------------------------------
    def round(self, *, stopping: Callable[[], bool] = lambda: False) -> None:
        """Collect the queries that ended, then start the duties that have none (until
        `stopping()` says the worker is shutting down: a start takes seconds)."""
        for name, running in list(self.runner.running.items()):
            if not running.query.isActive:
                self.collect(name, running)
        for name, duty in list(self.duties.items()):
            if stopping():
                return
            if name in self.runner.running or duty.failed or self.restarts.waiting(name):
                continue
            self.start(name)

    def collect(self, name: str, running: RunningConnector) -> None:
        """Take an ended query off the runner and decide what becomes of its duty."""
        failure = running.failure()
        tasks = len(running.task_configs)
        try:
            self.runner.stop(name)
        except Exception as exc:  # its store is away: the next run resumes from its checkpoint
            log.warning(
                "connector %s: the positions its query ended at were not stored (%s: %s); it "
                "resumes from its checkpoint",
                *(name, type(exc).__name__, exc),
            )
        duty = self.duties.get(name)
        if duty is None:
            return  # released meanwhile: nothing to report
        if self._disowned(name, duty, failure):
            self.release(name)
            return
        if failure is None:  # stopped without an error (not by us): shown, not restarted
            duty.failed = True
            self.statuses.put(name, "UNASSIGNED", self.worker_id, tasks=tasks)
            return
        self._judge(name, duty, *failure, tasks=tasks, what="failed")

    # -- starting ---------------------------------------------------------------------------------
    def start(
        self, name: str, *, refuse: Callable[[Exception], bool] = lambda exc: False
    ) -> RunningConnector | None:
        """Start the duty's query now; a start that fails is judged like a query that failed
        (None is returned), except an error `refuse` holds for, which is raised (a config
        refused at create)."""
        duty = self.duties[name]
        duty.failed = False
        try:
            running = self._launch(name, duty)
        except NotOurs:
            self.release(name)
            return None
        except Exception as exc:  # a connector that cannot start fails alone, the worker goes on
            if refuse(exc):
                raise
            retriable = retriable_start_error(exc)
            cause, trace = start_failure(exc)
            self._judge(
                name, duty, cause, trace, tasks=0, what="failed to start", retriable=retriable
            )
            return None
        self.restarts.started(name)
        try:
            self._on_started(name, running)
        except Exception as exc:  # bookkeeping (task configs): the query runs, it is RUNNING
            log.warning("connector %s: its task configs were not stored: %s", name, exc)
        tasks = len(running.task_configs)
        self.statuses.put(name, "RUNNING", self.worker_id, tasks=tasks)
        lease = f", lease generation {duty.generation}" if duty.generation is not None else ""
        log.info("connector %s started (%s, run %s%s)", name, running.kind, running.run, lease)
        return running

    def start_several(self, names: Sequence[str], *, go_on: Callable[[], bool]) -> None:
        """Start several duties' queries at once (up to `PARALLEL_STARTS`), so that a boot or a
        failover takes about one start rather than one per connector; `go_on` is asked before
        each start (a worker shutting down starts nothing more: a start takes a second)."""

        def start(name: str) -> None:
            if go_on():
                self.start(name)

        if len(names) <= 1:
            for name in names:
                start(name)
            return
        with ThreadPoolExecutor(min(PARALLEL_STARTS, len(names)), "sluice-start") as pool:
            list(pool.map(start, names))

    def restart(self, name: str) -> RunningConnector | None:
        """Stop the duty's query (if any) and start it again now (a restart through REST)."""
        self.runner.stop(name)
        return self.start(name)

    # -- judging a failure ------------------------------------------------------------------------
    def _judge(
        self,
        name: str,
        duty: Duty,
        cause: str,
        trace: str,
        *,
        tasks: int,
        what: str,
        retriable: bool | None = None,
    ) -> None:
        """An automatic restart if the failure deserves one (RESTARTING), else FAILED."""
        self.last_error[name] = time.time()
        text = f"{cause}\n\n{trace}"
        failure = f"{cause}\n{trace}"
        restart = self.restarts.schedule(name, failure, duty.config, retriable=retriable)
        if restart is not None and restart.kind == "waiting":
            # nothing failed: it waits for its topics' first schema, RUNNING with the reason
            if restart.attempt == 1:
                log.info("connector %s waits: %s", name, cause.splitlines()[0][:500])
            self.last_error.pop(name, None)
            self.statuses.put(name, "RUNNING", self.worker_id, trace=cause, tasks=tasks)
            return
        if restart is not None:
            _log_restart(name, what, cause, failure, restart)
            self.statuses.put(name, "RESTARTING", self.worker_id, trace=text, tasks=tasks)
            return
        duty.failed = True
        log.error("connector %s %s: %s", name, what, cause)
        self.statuses.put(name, "FAILED", self.worker_id, trace=text, tasks=tasks)


def _log_restart(name: str, what: str, cause: str, failure: str, restart: Restart) -> None:
    first_line = cause.splitlines()[0][:300] if cause else ""
    if restart.kind == "requested":
        # the task's own words (a schema change it follows), not Spark's wrapping of them
        reason = requested_reason(failure) or first_line
        log.info(
            "connector %s: %s (requested restart %d in a row, at most %d)",
            *(name, reason[:500], restart.attempt, restart.of),
        )
    elif restart.kind == "retriable":
        log.warning(
            "connector %s %s for a retriable reason (%s): restarting it in %.0f s "
            "(automatic restart %d, for up to restart.retriable.timeout.ms)",
            *(name, what, first_line, restart.delay_s, restart.attempt),
        )
    else:
        log.warning(
            "connector %s %s for a transient Spark reason (%s): restarting it in %.0f s "
            "(automatic restart %d of %d, restart.transient.max.attempts)",
            *(name, what, first_line, restart.delay_s, restart.attempt, restart.of),
        )
