"""The stores a worker's queries commit to, in one of two backends.

Standalone: SQLite files under `storePathRootDir` (positions, counters, schemas; a broker bus
keeps its commit journal under `<root>/bus`). Distributed (`cluster.store.url`): the same stores
in the PostgreSQL cluster store, so workers on different hosts share them without a shared file
system. The composition root (`runtime.assembly`) picks one; nothing else knows which it got.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exc as sa_exc

from sluice.bus.facade import Bus
from sluice.push import PushBoard
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


@dataclass(frozen=True)
class WorkerParts:
    """What a worker's queries write to and its control plane reads beside them: the topic bus,
    the stores and the push board. Built once by the composition root and handed to the runner
    (whose queries commit to them), the herder (topics, offsets, push settings) and the metrics
    snapshot, so that neither reaches through the runner for them."""

    bus: Bus
    stores: WorkerStores
    push_board: PushBoard


#: what the stores raise when the database does not answer (the REST API maps them to 503)
STORE_ERRORS: tuple[type[Exception], ...] = (
    sqlite3.OperationalError,
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
)
#: SQLite errors that say the file cannot be used now, not that a statement is wrong
_SQLITE_DOWN = ("locked", "busy", "disk i/o", "unable to open", "readonly", "disk is full")


def store_outage(exc: BaseException) -> str | None:
    """What a REST answer says when `exc` means a store does not answer (the cluster store's
    PostgreSQL down or refusing connections, a pool exhausted, SQLite locked or unreadable),
    naming the store; None for any other error."""
    if isinstance(exc, sa_exc.TimeoutError):
        return "the cluster store (PostgreSQL) does not answer: no free connection in time"
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        cause = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        return f"the cluster store (PostgreSQL) does not answer: {cause[0] if cause else exc!r}"
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        if any(mark in text.lower() for mark in _SQLITE_DOWN):
            return f"the worker's store (SQLite under storePathRootDir) does not answer: {text}"
    return None
