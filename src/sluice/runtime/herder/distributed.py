"""The distributed herder: several workers share one PostgreSQL cluster store.

Every `rocketmq.runtime.cluster.rebalance.waitInterval` (1 s by default) each worker runs one
round:

1. heartbeat its membership row; read the live workers (heartbeat within
   `cluster.session.timeout.ms`);
2. allocate the stored connectors over the sorted live worker ids with `allocTaskStrategy`
   (`sluice.runtime.allocation`): every worker computes the same answer from the same rows;
3. stop what it runs but should not (deleted, moved, paused or stopped, config changed, lease
   lost) and release those leases;
4. start what is allocated to it and not running: take the connector's lease (a new generation
   unless it already holds it), fence the previous generation out of the shared position store
   and the embedded topics, and start the query under that generation.

A worker that was paused or partitioned past the session timeout has lost its leases: its
queries' commits are refused by the fences (`Fenced`, `WriterFenced`), and at its next round or
status check it stops those queries and logs it. The REST API of any worker writes to the store;
the owner picks the change up at its next round (a write on the owner wakes its round at once).

Between rounds the reconciliation (`sluice.runtime.herder.reconcile`, every
`status.poll.interval.ms`) keeps the queries of the connectors this worker holds running, without
the store: a store outage stops the rounds, not the queries, and a query that died meanwhile is
restarted under its lease once the store answers. After an outage every heartbeat is stale, so for
one session timeout the workers that were live before it still count as live: nothing moves because
of the outage alone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any

from pyspark.sql import SparkSession

from sluice.engine.session import activate
from sluice.runtime.allocation import HASH_FUNCTIONS, allocate
from sluice.runtime.herder.api import AllocatedTask, Conflict, NotFound
from sluice.runtime.herder.base import BaseHerder, QueryRunner
from sluice.runtime.herder.reconcile import Duty, NotOurs
from sluice.runtime.metrics.progress import ProgressTracker
from sluice.runtime.metrics.snapshot import MetricsSnapshot
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.runner import RunningConnector
from sluice.runtime.stores import WorkerParts
from sluice.runtime.worker_config import WorkerConfig
from sluice.store.cluster import ClusterStore, Lease
from sluice.store.configs import StoredConnector

log = logging.getLogger(__name__)

_IDLE_STATE = {"PAUSED": "PAUSED", "STOPPED": "STOPPED"}


def _fenced(text: str) -> bool:
    return "fenced:" in text


class _Outage:
    """Whether the cluster store answers, logged once per outage (not at every beat and round),
    and the moment it answered again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.ended_at: float | None = None

    def failed(self, what: str) -> None:
        with self._lock:
            first = self.since is None
            if first:
                self.since = time.monotonic()
        if first:
            log.exception("%s: the cluster store does not answer (retried every round)", what)
        else:
            log.debug("%s failed again", what, exc_info=True)

    def answered(self) -> bool:
        """Note that the store answered; True when this ends an outage."""
        with self._lock:
            since, self.since = self.since, None
            if since is not None:
                self.ended_at = time.monotonic()
        if since is not None:
            log.warning("the cluster store answers again after %.1f s", time.monotonic() - since)
        return since is not None


class Rebalances:
    """Kafka Connect's worker rebalance metrics for this worker (`/metrics`).

    A rebalance begins when a round computes an allocation that differs from the one this worker
    applied last (a worker joined or left, a connector was created or deleted) and completes
    when that round has applied it here: stopped what moved away, started what it could take.
    `epoch` counts the allocations this worker has begun to apply since it started.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.epoch = 0
        self.completed = 0
        self._began: float | None = None
        self._last_done: float | None = None
        self._times_ms: list[float] = []

    def begin(self) -> None:
        with self._lock:
            self.epoch += 1
            self._began = time.monotonic()

    def end(self) -> None:
        with self._lock:
            if self._began is None:
                return
            now = time.monotonic()
            self._times_ms.append((now - self._began) * 1000)
            self._began, self._last_done = None, now
            self.completed += 1

    def snapshot(self) -> dict[str, float]:
        """`completed-rebalances-total`, `rebalancing`, `epoch`, `time-since-last-rebalance-ms`
        (+inf before the first, as Kafka Connect reports it), `rebalance-avg|max-time-ms`."""
        with self._lock:
            times = self._times_ms
            since = math.inf if self._last_done is None else time.monotonic() - self._last_done
            return {
                "completed-rebalances-total": self.completed,
                "rebalancing": 1 if self._began is not None else 0,
                "epoch": self.epoch,
                "time-since-last-rebalance-ms": since * 1000 if since != math.inf else since,
                "rebalance-avg-time-ms": sum(times) / len(times) if times else 0.0,
                "rebalance-max-time-ms": max(times, default=0.0),
            }


class DistributedHerder(BaseHerder):
    """A worker of a cluster: the lifecycle of the connectors allocated to it, REST for all.

    Shares the views of `BaseHerder` with the standalone herder (one implementation of each);
    its lifecycle is store writes, applied by each connector's owner at its next round.
    """

    def __init__(
        self,
        spark: SparkSession,
        config: WorkerConfig,
        plugins: PluginRegistry,
        cluster: ClusterStore,
        *,
        runner: QueryRunner,
        progress: ProgressTracker,
        metrics: MetricsSnapshot,
        parts: WorkerParts,
    ) -> None:
        super().__init__(
            spark,
            config,
            plugins,
            runner=runner,
            configs=cluster.configs,
            statuses=cluster.statuses,
            progress=progress,
            metrics=metrics,
            parts=parts,
        )
        self.cluster = cluster
        self._wake = threading.Event()
        self._outage = _Outage()
        #: until when (monotonic) the workers live before a store outage still count as live
        self._settle_until = 0.0
        self._known_live: dict[str, str] = {}
        self._hash = HASH_FUNCTIONS[config.cluster.hash_func]
        self._round_thread: threading.Thread | None = None
        self.last_assignment: dict[str, str] = {}
        self.rebalances = Rebalances()

    # -- boot and shutdown ------------------------------------------------------------------------
    def start(self) -> None:
        """One round now (this worker's connectors start before the boot message), then one
        every `rocketmq.runtime.cluster.rebalance.waitInterval`, plus the status watch."""
        threading.Thread(target=self._beat_loop, name="sluice-heartbeat", daemon=True).start()
        self._round()
        self._round_thread = threading.Thread(
            target=self._loop, name="sluice-rebalance", daemon=True
        )
        self._round_thread.start()
        self._monitor = threading.Thread(target=self._watch, name="sluice-status", daemon=True)
        self._monitor.start()

    def close(self) -> None:
        """Stop this worker's queries, release their leases and leave the cluster at once (the
        others take its connectors over at their next round, not after the session timeout)."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            for name in list(self.reconciler.duties):
                try:
                    self._give_up(name, "UNASSIGNED")
                except Exception:  # the store is down: the session timeout frees the lease
                    log.exception("connector %s: lease not released", name)
            with contextlib.suppress(Exception):  # the JVM may be gone
                self.runner.close()
        self._metrics.close()
        try:
            self.cluster.leave(self.worker_id)
        except Exception:  # the store is down: the session timeout frees our leases
            log.exception("could not leave the cluster cleanly")
        self.cluster.close()

    def _loop(self) -> None:
        interval = self.config.cluster.rebalance_interval_ms / 1000
        while not self._closed.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self._round()
            except Exception:  # an unreachable store: keep trying; the leases fence us if need be
                self._outage.failed("rebalance round")

    def _beat_loop(self) -> None:
        """Heartbeats on their own thread: a round that is busy starting queries (seconds each)
        must not make this worker look dead to the others."""
        interval = self.config.cluster.rebalance_interval_ms / 1000
        while not self._closed.wait(interval):
            try:
                self._beat()
            except Exception:  # the store is unreachable: retried; the others may fence us
                self._outage.failed("heartbeat")

    def _beat(self) -> None:
        me = self.worker_id
        beaten = self.cluster.heartbeat(me)
        if self._outage.answered():
            # every worker's heartbeat went stale meanwhile: give them a session to beat again
            self._settle_until = time.monotonic() + self.config.cluster.session_timeout_ms / 1000
            # what died meanwhile (of the outage, likely) starts at the next reconciliation
            self.reconciler.restarts.hasten()
        if not beaten:
            log.warning("membership row of %s was gone: joining again", me)
            self.cluster.join(me, self._url(), self.config.cluster.session_timeout_ms)

    def _membership(self) -> dict[str, str]:
        """The live workers (id -> REST url) this round allocates over: after a store outage,
        for one session timeout, also those live before it (their heartbeats went stale with
        everyone's; a worker that really died drops out when the window ends)."""
        live = self.cluster.live_workers(self.config.cluster.session_timeout_ms)
        if time.monotonic() < self._settle_until:
            return {**self._known_live, **live}
        self._known_live = live
        return live

    # -- one round ----------------------------------------------------------------------------
    def _round(self) -> None:
        me = self.worker_id
        self._beat()
        live = self._membership()
        stored = {c.name: c for c in self.configs.all()}
        assignment = allocate(
            self.config.cluster.alloc_strategy,
            live,
            stored,
            virtual_nodes=self.config.cluster.virtual_nodes,
            hash_func=self._hash,
        )
        if assignment != self.last_assignment:
            mine = sorted(n for n, w in assignment.items() if w == me)
            log.info("allocation over %s: this worker runs %s", sorted(live), mine)
            self.last_assignment = assignment
            self.rebalances.begin()
        leases = self.cluster.leases()
        with self._lock:
            if self._closed.is_set():
                return
            self._stop_unwanted(stored, assignment, leases)
            # the leases are checked: a status the store refused is still ours to write
            self.statuses.flush()
            self._start_allocated(set(live), stored, assignment)
        self.rebalances.end()

    def _stop_unwanted(
        self,
        stored: dict[str, StoredConnector],
        assignment: dict[str, str],
        leases: dict[str, Lease],
    ) -> None:
        """Stop (or restart) what runs here but should not run so any more (under the lock)."""
        me = self.worker_id
        for name, duty in list(self.reconciler.duties.items()):
            lease = leases.get(name)
            if (
                lease is None
                or lease.session != self.cluster.session
                or lease.generation != duty.generation
            ):
                holder = lease.worker_id if lease else None
                log.error(
                    "connector %s: lease generation %d lost (now %s, worker %s); its late "
                    "commits are refused; stopping its query",
                    name,
                    duty.generation,
                    lease.generation if lease else "none",
                    holder,
                )
                self.reconciler.release(name)
                self.runner.stop(name)
                continue
            current = stored.get(name)
            if current is None:
                # released, not dropped: a re-created connector must get a newer generation
                # than the fences already recorded for its name
                self._give_up(name, None)
                log.info("connector %s deleted: query stopped", name)
            elif assignment.get(name) != me:
                log.info("connector %s moved to %s: stopping it here", name, assignment.get(name))
                self._give_up(name, None)
            elif current.target_state != "STARTED":
                self._give_up(name, None)
                self._set_idle(current)
            elif current.config != duty.config:
                log.info("connector %s: config changed, restarting it", name)
                self.runner.stop(name)
                self.runner.reset_run(name)
                self.reconciler.assign(name, current.config, duty.generation)
                self.reconciler.start(name)
            elif self._restart_requested(name) and not self.reconciler.restarts.waiting(name):
                self.reconciler.restart(name)

    def _start_allocated(
        self, live: set[str], stored: dict[str, StoredConnector], assignment: dict[str, str]
    ) -> None:
        """Take the lease of, fence and start each connector allocated here (under the lock)."""
        me = self.worker_id
        to_start: list[str] = []
        for name, current in stored.items():
            if assignment.get(name) != me or name in self.reconciler.duties:
                continue
            if current.target_state != "STARTED":
                self._show_idle(current)
                continue
            generation = self.cluster.acquire(name, me, live)
            if generation is None:
                continue  # its previous owner is alive and stops it at its next round
            self.runner.fence(name, generation)
            # visible at once: this worker owns it now and is starting it
            self.statuses.put(name, "UNASSIGNED", me, tasks=len(current.task_configs))
            self.reconciler.assign(name, current.config, generation)
            to_start.append(name)
        self.reconciler.start_several(to_start, go_on=lambda: not self._closed.is_set())

    def _launch(self, name: str, duty: Duty) -> RunningConnector:
        """Start the query of a connector this worker holds, under its lease (checked first: a
        restart after a lease was lost must not run)."""
        assert duty.generation is not None
        activate(self.spark)  # the JVM's active session is per thread
        if not self.cluster.holds(name, duty.generation):
            raise NotOurs(name)
        return self.runner.start(name, duty.config, generation=duty.generation)

    def _disowned(self, name: str, duty: Duty, failure: tuple[str, str] | None) -> bool:
        """Whether an ended query's connector is no longer ours: a commit of it was fenced, or
        its lease is gone (a store that does not answer: still ours; the next round checks)."""
        if failure is not None and _fenced(failure[1]):
            log.error(
                "connector %s: a late commit under lease generation %s was refused (%s); "
                "query stopped, another worker owns it",
                *(name, duty.generation, failure[0]),
            )
            return True
        assert duty.generation is not None
        try:
            return not self.cluster.holds(name, duty.generation)
        except Exception:  # the store is away: the next round checks the lease
            return False

    def _flush_statuses(self) -> None:
        """Nothing between rounds: a refused status is written by the round, once it has
        checked that the connector's lease is still this worker's."""

    def _give_up(self, name: str, state: str | None) -> None:
        """Stop the query here and release the lease (another worker, or nobody, takes it)."""
        duty = self.reconciler.release(name)
        running = self.runner.running.get(name)
        tasks = len(running.task_configs) if running else 0
        self.runner.stop(name)
        if duty is not None:
            if state is not None:
                self.statuses.put(name, state, self.worker_id, tasks=tasks)
            assert duty.generation is not None
            self.cluster.release(name, duty.generation)

    def _show_idle(self, stored: StoredConnector) -> None:
        """A paused/stopped connector allocated here shows its state under this worker."""
        own, _tasks = self.statuses.get(stored.name)
        state = _IDLE_STATE[stored.target_state]
        if own is None or own.state != state or own.worker_id != self.worker_id:
            self._set_idle(stored)

    def _restart_requested(self, name: str) -> bool:
        own, _tasks = self.statuses.get(name)
        return own is not None and own.state == "RESTARTING"

    def _url(self) -> str:
        host = self.config.rest.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.config.rest.port}"

    # -- REST writes: to the store; owners apply them ----------------------------------------
    def _write_config(
        self, name: str, conf: dict[str, str], existing: StoredConnector | None
    ) -> None:
        """Store the config; its owner applies it at its next round (woken now). The sql-transform
        plan check of standalone mode is left to the owner, which plans the query: a config whose
        query does not analyse FAILs there."""
        target = existing.target_state if existing is not None else "STARTED"
        self.configs.put(name, conf, target)
        if existing is None:
            self.statuses.put(name, "UNASSIGNED", self._owner(name))
        self._wake.set()

    def _owner(self, name: str) -> str:
        return self.last_assignment.get(name, self.worker_id)

    def delete_connector(self, name: str) -> None:
        self._stored(name)
        self.configs.delete(name)
        self.statuses.delete(name)
        log.info("connector %s deleted (its positions are kept)", name)
        self._wake.set()

    def _set_target(self, name: str, target: str) -> None:
        self._stored(name)
        self.configs.set_target_state(name, target)
        self._wake.set()

    def pause(self, name: str) -> None:
        self._set_target(name, "PAUSED")

    def resume(self, name: str) -> None:
        stored = self._stored(name)
        duty = self.reconciler.duties.get(name)
        if duty is not None and duty.failed and stored.target_state == "STARTED":
            self.statuses.put(name, "RESTARTING", self.worker_id)
        self._set_target(name, "STARTED")

    def stop(self, name: str) -> None:
        self._set_target(name, "STOPPED")

    def restart(self, name: str, task: int | None = None) -> None:
        stored = self._stored(name)
        if task is not None:
            self._task_index(stored, task)
        if stored.target_state != "STARTED":
            return
        own, _tasks = self.statuses.get(name)
        owner = own.worker_id if own is not None else self._owner(name)
        self.statuses.put(name, "RESTARTING", owner, tasks=len(stored.task_configs))
        with self._lock:
            duty = self.reconciler.duties.get(name)
            if duty is not None and duty.failed:
                self.reconciler.restart(name)
                return
        self._wake.set()

    def _require_stopped(self, stored: StoredConnector, verb: str) -> None:
        own, _tasks = self.statuses.get(stored.name)
        if (
            stored.target_state != "STOPPED"
            or stored.name in self.runner.running
            or own is None
            or own.state != "STOPPED"
        ):
            state = own.state if own is not None else "UNASSIGNED"
            raise Conflict(
                f"connector {stored.name!r} must be STOPPED before its offsets can be {verb} "
                f"(target {stored.target_state}, state {state}); "
                f"PUT /v1/connectors/{stored.name}/stop first"
            )

    # -- cluster views ------------------------------------------------------------------------
    def workers(self) -> list[str]:
        return sorted(self.cluster.live_workers(self.config.cluster.session_timeout_ms))

    def allocated_connectors(self) -> dict[str, dict[str, str]]:
        # a connector deleted through another worker runs here until the next round
        stored = {name: self.configs.get(name) for name in sorted(self.runner.running)}
        return {name: self.shown_config(c.config) for name, c in stored.items() if c is not None}

    def allocated_tasks(self) -> dict[str, list[AllocatedTask]]:
        groups = super().allocated_tasks()
        return {
            group: [t for t in tasks if t.status.state.worker_id == self.worker_id]
            for group, tasks in groups.items()
        }

    def _metrics_snapshot(self) -> dict[str, Any]:
        snapshot = super()._metrics_snapshot()
        snapshot["worker"]["rebalance"] = self.rebalances.snapshot()
        return snapshot

    def _probes_lag(self, name: str) -> bool:
        """Only the worker a connector is allocated to asks its source for the lag (the
        others would ask the same system again for the same figure)."""
        return self.last_assignment.get(name) == self.worker_id

    def query_progress(self, name: str) -> dict[str, Any]:
        if name not in self.runner.running and name in self.configs.names():
            raise NotFound(
                f"connector {name!r} runs on worker {self._owner(name)!r}: ask that worker for "
                "its query's progress"
            )
        return super().query_progress(name)

    def _push_here(self, name: str, what: str) -> None:
        """A push sink's board is read by the tasks of the worker that runs it: any other
        worker answers 404 naming the owner, and writes nothing."""
        if name not in self.runner.running and name in self.configs.names():
            raise NotFound(
                f"connector {name!r} runs on worker {self._owner(name)!r}: ask that worker {what}"
            )

    def push(self, name: str) -> dict[str, Any]:
        self._push_here(name, "for its live push settings")
        return super().push(name)

    def tune_push(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        self._push_here(name, "to change its push settings")
        return super().tune_push(name, changes)
