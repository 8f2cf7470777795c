"""The broker buses' commit journal in the PostgreSQL cluster store (distributed mode).

Same rows and rules as :class:`sluice.bus._external.CommitJournal` (read its module docstring:
the ``done`` rows, the parts the executors write and the writers' fences),
kept in ``cluster.store.url`` so that a worker on another host that takes a connector over
finds the ``pending``/``done`` rows and fences of the one it replaces. The fence check is one
conditional upsert of the writer's fence row (``epoch = GREATEST(epoch, mine)``, returning the
result) in the same transaction as the journal row: the row stays locked until that transaction
ends, so a concurrent :meth:`fence` either comes first (and this commit is refused) or waits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from sluice._pg import PgFile, create_tables
from sluice.bus.base import WriterFenced

_META = sa.MetaData()
_WRITES = sa.Table(
    "sluice_writes",
    _META,
    sa.Column("writer_id", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("starts", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
_PARTS = sa.Table(
    "sluice_write_parts",
    _META,
    sa.Column("writer_id", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True),
    sa.Column("task", sa.Integer, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("starts", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
_FENCES = sa.Table(
    "sluice_writer_fences",
    _META,
    sa.Column("fence_key", sa.Text, primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
)


class PgCommitJournal(PgFile):
    """:class:`~sluice.bus._external.CommitJournal` in PostgreSQL; picklable by URL."""

    def create_tables(self) -> None:
        """Create the journal's tables (the worker, once, before any commit)."""
        create_tables(self.url, _META)

    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` as the newest of writer ``key``; older epochs' commits are refused."""
        with self._engine().begin() as conn:
            _raise_fence(conn, key, epoch, "*")

    def check_fence(self, fence: tuple[str, int] | None, topic: str) -> None:
        """Raise :class:`WriterFenced` if ``fence`` was superseded (a read: records nothing)."""
        if fence is None:
            return
        query = sa.select(_FENCES.c.epoch).where(_FENCES.c.fence_key == fence[0])
        for (epoch,) in self._rows(query):
            if int(epoch) > fence[1]:
                raise WriterFenced(fence[0], fence[1], int(epoch), topic)

    def get(self, writer_id: str, batch_id: int, topic: str) -> tuple[str, dict[int, int]] | None:
        query = sa.select(_WRITES.c.state, _WRITES.c.starts).where(
            _WRITES.c.writer_id == writer_id,
            _WRITES.c.batch_id == batch_id,
            _WRITES.c.topic == topic,
        )
        for state, starts in self._rows(query):
            return state, {int(q): int(o) for q, o in json.loads(starts).items()}
        return None

    def put(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        state: str,
        starts: Mapping[int, int],
        fence: tuple[str, int] | None = None,
    ) -> None:
        """Write the row; with ``fence``, only if it was not superseded (same transaction)."""
        stmt = pg_insert(_WRITES).values(
            writer_id=writer_id,
            batch_id=batch_id,
            topic=topic,
            state=state,
            starts=json.dumps(dict(starts)),
            updated_at=time.time(),
        )
        with self._engine().begin() as conn:
            if fence is not None:
                _raise_fence(conn, fence[0], fence[1], topic)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["writer_id", "batch_id", "topic"],
                    set_={"state": stmt.excluded.state, "updated_at": stmt.excluded.updated_at},
                )
            )

    def prune(self, older_than_s: float = 24 * 3600) -> int:
        """Forget old ``done`` rows (the newest batch of each writer always stays)."""
        newer = sa.alias(_WRITES, "w")
        newest = (
            sa.select(sa.func.max(newer.c.batch_id))
            .where(newer.c.writer_id == _WRITES.c.writer_id)
            .scalar_subquery()
        )
        with self._engine().begin() as conn:
            conn.execute(_PARTS.delete().where(_PARTS.c.updated_at < time.time() - older_than_s))
            done = conn.execute(
                _WRITES.delete().where(
                    _WRITES.c.state == "done",
                    _WRITES.c.updated_at < time.time() - older_than_s,
                    _WRITES.c.batch_id < newest,
                )
            )
        return done.rowcount

    # -- parts (see CommitJournal: same rules) ------------------------------------------------
    def _part(self, writer_id: str, batch_id: int, task: int, topic: str) -> Any:
        return sa.and_(
            _PARTS.c.writer_id == writer_id,
            _PARTS.c.batch_id == batch_id,
            _PARTS.c.task == task,
            _PARTS.c.topic == topic,
        )

    def claim_part(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        topic: str,
        owner: str,
        starts: Mapping[int, int],
        fence: tuple[str, int] | None = None,
    ) -> tuple[str, dict[int, int]]:
        """See :meth:`sluice.bus._external.CommitJournal.claim_part`."""
        where = self._part(writer_id, batch_id, task, topic)
        with self._engine().begin() as conn:
            if fence is not None:
                _raise_fence(conn, fence[0], fence[1], topic)
            inserted = conn.execute(
                pg_insert(_PARTS)
                .values(
                    writer_id=writer_id,
                    batch_id=batch_id,
                    task=task,
                    topic=topic,
                    state="pending",
                    owner=owner,
                    starts=json.dumps(dict(starts)),
                    updated_at=time.time(),
                )
                .on_conflict_do_nothing()
                .returning(_PARTS.c.state)
            ).first()
            if inserted is not None:
                return "new", dict(starts)
            state, stored = conn.execute(
                sa.select(_PARTS.c.state, _PARTS.c.starts).where(where).with_for_update()
            ).one()
            if state != "sent":
                conn.execute(
                    _PARTS.update().where(where).values(owner=owner, updated_at=time.time())
                )
        return str(state), {int(q): int(o) for q, o in json.loads(stored).items()}

    def part_owner(self, writer_id: str, batch_id: int, task: int, topic: str) -> str | None:
        """The attempt that owns a part's ``topic`` row (None: no row)."""
        query = sa.select(_PARTS.c.owner).where(self._part(writer_id, batch_id, task, topic))
        for (owner,) in self._rows(query):
            return str(owner)
        return None

    def finish_part(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        topic: str,
        owner: str,
        fence: tuple[str, int] | None = None,
    ) -> None:
        """See :meth:`sluice.bus._external.CommitJournal.finish_part`."""
        from sluice.bus._external import PartTakenOver

        where = self._part(writer_id, batch_id, task, topic)
        with self._engine().begin() as conn:
            if fence is not None:
                _raise_fence(conn, fence[0], fence[1], topic or "*")
            row = conn.execute(sa.select(_PARTS.c.owner).where(where).with_for_update()).first()
            if row is not None and topic and row[0] != owner:
                raise PartTakenOver(writer_id, batch_id, task, topic)
            stmt = pg_insert(_PARTS).values(
                writer_id=writer_id,
                batch_id=batch_id,
                task=task,
                topic=topic,
                state="sent",
                owner=owner,
                starts="{}",
                updated_at=time.time(),
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["writer_id", "batch_id", "task", "topic"],
                    set_={"state": "sent", "updated_at": stmt.excluded.updated_at},
                )
            )

    def task_finished(self, writer_id: str, batch_id: int, task: int) -> bool:
        """Whether task ``task`` finished its part of the batch."""
        query = sa.select(_PARTS.c.state).where(
            self._part(writer_id, batch_id, task, ""), _PARTS.c.state == "sent"
        )
        return bool(self._rows(query))

    def forget_parts(self, writer_id: str, before_batch: int) -> None:
        """Drop the parts rows of the writer's batches before ``before_batch``."""
        with self._engine().begin() as conn:
            conn.execute(
                _PARTS.delete().where(
                    _PARTS.c.writer_id == writer_id, _PARTS.c.batch_id < before_batch
                )
            )

    def close(self) -> None:
        """Nothing to close: the process's engine is shared (`sluice._pg`)."""


def _raise_fence(conn: sa.Connection, key: str, epoch: int, topic: str) -> None:
    """Record ``epoch`` for ``key`` unless a newer one is there (then refuse): one statement
    whose row lock lasts until the caller's transaction ends."""
    stmt = pg_insert(_FENCES).values(fence_key=key, epoch=epoch)
    newest = conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["fence_key"],
            set_={"epoch": sa.func.greatest(_FENCES.c.epoch, stmt.excluded.epoch)},
        ).returning(_FENCES.c.epoch)
    ).scalar_one()
    if int(newest) > epoch:
        raise WriterFenced(key, epoch, int(newest), topic)
