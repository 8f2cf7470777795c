"""Opening the PostgreSQL cluster store from any process (worker, Spark's Python workers).

The PostgreSQL stores (positions, commit journal, schemas, counters) are pickled into Spark's
processes, like the SQLite ones: they carry only the URL, and each process opens one small
SQLAlchemy engine per URL on first use. A process forked after it opened one (Spark's Python
worker daemon forks its workers) gets a fresh engine: connections are never shared across a fork.
"""

from __future__ import annotations

import os
import threading

import sqlalchemy as sa

_ENGINES: dict[tuple[str, int], sa.Engine] = {}
_LOCK = threading.Lock()
#: `pg_advisory_xact_lock` key held while tables are created (workers start together)
CREATE_LOCK = 7251


def engine_url(url: str) -> str:
    """SQLAlchemy's URL for `url`: psycopg 3 is the pinned driver, so the plain
    `postgresql://` form users write is read as `postgresql+psycopg://`."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def shared_engine(url: str) -> sa.Engine:
    """This process's engine for `url` (created on first use; a small pool: a Spark Python
    worker commits one batch at a time)."""
    key = (url, os.getpid())
    engine = _ENGINES.get(key)
    if engine is not None:
        return engine
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = sa.create_engine(
                engine_url(url),
                pool_pre_ping=True,
                pool_size=2,
                max_overflow=8,  # the worker's threads (rounds, REST, listeners) share it
                connect_args={"connect_timeout": 5},
            )
            _ENGINES[key] = engine
    return engine


def create_tables(url: str, metadata: sa.MetaData) -> None:
    """Create `metadata`'s tables if missing, one creator at a time across workers."""
    with shared_engine(url).begin() as conn:
        conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({CREATE_LOCK})"))
        metadata.create_all(conn)


class PgFile:
    """Base of the PostgreSQL stores: picklable by URL; `_engine()` is this process's engine."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __getstate__(self) -> dict:
        return {"url": self.url}

    def __setstate__(self, state: dict) -> None:
        self.url = state["url"]

    def _engine(self) -> sa.Engine:
        return shared_engine(self.url)

    def _rows(self, query: sa.Executable) -> list[sa.Row]:
        """Every row `query` reads (outside any write transaction)."""
        with self._engine().connect() as conn:
            return list(conn.execute(query).all())
