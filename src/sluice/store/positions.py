"""Committed positions per connector, in SQLite (embedded default).

The store mirrors what each query committed (written by the Spark adapters on `commit(end)`), is
what the offsets API shows, and is where a new or reset query starts from. It is safe for several
processes: Spark's reader and writer processes and the worker all open it.

Fencing (distributed mode): `fences` keeps the newest lease generation of each connector. A save
made through `FencedPositions` checks it in the same transaction and is refused (`Fenced`) when
another worker took the connector over, so a worker that lost its lease cannot move positions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.sdk import RecordOffset
from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS positions (
    connector TEXT NOT NULL,
    partition TEXT NOT NULL,
    offset TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (connector, partition)
);
CREATE TABLE IF NOT EXISTS fences (
    connector TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
)
"""


class Fenced(RuntimeError):
    """A commit by a connector run whose lease generation was superseded: refused."""

    def __init__(self, connector: str, generation: int, current: int, what: str) -> None:
        super().__init__(
            f"fenced: connector {connector!r} generation {generation} may no longer commit "
            f"{what} (generation {current} took over)"
        )
        self.connector, self.generation, self.current = connector, generation, current


class SqlitePositionStore(SqliteFile):
    """Positions keyed by (connector, partition key); picklable (connections open lazily)."""

    SCHEMA = _SCHEMA

    def load(self, connector: str) -> dict[str, RecordOffset]:
        rows = self._db().execute(
            "SELECT partition, offset FROM positions WHERE connector = ?", (connector,)
        )
        return {partition: json.loads(offset) for partition, offset in rows}

    def load_all(self) -> dict[str, dict[str, RecordOffset]]:
        """`load` of every connector, in one read."""
        out: dict[str, dict[str, RecordOffset]] = {}
        for connector, partition, offset in self._db().execute(
            "SELECT connector, partition, offset FROM positions"
        ):
            out.setdefault(connector, {})[partition] = json.loads(offset)
        return out

    def save(
        self,
        connector: str,
        positions: Mapping[str, RecordOffset],
        *,
        generation: int | None = None,
    ) -> None:
        """Upsert positions; with `generation`, only if it is still the connector's newest."""
        now = time.time()
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            if generation is not None:
                self._check(db, connector, generation, "positions")
            db.executemany(
                "INSERT INTO positions(connector, partition, offset, updated_at) VALUES (?,?,?,?) "
                "ON CONFLICT(connector, partition) DO UPDATE SET offset = excluded.offset, "
                "updated_at = excluded.updated_at",
                [(connector, p, json.dumps(o, sort_keys=True), now) for p, o in positions.items()],
            )

    @staticmethod
    def _check(db: Any, connector: str, generation: int, what: str) -> None:
        row = db.execute(
            "SELECT generation FROM fences WHERE connector = ?", (connector,)
        ).fetchone()
        if row is not None and int(row[0]) != generation:
            raise Fenced(connector, generation, int(row[0]), what)

    def fence(self, connector: str, generation: int) -> None:
        """Make `generation` the connector's newest (never lowering it): older ones are
        refused from now on."""
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO fences(connector, generation) VALUES (?, ?) ON CONFLICT(connector) "
                "DO UPDATE SET generation = max(generation, excluded.generation)",
                (connector, generation),
            )

    def check_fence(self, connector: str, generation: int, what: str = "a batch") -> None:
        """Raise `Fenced` unless `generation` is the connector's newest."""
        self._check(self._db(), connector, generation, what)

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


class FencingStore(Protocol):
    """What `FencedPositions` needs of a position store (SQLite here, PostgreSQL in
    `sluice.store.pg`)."""

    def load(self, connector: str) -> dict[str, RecordOffset]: ...

    def save(
        self,
        connector: str,
        positions: Mapping[str, RecordOffset],
        *,
        generation: int | None = None,
    ) -> None: ...

    def check_fence(self, connector: str, generation: int, what: str = "a batch") -> None: ...


@dataclass(frozen=True)
class FencedPositions:
    """The position store as one lease generation of a connector sees it (picklable): saves
    and `check` are refused with `Fenced` once a newer generation took the connector over."""

    store: FencingStore
    generation: int

    def load(self, connector: str) -> dict[str, RecordOffset]:
        return self.store.load(connector)

    def save(self, connector: str, positions: Mapping[str, RecordOffset]) -> None:
        self.store.save(connector, positions, generation=self.generation)

    def check(self, connector: str, what: str = "a batch") -> None:
        """Called in a commit path (e.g. before a sink's commit) to refuse a zombie's commit."""
        self.store.check_fence(connector, self.generation, what)
