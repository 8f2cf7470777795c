"""Error and retry counters per connector (what the metrics endpoint will read), in SQLite."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    connector TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (connector, name)
)
"""


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

    def all(self) -> dict[str, dict[str, int]]:
        """`get` of every connector, in one read."""
        out: dict[str, dict[str, int]] = {}
        for connector, name, value in self._db().execute(
            "SELECT connector, name, value FROM counters"
        ):
            out.setdefault(connector, {})[name] = value
        return out
