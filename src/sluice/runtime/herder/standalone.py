"""The standalone herder: one worker, embedded stores, every connector a query on its Spark.

Target states and configs live in the config store, statuses in the status store, positions in
the position store, all SQLite under `storePathRootDir`, so they survive a restart: on boot each
connector is brought back to its target state, resuming its query from its checkpoint. A REST
write is applied here and now, under the herder's lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from sluice.engine.settings import Problem
from sluice.runtime.herder import validation
from sluice.runtime.herder.api import Conflict
from sluice.runtime.herder.base import BaseHerder
from sluice.runtime.herder.reconcile import PARALLEL_STARTS, Duty
from sluice.runtime.runner import RunningConnector
from sluice.sdk import ConfigException
from sluice.store.configs import StoredConnector

log = logging.getLogger(__name__)


class StandaloneHerder(BaseHerder):
    """Runs connectors on one worker: each REST write starts, stops or restarts the query here."""

    # -- boot and shutdown ------------------------------------------------------------------------
    def start(self) -> None:
        """Bring every stored connector to its target state, then reconcile every round.

        Called once the REST API is up: every connector to start shows UNASSIGNED first, then
        RUNNING (or FAILED) as its query comes up; the lock is taken per connector so that REST
        writes are not held up for the whole boot.
        """
        stored_all = self.configs.all()
        with self._lock:
            for stored in stored_all:
                if stored.target_state == "STARTED":
                    self.reconciler.assign(stored.name, stored.config)
                    tasks = len(stored.task_configs)
                    self.statuses.put(stored.name, "UNASSIGNED", self.worker_id, tasks=tasks)
                else:
                    self._set_idle(stored)
        # a few at once, the lock held per wave so that REST writes wait one wave at most
        names = [stored.name for stored in stored_all]
        for first in range(0, len(names), PARALLEL_STARTS):
            with self._lock:
                if self._closed.is_set():
                    return
                wave = [
                    name
                    for name in names[first : first + PARALLEL_STARTS]
                    if name in self.reconciler.duties and name not in self.runner.running
                ]
                self.reconciler.start_several(wave, go_on=lambda: not self._closed.is_set())
        self._monitor = threading.Thread(target=self._watch, name="sluice-status", daemon=True)
        self._monitor.start()

    def close(self) -> None:
        """Stop every query gracefully; their tasks show UNASSIGNED until the next boot."""
        self._closed.set()
        with self._lock:
            for name in list(self.runner.running):
                self.reconciler.release(name)
                self._stop_query(name, "UNASSIGNED")
            with contextlib.suppress(Exception):  # logged by _stop_query; the JVM may be gone
                self.runner.close()
        self._metrics.close()

    def _flush_statuses(self) -> None:
        """Write the statuses the store refused (standalone: this worker is their only writer);
        when that succeeds, the store is back: queries waiting to restart after a retriable
        failure (perhaps the store's) start now."""
        if self.statuses.pending and self.statuses.flush():
            self.reconciler.restarts.hasten()

    # -- lifecycle --------------------------------------------------------------------------------
    def _launch(self, name: str, duty: Duty) -> RunningConnector:
        """Start the query of a duty (the reconciler judges what it raises)."""
        return self.runner.start(name, duty.config)

    def _disowned(self, name: str, duty: Duty, failure: tuple[str, str] | None) -> bool:
        """Whether an ended query's connector is no longer this worker's (never, standalone)."""
        return False

    def _start(self, stored: StoredConnector) -> None:
        """Make a stored connector a duty of this worker and start it now."""
        self.reconciler.assign(stored.name, stored.config)
        self.reconciler.start(stored.name)

    def _start_checked(self, stored: StoredConnector, previous: StoredConnector | None) -> None:
        """Start a created or changed connector. A transform whose SQL does not analyse against
        the record schema (or drops record columns) shows only when Spark plans the query: such
        a config is refused like any bad key (BadRequest), and the previous one comes back."""
        name = stored.name
        self.reconciler.assign(name, stored.config)

        def plan_error(exc: Exception) -> bool:
            return isinstance(exc, ConfigException) and validation.is_plan_error(exc)

        try:
            self.reconciler.start(name, refuse=plan_error)
        except ConfigException as exc:
            self.reconciler.release(name)
            if previous is None:
                self.configs.delete(name)
                self.statuses.delete(name)
            else:
                self.configs.put(name, previous.config, previous.target_state)
                self._start(previous)
            raise validation.as_bad_request([Problem.of(exc)]) from None

    def _write_config(
        self, name: str, conf: dict[str, str], existing: StoredConnector | None
    ) -> None:
        """Store the config and apply it here: a changed connector's query stops, and a fresh
        checkpoint starts from the stored positions (a plan error brings the old config back)."""
        if existing is not None:
            self.reconciler.release(name)
            self.runner.stop(name)  # positions now say exactly where it ended
        self.runner.reset_run(name)
        target = existing.target_state if existing is not None else "STARTED"
        self.configs.put(name, conf, target)
        stored = self._stored(name)
        if target == "STARTED":
            self._start_checked(stored, existing)
        else:
            self._set_idle(stored)

    def delete_connector(self, name: str) -> None:
        with self._lock:
            self._stored(name)
            self.reconciler.release(name)
            self.runner.stop(name)
            self.configs.delete(name)
            self.statuses.delete(name)
            log.info("connector %s deleted (its positions are kept)", name)

    def pause(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.reconciler.release(name)
            self.runner.stop(name)
            self.configs.set_target_state(name, "PAUSED")
            stored.target_state = "PAUSED"
            self._set_idle(stored)

    def resume(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.configs.set_target_state(name, "STARTED")
            if name not in self.runner.running:
                stored.target_state = "STARTED"
                self._start(stored)

    def stop(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.reconciler.release(name)
            self.runner.stop(name)
            self.configs.set_target_state(name, "STOPPED")
            stored.target_state = "STOPPED"
            self._set_idle(stored)

    def restart(self, name: str, task: int | None = None) -> None:
        """Restart the connector's query. Its tasks are partitions of one Spark query, so
        restarting one task restarts them all (from the checkpoint: nothing lost or repeated)."""
        with self._lock:
            stored = self._stored(name)
            if task is not None:
                self._task_index(stored, task)
            if stored.target_state != "STARTED":
                return  # Kafka Connect restarts only what should be running
            tasks = len(stored.task_configs)
            self.statuses.put(name, "RESTARTING", self.worker_id, tasks=tasks)
            self.reconciler.assign(name, stored.config)
            self.reconciler.restart(name)

    # -- reads this mode answers its own way -------------------------------------------------------
    def workers(self) -> list[str]:
        return [self.worker_id]

    def _require_stopped(self, stored: StoredConnector, verb: str) -> None:
        if stored.target_state != "STOPPED" or stored.name in self.runner.running:
            raise Conflict(
                f"connector {stored.name!r} must be STOPPED before its offsets can be {verb} "
                f"(it is {stored.target_state}); PUT /v1/connectors/{stored.name}/stop first"
            )

    def _probes_lag(self, name: str) -> bool:
        """Whether this worker asks connector `name`'s source for its lag (standalone: every
        connector is this worker's)."""
        return True

    def allocated_connectors(self) -> dict[str, dict[str, str]]:
        return {name: self.connector_config(name) for name in sorted(self.runner.running)}
