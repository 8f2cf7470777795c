"""Connector and task statuses (state, trace, worker), in SQLite (the embedded status store)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS statuses (
    connector TEXT NOT NULL,
    task INTEGER NOT NULL,
    state TEXT NOT NULL,
    trace TEXT,
    worker_id TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (connector, task)
)
"""

#: The row that holds the connector's own state (tasks are numbered from 0).
CONNECTOR_ROW = -1


@dataclass(frozen=True)
class Status:
    """The state of a connector (`task` is None) or of one of its tasks."""

    state: str
    trace: str | None
    worker_id: str
    task: int | None = None


#: The columns of a status row, in the order of `status_rows`.
STATUS_COLUMNS = ("connector", "task", "state", "trace", "worker_id", "updated_at")


def status_rows(
    connector: str,
    state: str,
    worker_id: str,
    trace: str | None,
    tasks: int,
    task_state: str | None,
) -> list[tuple[Any, ...]]:
    """The rows `put` writes: the connector's own, then one per task (sharing its state unless
    `task_state` says otherwise; Spark runs a connector's tasks as one query)."""
    now = time.time()
    rows: list[tuple[Any, ...]] = [(connector, CONNECTOR_ROW, state, trace, worker_id, now)]
    rows += [(connector, i, task_state or state, trace, worker_id, now) for i in range(tasks)]
    return rows


def split_statuses(
    rows: Iterable[tuple[int, str, str | None, str]],
) -> tuple[Status | None, list[Status]]:
    """(task, state, trace, worker) rows in task order → the connector's status (None if
    unknown) and its tasks' statuses."""
    own = None
    tasks = []
    for task, state, trace, worker in rows:
        if task == CONNECTOR_ROW:
            own = Status(state, trace, worker)
        else:
            tasks.append(Status(state, trace, worker, task))
    return own, tasks


def split_all_statuses(
    rows: Iterable[tuple[str, int, str, str | None, str]],
) -> dict[str, tuple[Status | None, list[Status]]]:
    """(connector, task, state, trace, worker) rows ordered by connector and task → each
    connector's `split_statuses`."""
    by_connector: dict[str, list[tuple[int, str, str | None, str]]] = {}
    for connector, *row in rows:
        by_connector.setdefault(connector, []).append(tuple(row))  # type: ignore[arg-type]
    return {name: split_statuses(rows_) for name, rows_ in by_connector.items()}


class StatusStore(Protocol):
    """What the herders need of a status store (SQLite standalone, PostgreSQL distributed)."""

    def put(
        self,
        connector: str,
        state: str,
        worker_id: str,
        *,
        trace: str | None = None,
        tasks: int = 0,
        task_state: str | None = None,
    ) -> None: ...

    def get(self, connector: str) -> tuple[Status | None, list[Status]]: ...

    def all(self) -> dict[str, tuple[Status | None, list[Status]]]: ...

    def delete(self, connector: str) -> None: ...


class SqliteStatusStore(SqliteFile):
    """Statuses keyed by (connector, task); the connector's own row has task -1."""

    SCHEMA = _SCHEMA

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
        """Set the connector's state and, atomically, that of its `tasks` tasks (dropping others).

        Spark runs a connector's tasks as one query, so they share its state unless
        `task_state` says otherwise.
        """
        rows = status_rows(connector, state, worker_id, trace, tasks, task_state)
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM statuses WHERE connector = ?", (connector,))
            db.executemany("INSERT INTO statuses VALUES (?, ?, ?, ?, ?, ?)", rows)

    def get(self, connector: str) -> tuple[Status | None, list[Status]]:
        """The connector's status (None if unknown) and its tasks' statuses in task order."""
        rows = (
            self._db()
            .execute(
                "SELECT task, state, trace, worker_id FROM statuses WHERE connector = ? "
                "ORDER BY task",
                (connector,),
            )
            .fetchall()
        )
        return split_statuses(rows)

    def all(self) -> dict[str, tuple[Status | None, list[Status]]]:
        """`get` of every connector, in one read (what a `/metrics` scrape takes)."""
        rows = self._db().execute(
            "SELECT connector, task, state, trace, worker_id FROM statuses ORDER BY connector, task"
        )
        return split_all_statuses(rows)

    def delete(self, connector: str) -> None:
        db = self._db()
        with db:
            db.execute("DELETE FROM statuses WHERE connector = ?", (connector,))
