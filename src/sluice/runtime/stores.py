"""The stores a worker's queries commit to, in one of two backends.

Standalone: SQLite files under `storePathRootDir` (positions, counters, schemas; a broker bus
keeps its commit journal under `<root>/bus`). Distributed (`cluster.store.url`): the same stores
in the PostgreSQL cluster store, so workers on different hosts share them without a shared file
system. The composition root (`runtime.assembly`) picks one; nothing else knows which it got.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sluice.bus.base import Bus
from sluice.store.counters import SqliteCounters
from sluice.store.pg import PgCounters, PgPositionStore, PgSchemaRegistry
from sluice.store.positions import SqlitePositionStore
from sluice.store.schemas import SqliteSchemaRegistry

PositionBackend = SqlitePositionStore | PgPositionStore
CounterBackend = SqliteCounters | PgCounters
SchemaBackend = SqliteSchemaRegistry | PgSchemaRegistry


@dataclass(frozen=True)
class WorkerStores:
    """Positions (with their fences), counters, the schema registry and, when not the bus's
    own file, the broker buses' commit journal. Each one pickles into Spark's processes."""

    positions: PositionBackend
    counters: CounterBackend
    schemas: SchemaBackend
    journal: Any = None

    @classmethod
    def sqlite(cls, root: str | os.PathLike[str]) -> WorkerStores:
        """The standalone stores: SQLite files under `root` (created here, before Spark's
        processes open them)."""
        root = os.fspath(root)
        stores = cls(
            SqlitePositionStore(os.path.join(root, "positions.sqlite")),
            SqliteCounters(os.path.join(root, "counters.sqlite")),
            SqliteSchemaRegistry(os.path.join(root, "schemas.sqlite")),
        )
        stores.positions.load("")
        stores.counters.get("")
        return stores

    @classmethod
    def postgres(cls, url: str) -> WorkerStores:
        """The stores in the PostgreSQL cluster store at `url` (tables created here)."""
        from sluice.bus._pg_journal import PgCommitJournal
        from sluice.store.pg import create_store_tables

        create_store_tables(url)
        journal = PgCommitJournal(url)
        journal.create_tables()
        return cls(PgPositionStore(url), PgCounters(url), PgSchemaRegistry(url), journal)

    def attach(self, bus: Bus) -> Bus:
        """`bus`, keeping its commit journal here if these stores hold one."""
        if self.journal is not None:
            bus.keep_journal(self.journal)
        return bus
