"""Error and retry counters per connector (what the metrics endpoint will read), in SQLite.

Beside them, the retry notes: which task is riding out an outage right now (since when, after how
many attempts, with which error), written by the retry loops of Spark's processes (see
`sluice.engine.retry.RetryNotes`) and read by the status. Three methods make that part, so that
another backend of this store adds little: `note_retrying`, `clear_retrying`, `retrying`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    connector TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (connector, name)
);
CREATE TABLE IF NOT EXISTS retrying (
    connector TEXT NOT NULL,
    task INTEGER NOT NULL,
    since_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT NOT NULL,
    until_ms INTEGER NOT NULL,
    PRIMARY KEY (connector, task)
)
"""

_ADD = (
    "INSERT INTO counters(connector, name, value) VALUES (?, ?, ?) "
    "ON CONFLICT(connector, name) DO UPDATE SET value = value + excluded.value"
)


class SqliteCounters(SqliteFile):
    """Monotonic counters keyed by (connector, name); picklable, safe across processes."""

    SCHEMA = _SCHEMA

    def add(self, connector: str, increments: Mapping[str, int]) -> None:
        rows = [(connector, name, n) for name, n in increments.items() if n]
        if not rows:
            return
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(_ADD, rows)

    def _write(self, sql: str, args: tuple | dict, connector: str, retries: int) -> None:
        """`sql` and, if `retries`, that many more `total-retries`, in one transaction."""
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(sql, args)
            if retries:
                db.execute(_ADD, (connector, "total-retries", retries))

    def note_retrying(
        self, connector: str, task: int, note: Mapping[str, Any], retries: int = 0
    ) -> None:
        """Task `task` of `connector` retries: `note` is `{"since_ms": epoch ms, "attempts": n,
        "error": text, "until_ms": epoch ms}` — since when, how many retries so far, the last
        error, and when the note stops meaning anything (its writer may have died). Adds
        `retries` to the connector's `total-retries`."""
        self._write(
            "INSERT OR REPLACE INTO retrying(connector, task, since_ms, attempts, error, until_ms)"
            " VALUES (:connector, :task, :since_ms, :attempts, :error, :until_ms)",
            {**note, "connector": connector, "task": task},
            connector,
            retries,
        )

    def clear_retrying(self, connector: str, task: int | None = None, retries: int = 0) -> None:
        """Task `task` (None: every task) of `connector` no longer retries; adds `retries` to
        its `total-retries`."""
        sql = "DELETE FROM retrying WHERE connector = ?"
        args: tuple = (connector,)
        if task is not None:
            sql, args = sql + " AND task = ?", (connector, task)
        self._write(sql, args, connector, retries)

    def retrying(self, now_ms: int) -> dict[str, dict[int, dict[str, Any]]]:
        """The notes still meaningful at `now_ms`: connector → task → `{"since_ms", "attempts",
        "error"}`, in one read."""
        out: dict[str, dict[int, dict[str, Any]]] = {}
        rows = self._db().execute(
            "SELECT connector, task, since_ms, attempts, error FROM retrying WHERE until_ms > ?",
            (now_ms,),
        )
        for connector, task, since_ms, attempts, error in rows:
            out.setdefault(connector, {})[task] = {
                "since_ms": since_ms,
                "attempts": attempts,
                "error": error,
            }
        return out

    def get(self, connector: str) -> dict[str, int]:
        rows = self._db().execute(
            "SELECT name, value FROM counters WHERE connector = ?", (connector,)
        )
        return dict(rows)

    def all(self) -> dict[str, dict[str, int]]:
        """`get` of every connector, in one read."""
        out: dict[str, dict[str, int]] = {}
        for connector, name, value in self._db().execute(
            "SELECT connector, name, value FROM counters"
        ):
            out.setdefault(connector, {})[name] = value
        return out
