"""Positions, counters and schemas in the PostgreSQL cluster store (distributed mode).

The same interfaces as the SQLite stores (`SqlitePositionStore`, `SqliteCounters`,
`SqliteSchemaRegistry`), so that workers on different hosts share them through
`cluster.store.url` instead of files under a shared `storePathRootDir`. Like the SQLite ones they
pickle (by URL) into Spark's processes, which open their own engine (`sluice._pg`).

Fencing keeps SQLite's guarantee: a save under a lease generation reads the connector's fence
row `FOR SHARE` and writes the positions in the same transaction, so a concurrent `fence` (which
updates that row) either commits first and the save is refused, or waits for the save.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from sluice._pg import PgFile, create_tables
from sluice.sdk import RecordOffset
from sluice.store.positions import Fenced
from sluice.store.schemas import RegisteredSchema

_META = sa.MetaData()
_POSITIONS = sa.Table(
    "sluice_positions",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("partition", sa.Text, primary_key=True),
    sa.Column("offset", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
_FENCES = sa.Table(
    "sluice_position_fences",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
)
_COUNTERS = sa.Table(
    "sluice_counters",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)
_RETRYING = sa.Table(
    "sluice_retrying",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("task", sa.Integer, primary_key=True),
    sa.Column("since_ms", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("until_ms", sa.BigInteger, nullable=False),
)
_SCHEMAS = sa.Table(
    "sluice_schemas",
    _META,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    # unique by digest: a btree entry of a long schema text would exceed PostgreSQL's limit
    sa.Column("digest", sa.Text, nullable=False, unique=True),
    sa.Column("schema", sa.Text, nullable=False),
)
_SUBJECTS = sa.Table(
    "sluice_subjects",
    _META,
    sa.Column("subject", sa.Text, primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("schema_id", sa.BigInteger, sa.ForeignKey("sluice_schemas.id"), nullable=False),
    sa.Column("registered_at", sa.Float, nullable=False),
)


def create_store_tables(url: str) -> None:
    """Create the tables of these stores (the worker calls it once, before Spark uses them)."""
    create_tables(url, _META)


class PgPositionStore(PgFile):
    """Positions keyed by (connector, partition key), with their fences; picklable."""

    def load(self, connector: str) -> dict[str, RecordOffset]:
        query = sa.select(_POSITIONS.c.partition, _POSITIONS.c.offset).where(
            _POSITIONS.c.connector == connector
        )
        return {partition: json.loads(offset) for partition, offset in self._rows(query)}

    def load_all(self) -> dict[str, dict[str, RecordOffset]]:
        """`load` of every connector, in one read."""
        out: dict[str, dict[str, RecordOffset]] = {}
        query = sa.select(_POSITIONS.c.connector, _POSITIONS.c.partition, _POSITIONS.c.offset)
        for connector, partition, offset in self._rows(query):
            out.setdefault(connector, {})[partition] = json.loads(offset)
        return out

    def save(
        self,
        connector: str,
        positions: Mapping[str, RecordOffset],
        *,
        generation: int | None = None,
    ) -> None:
        """Upsert positions; with `generation`, only if it is still the connector's newest
        (checked under the fence row's lock, in the same transaction)."""
        if not positions and generation is None:
            return
        now = time.time()
        rows = [
            {
                "connector": connector,
                "partition": p,
                "offset": json.dumps(o, sort_keys=True),
                "updated_at": now,
            }
            for p, o in positions.items()
        ]
        with self._engine().begin() as conn:
            if generation is not None:
                _check(conn, connector, generation, "positions", lock=True)
            if rows:
                stmt = pg_insert(_POSITIONS)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["connector", "partition"],
                        set_={
                            "offset": stmt.excluded["offset"],
                            "updated_at": stmt.excluded.updated_at,
                        },
                    ),
                    rows,
                )

    def fence(self, connector: str, generation: int) -> None:
        """Make `generation` the connector's newest (never lowering it)."""
        stmt = pg_insert(_FENCES).values(connector=connector, generation=generation)
        with self._engine().begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["connector"],
                    set_={"generation": sa.func.greatest(_FENCES.c.generation, generation)},
                )
            )

    def check_fence(self, connector: str, generation: int, what: str = "a batch") -> None:
        """Raise `Fenced` unless `generation` is the connector's newest."""
        with self._engine().connect() as conn:
            _check(conn, connector, generation, what, lock=False)

    def replace(self, connector: str, positions: Mapping[str, RecordOffset]) -> None:
        """Set exactly these positions (an offsets reset)."""
        self.delete(connector)
        if positions:
            self.save(connector, positions)

    def remove(self, connector: str, partitions: list[str]) -> None:
        """Forget these partitions' positions."""
        if not partitions:
            return
        with self._engine().begin() as conn:
            conn.execute(
                _POSITIONS.delete().where(
                    _POSITIONS.c.connector == connector, _POSITIONS.c.partition.in_(partitions)
                )
            )

    def delete(self, connector: str) -> None:
        with self._engine().begin() as conn:
            conn.execute(_POSITIONS.delete().where(_POSITIONS.c.connector == connector))


def _check(conn: sa.Connection, connector: str, generation: int, what: str, *, lock: bool) -> None:
    query = sa.select(_FENCES.c.generation).where(_FENCES.c.connector == connector)
    if lock:  # a `fence` waits for this transaction, or this one sees its generation
        query = query.with_for_update(read=True)
    row = conn.execute(query).first()
    if row is not None and int(row[0]) != generation:
        raise Fenced(connector, generation, int(row[0]), what)


class PgCounters(PgFile):
    """Monotonic counters keyed by (connector, name); picklable, safe across processes and
    hosts (each add is one atomic upsert)."""

    def add(self, connector: str, increments: Mapping[str, int]) -> None:
        rows = [{"connector": connector, "name": k, "value": n} for k, n in increments.items() if n]
        if not rows:
            return
        stmt = pg_insert(_COUNTERS)
        with self._engine().begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["connector", "name"],
                    set_={"value": _COUNTERS.c.value + stmt.excluded.value},
                ),
                rows,
            )

    def note_retrying(
        self, connector: str, task: int, note: Mapping[str, Any], retries: int = 0
    ) -> None:
        """`SqliteCounters.note_retrying`: the task's retry note, upserted, and `retries` more
        `total-retries`, in one transaction."""
        row = {"connector": connector, "task": task, **note}
        stmt = pg_insert(_RETRYING).values(row)
        stmt = stmt.on_conflict_do_update(
            index_elements=["connector", "task"],
            set_={k: stmt.excluded[k] for k in ("since_ms", "attempts", "error", "until_ms")},
        )
        self._write(stmt, connector, retries)

    def clear_retrying(self, connector: str, task: int | None = None, retries: int = 0) -> None:
        """`SqliteCounters.clear_retrying`."""
        stmt = _RETRYING.delete().where(_RETRYING.c.connector == connector)
        if task is not None:
            stmt = stmt.where(_RETRYING.c.task == task)
        self._write(stmt, connector, retries)

    def retrying(self, now_ms: int) -> dict[str, dict[int, dict[str, Any]]]:
        """`SqliteCounters.retrying`: the notes still meaningful at `now_ms`, in one read."""
        query = sa.select(
            _RETRYING.c.connector,
            _RETRYING.c.task,
            _RETRYING.c.since_ms,
            _RETRYING.c.attempts,
            _RETRYING.c.error,
        ).where(_RETRYING.c.until_ms > now_ms)
        out: dict[str, dict[int, dict[str, Any]]] = {}
        for connector, task, since_ms, attempts, error in self._rows(query):
            out.setdefault(connector, {})[int(task)] = {
                "since_ms": int(since_ms),
                "attempts": int(attempts),
                "error": error,
            }
        return out

    def _write(self, stmt: sa.Executable, connector: str, retries: int) -> None:
        with self._engine().begin() as conn:
            conn.execute(stmt)
            if retries:
                add = pg_insert(_COUNTERS).values(
                    connector=connector, name="total-retries", value=retries
                )
                conn.execute(
                    add.on_conflict_do_update(
                        index_elements=["connector", "name"],
                        set_={"value": _COUNTERS.c.value + add.excluded.value},
                    )
                )

    def get(self, connector: str) -> dict[str, int]:
        query = sa.select(_COUNTERS.c.name, _COUNTERS.c.value).where(
            _COUNTERS.c.connector == connector
        )
        return {name: int(value) for name, value in self._rows(query)}

    def all(self) -> dict[str, dict[str, int]]:
        """`get` of every connector, in one read."""
        out: dict[str, dict[str, int]] = {}
        query = sa.select(_COUNTERS.c.connector, _COUNTERS.c.name, _COUNTERS.c.value)
        for connector, name, value in self._rows(query):
            out.setdefault(connector, {})[name] = int(value)
        return out


_VERSION_QUERY = sa.select(_SUBJECTS.c.version, _SUBJECTS.c.schema_id, _SCHEMAS.c.schema).join(
    _SCHEMAS, _SCHEMAS.c.id == _SUBJECTS.c.schema_id
)


class PgSchemaRegistry(PgFile):
    """The schema registry (`SqliteSchemaRegistry`'s methods) in PostgreSQL; picklable.

    Pure storage, as the SQLite one: compatibility rules are checked by a wrapper around it.
    """

    def schema_id(self, schema: str) -> int:
        """The global id of `schema` (created on first use)."""
        with self._engine().begin() as conn:
            return _schema_id(conn, schema)

    def register(self, subject: str, schema: str) -> RegisteredSchema:
        """Make `schema` the subject's latest version (no-op if it already is)."""
        with self._engine().begin() as conn:
            # one registration per subject at a time (on any host): versions stay dense
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(subject))))
            schema_id = _schema_id(conn, schema)
            latest = _latest(conn, subject)
            if latest is not None and latest.id == schema_id:
                return latest
            version = 1 if latest is None else latest.version + 1
            conn.execute(
                _SUBJECTS.insert().values(
                    subject=subject, version=version, schema_id=schema_id, registered_at=time.time()
                )
            )
            return RegisteredSchema(subject, version, schema_id, schema)

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The subject's newest version, or None if it has none."""
        with self._engine().connect() as conn:
            return _latest(conn, subject)

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of the subject, oldest first."""
        query = _VERSION_QUERY.where(_SUBJECTS.c.subject == subject).order_by(_SUBJECTS.c.version)
        rows = self._rows(query)
        return [RegisteredSchema(subject, int(v), int(i), text) for v, i, text in rows]

    def subjects(self) -> list[str]:
        """Every subject with at least one version, sorted."""
        query = sa.select(_SUBJECTS.c.subject).distinct().order_by(_SUBJECTS.c.subject)
        return [r[0] for r in self._rows(query)]

    def by_id(self, schema_id: int) -> str | None:
        """The schema text with this global id, or None."""
        query = sa.select(_SCHEMAS.c.schema).where(_SCHEMAS.c.id == schema_id)
        rows = self._rows(query)
        return rows[0][0] if rows else None


def _schema_id(conn: sa.Connection, schema: str) -> int:
    digest = hashlib.sha256(schema.encode()).hexdigest()
    stmt = (
        pg_insert(_SCHEMAS)
        .values(digest=digest, schema=schema)
        .on_conflict_do_nothing()
        .returning(_SCHEMAS.c.id)
    )
    row = conn.execute(stmt).first()
    if row is None:  # it existed (or a concurrent transaction just inserted it)
        row = conn.execute(sa.select(_SCHEMAS.c.id).where(_SCHEMAS.c.digest == digest)).first()
    return int(row[0])


def _latest(conn: sa.Connection, subject: str) -> RegisteredSchema | None:
    query = (
        _VERSION_QUERY.where(_SUBJECTS.c.subject == subject)
        .order_by(_SUBJECTS.c.version.desc())
        .limit(1)
    )
    row = conn.execute(query).first()
    return None if row is None else RegisteredSchema(subject, int(row[0]), int(row[1]), row[2])
