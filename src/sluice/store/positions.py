"""Committed positions per connector, in SQLite (embedded default).

The store mirrors what each query committed (written by the Spark adapters on `commit(end)`), is
what the offsets API shows, and is where a new or reset query starts from. It is safe for several
processes: Spark's reader and writer processes and the worker all open it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from sluice.sdk import RecordOffset
from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS positions (
    connector TEXT NOT NULL,
    partition TEXT NOT NULL,
    offset TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (connector, partition)
)
"""


class SqlitePositionStore(SqliteFile):
    """Positions keyed by (connector, partition key); picklable (connections open lazily)."""

    SCHEMA = _SCHEMA

    def load(self, connector: str) -> dict[str, RecordOffset]:
        rows = self._db().execute(
            "SELECT partition, offset FROM positions WHERE connector = ?", (connector,)
        )
        return {partition: json.loads(offset) for partition, offset in rows}

    def save(self, connector: str, positions: Mapping[str, RecordOffset]) -> None:
        now = time.time()
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO positions(connector, partition, offset, updated_at) VALUES (?,?,?,?) "
                "ON CONFLICT(connector, partition) DO UPDATE SET offset = excluded.offset, "
                "updated_at = excluded.updated_at",
                [(connector, p, json.dumps(o, sort_keys=True), now) for p, o in positions.items()],
            )

    def replace(self, connector: str, positions: Mapping[str, RecordOffset]) -> None:
        """Set exactly these positions (an offsets reset)."""
        self.delete(connector)
        if positions:
            self.save(connector, positions)

    def remove(self, connector: str, partitions: list[str]) -> None:
        """Forget these partitions' positions (they start from the beginning next time)."""
        db = self._db()
        with db:
            db.executemany(
                "DELETE FROM positions WHERE connector = ? AND partition = ?",
                [(connector, p) for p in partitions],
            )

    def delete(self, connector: str) -> None:
        db = self._db()
        with db:
            db.execute("DELETE FROM positions WHERE connector = ?", (connector,))
