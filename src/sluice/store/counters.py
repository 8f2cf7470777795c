"""Error and retry counters per connector (what the metrics endpoint will read), in SQLite."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from sluice._sqlite import connect_shared

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    connector TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (connector, name)
)
"""


class SqliteCounters:
    """Monotonic counters keyed by (connector, name); picklable, safe across processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._local: threading.local | None = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        self._local = None

    def _db(self):
        if self._local is None:
            self._local = threading.local()
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            conn = connect_shared(self.path)
            conn.execute(_SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def add(self, connector: str, increments: Mapping[str, int]) -> None:
        rows = [(connector, name, n) for name, n in increments.items() if n]
        if not rows:
            return
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO counters(connector, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT(connector, name) DO UPDATE SET value = value + excluded.value",
                rows,
            )

    def get(self, connector: str) -> dict[str, int]:
        rows = self._db().execute(
            "SELECT name, value FROM counters WHERE connector = ?", (connector,)
        )
        return dict(rows)
