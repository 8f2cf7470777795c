"""The status store as a herder writes it: a write the store refuses is kept, not lost.

A herder learns a connector's state from events (its query started, failed, was restarted) and
writes it once. When the store refuses that write (PostgreSQL away, a SQLite file that cannot be
written), the state it held stays, and a status that said RUNNING would go on saying it over a
dead query for good. `StatusBoard` keeps each refused write as *pending*: this worker shows it in
place of the store's row (it is the newer truth), and `flush` writes it again each round until
the store takes it. `put` never raises, so an unwritable store cannot interrupt the lifecycle
step that called it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from sluice.store.statuses import Status, StatusStore, split_statuses, status_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Write:
    """One `put`, as given."""

    state: str
    worker_id: str
    trace: str | None
    tasks: int
    task_state: str | None

    def statuses(self, connector: str) -> tuple[Status | None, list[Status]]:
        """What the store would answer once it holds this write."""
        rows = status_rows(
            connector, self.state, self.worker_id, self.trace, self.tasks, self.task_state
        )
        return split_statuses(
            (task, state, trace, worker) for _, task, state, trace, worker, _ in rows
        )


class StatusBoard:
    """A `StatusStore` (reads and writes) over another, keeping the writes it refused.

    Thread-safe. A write is pending from the moment `put` is called until the store took it (or a
    newer write, a `delete` or `forget` replaced it), so a read through this board during a slow
    write already shows it.
    """

    def __init__(self, store: StatusStore) -> None:
        self.store = store
        self._pending: dict[str, _Write] = {}
        self._lock = threading.Lock()
        self._failing = False  # the last write failed: logged once until one succeeds

    @property
    def pending(self) -> list[str]:
        """The connectors whose last status the store has not taken yet."""
        with self._lock:
            return sorted(self._pending)

    def put(
        self,
        connector: str,
        state: str,
        worker_id: str,
        *,
        trace: str | None = None,
        tasks: int = 0,
        task_state: str | None = None,
    ) -> None:
        """Write the status; if the store refuses it, keep it (shown here, written by `flush`)."""
        write = _Write(state, worker_id, trace, tasks, task_state)
        with self._lock:
            self._pending[connector] = write
        self._write(connector, write)

    def flush(self) -> bool:
        """Write the pending statuses, oldest first; stop at the first the store refuses. True
        when none is left."""
        with self._lock:
            todo = list(self._pending.items())
        for connector, write in todo:
            if not self._write(connector, write):
                return False
        return not todo or not self.pending

    def _write(self, connector: str, write: _Write) -> bool:
        try:
            self.store.put(
                connector,
                write.state,
                write.worker_id,
                trace=write.trace,
                tasks=write.tasks,
                task_state=write.task_state,
            )
        except Exception as exc:  # the store is away: kept, shown here, written again later
            with self._lock:
                first, self._failing = not self._failing, True
            if first:
                log.warning(
                    "status %s of connector %s not stored (%s: %s): this worker shows it and "
                    "writes it again when the store takes writes",
                    write.state,
                    connector,
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                )
            return False
        with self._lock:
            if self._pending.get(connector) is write:
                del self._pending[connector]
            recovered = self._failing and not self._pending
            if recovered:
                self._failing = False
        if recovered:
            log.info("the status store takes writes again: every pending status is stored")
        return True

    def get(self, connector: str) -> tuple[Status | None, list[Status]]:
        with self._lock:
            write = self._pending.get(connector)
        return write.statuses(connector) if write is not None else self.store.get(connector)

    def all(self) -> dict[str, tuple[Status | None, list[Status]]]:
        stored = self.store.all()
        with self._lock:
            pending = dict(self._pending)
        return {**stored, **{name: w.statuses(name) for name, w in pending.items()}}

    def delete(self, connector: str) -> None:
        """Delete the connector's status (in the store: raises if the store is away)."""
        self.forget(connector)
        self.store.delete(connector)

    def forget(self, connector: str) -> None:
        """Drop a pending status (the connector is no longer this worker's to report)."""
        with self._lock:
            self._pending.pop(connector, None)
