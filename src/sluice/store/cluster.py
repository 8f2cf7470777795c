"""The shared cluster store of distributed mode, in PostgreSQL (`cluster.store.url`).

Tables (all prefixed `sluice_`):

* `cluster`    identity of the cluster the database belongs to (`cluster.name`, the shared
               `storePathRootDir` and the token of its marker file): a worker of another
               cluster, or one whose store root is not the shared directory, is refused at
               start.
* `members`    one heartbeat row per live worker: `(worker_id, session, url, heartbeat)`; a worker
               whose heartbeat is older than `cluster.session.timeout.ms` is dead. Times are the
               database's `now()`, so workers' clocks need not agree.
* `connectors` configs, target states and task configs (what the standalone config store holds).
* `statuses`   connector and task statuses, written by the owner with its worker id.
* `leases`     `(connector, worker_id, session, generation)`: a connector runs only under its
               lease; every takeover bumps `generation`, which fences the previous owner's
               commits (see `sluice.runtime.fencing`).

Positions (with their fences), schemas, counters and the broker buses' commit journal are in
the same database too, in stores of their own that Spark's processes open by URL
(`sluice.store.pg`, `sluice.bus._pg_journal`); the composition root (`runtime.assembly`)
chooses them instead of the SQLite ones under `storePathRootDir`.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import SQLAlchemyError

from sluice._pg import CREATE_LOCK, engine_url
from sluice.sdk import ConfigException
from sluice.store.configs import TARGET_STATES, StoredConnector
from sluice.store.statuses import (
    STATUS_COLUMNS,
    Status,
    split_all_statuses,
    split_statuses,
    status_rows,
)

log = logging.getLogger(__name__)

_META = sa.MetaData()
_CLUSTER = sa.Table(
    "sluice_cluster",
    _META,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
_MEMBERS = sa.Table(
    "sluice_members",
    _META,
    sa.Column("worker_id", sa.Text, primary_key=True),
    sa.Column("session", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("heartbeat", sa.DateTime(timezone=True), nullable=False),
)
_CONNECTORS = sa.Table(
    "sluice_connectors",
    _META,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("target_state", sa.Text, nullable=False),
    sa.Column("task_configs", sa.Text, nullable=False, server_default="[]"),
    sa.Column("updated_at", sa.Float, nullable=False),
)
_STATUSES = sa.Table(
    "sluice_statuses",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("task", sa.Integer, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("trace", sa.Text),
    sa.Column("worker_id", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
_LEASES = sa.Table(
    "sluice_leases",
    _META,
    sa.Column("connector", sa.Text, primary_key=True),
    sa.Column("worker_id", sa.Text),
    sa.Column("session", sa.Text),
    sa.Column("generation", sa.BigInteger, nullable=False),
)


#: file under `storePathRootDir` whose token proves the directory is the cluster's shared one
ROOT_MARKER = ".sluice-cluster"
_MARKER_KEY = "storePathRootDir.marker"


def _root_marker(root: str) -> str:
    """The token in `<root>/.sluice-cluster`, written now (with a new one) if there is none.
    Linked into place complete, so workers starting together on the shared directory agree."""
    path = os.path.join(root, ROOT_MARKER)
    os.makedirs(root, exist_ok=True)
    token = uuid.uuid4().hex
    tmp = f"{path}.{token}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(token)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # fails if it exists: never replaces another worker's token
    except FileExistsError:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    finally:
        os.remove(tmp)
    return token


@dataclass(frozen=True)
class Lease:
    """Who may run a connector, and under which generation (None: nobody holds it)."""

    connector: str
    worker_id: str | None
    session: str | None
    generation: int


class ClusterStore:
    """Membership, leases, configs and statuses of one cluster in a shared PostgreSQL database."""

    def __init__(self, engine: sa.Engine, cluster_name: str) -> None:
        self.engine = engine
        self.cluster_name = cluster_name
        self.session = uuid.uuid4().hex
        self.configs = PgConfigStore(engine)
        self.statuses = PgStatusStore(engine)

    @classmethod
    def open(cls, config: Any) -> ClusterStore:
        """Connect, create the tables, check the cluster identity; errors name the key."""
        url = config.cluster.store_url
        try:
            engine = sa.create_engine(
                engine_url(url),
                pool_pre_ping=True,
                pool_size=4,
                connect_args={"connect_timeout": 5},
            )
            with engine.begin() as conn:
                # one creator at a time when several workers start together
                conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({CREATE_LOCK})"))
                _META.create_all(conn)
        except (SQLAlchemyError, ImportError, ValueError) as exc:
            raise ConfigException(
                "cluster.store.url",
                f"cannot open the cluster store: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                suggestion="check the URL (postgresql://user:password@host:port/database) and "
                "that the server is up",
            ) from None
        store = cls(engine, config.cluster.name)
        store._claim_identity("cluster.name", config.cluster.name)
        store._claim_identity("storePathRootDir", config.store_root)
        store._check_root_shared(config.store_root)
        return store

    def _check_root_shared(self, root: str) -> None:
        """Refuse a `storePathRootDir` that has the cluster's path but is not its directory (a
        local disk on another host): the first worker leaves a marker file there whose token
        the store keeps; a worker that finds another token (or none, and makes its own) is not
        looking at the shared directory."""
        token = _root_marker(root)
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(_CLUSTER).values(key=_MARKER_KEY, value=token).on_conflict_do_nothing()
            )
            kept = conn.execute(
                sa.select(_CLUSTER.c.value).where(_CLUSTER.c.key == _MARKER_KEY)
            ).scalar_one()
        if kept != token:
            raise ConfigException(
                "storePathRootDir",
                f"{root!r} is not the cluster's shared directory on this host: its "
                f"{ROOT_MARKER} is not the one the cluster's first worker left there",
                suggestion="mount the shared file system (NFS…) at this path on every host; if "
                "the shared directory was emptied on purpose, delete the row "
                f"key='{_MARKER_KEY}' of sluice_cluster",
            )

    def _claim_identity(self, key: str, value: str) -> None:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(_CLUSTER.c.value).where(_CLUSTER.c.key == key)).first()
            if row is None:
                conn.execute(
                    pg_insert(_CLUSTER).values(key=key, value=value).on_conflict_do_nothing()
                )
                row = conn.execute(sa.select(_CLUSTER.c.value).where(_CLUSTER.c.key == key)).first()
        if row is not None and row[0] != value:
            if key == "cluster.name":
                raise ConfigException(
                    "cluster.name",
                    f"the cluster store belongs to cluster {row[0]!r}, not {value!r}",
                    suggestion="point cluster.store.url at this cluster's database, or set "
                    f"cluster.name={row[0]}",
                )
            raise ConfigException(
                key,
                f"{value!r} differs from the cluster's shared path {row[0]!r}: every worker "
                "must use the same shared storePathRootDir (checkpoints, topics, positions)",
            )

    # -- membership -------------------------------------------------------------------------------
    def check_id(self, worker_id: str, timeout_ms: int) -> None:
        """Refuse ``worker_id`` if a live worker of another session uses it (naming the key),
        without joining: a worker checks this before its Spark session starts, and joins once
        it can run connectors (see :meth:`join`)."""
        with self.engine.connect() as conn:
            self._refuse_live_twin(conn, worker_id, timeout_ms, lock=False)

    def join(self, worker_id: str, url: str, timeout_ms: int) -> None:
        """Register this worker; a live worker with the same id is refused (naming the key).

        From here the others count this worker live and allocate connectors to it, so a worker
        joins only when it can start them and heartbeat (after its Spark session is up): a
        worker that joined while Spark was still starting (10-20 s on a loaded machine) outlived
        its first heartbeat, was taken for dead and made its connectors move there, back and
        there again."""
        with self.engine.begin() as conn:
            self._refuse_live_twin(conn, worker_id, timeout_ms, lock=True)
            stmt = pg_insert(_MEMBERS).values(
                worker_id=worker_id, session=self.session, url=url, heartbeat=sa.func.now()
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["worker_id"],
                    set_={"session": self.session, "url": url, "heartbeat": sa.func.now()},
                )
            )

    def _refuse_live_twin(self, conn: Any, worker_id: str, timeout_ms: int, *, lock: bool) -> None:
        query = sa.select(
            _MEMBERS.c.session,
            sa.func.extract("epoch", sa.func.now() - _MEMBERS.c.heartbeat),
        ).where(_MEMBERS.c.worker_id == worker_id)
        row = conn.execute(query.with_for_update() if lock else query).first()
        if row is not None and row[0] != self.session and float(row[1]) * 1000 < timeout_ms:
            raise ConfigException(
                "workerId",
                f"{worker_id!r} is already used by a live worker of cluster "
                f"{self.cluster_name!r} (heartbeat {float(row[1]):.1f} s ago)",
                suggestion="give every worker its own workerId",
            )

    def heartbeat(self, worker_id: str) -> bool:
        """Renew this worker's heartbeat; False if its row is gone or another session's."""
        with self.engine.begin() as conn:
            done = conn.execute(
                _MEMBERS.update()
                .where(_MEMBERS.c.worker_id == worker_id, _MEMBERS.c.session == self.session)
                .values(heartbeat=sa.func.now())
            )
            return done.rowcount == 1

    def live_workers(self, timeout_ms: int) -> dict[str, str]:
        """`{worker_id: REST url}` of the workers whose heartbeat is recent enough."""
        cutoff = sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, timeout_ms / 1000)
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(_MEMBERS.c.worker_id, _MEMBERS.c.url).where(_MEMBERS.c.heartbeat > cutoff)
            ).all()
        return {worker: url for worker, url in sorted(rows)}

    def leave(self, worker_id: str) -> None:
        """Remove this worker's row (a clean shutdown: the others rebalance at once)."""
        with self.engine.begin() as conn:
            conn.execute(
                _MEMBERS.delete().where(
                    _MEMBERS.c.worker_id == worker_id, _MEMBERS.c.session == self.session
                )
            )

    # -- leases -----------------------------------------------------------------------------------
    def leases(self) -> dict[str, Lease]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(_LEASES)).all()
        return {r.connector: Lease(r.connector, r.worker_id, r.session, r.generation) for r in rows}

    def acquire(self, connector: str, worker_id: str, live: set[str]) -> int | None:
        """Take the connector's lease for this worker; the new generation, or None if a live
        worker still holds it (it releases when it sees the connector moved)."""
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(_LEASES).where(_LEASES.c.connector == connector).with_for_update()
            ).first()
            if row is None:
                conn.execute(
                    pg_insert(_LEASES)
                    .values(connector=connector, worker_id=None, session=None, generation=0)
                    .on_conflict_do_nothing()
                )
                row = conn.execute(
                    sa.select(_LEASES).where(_LEASES.c.connector == connector).with_for_update()
                ).first()
            holder_alive = row.worker_id is not None and row.worker_id in live
            if row.worker_id == worker_id and row.session == self.session:
                return int(row.generation)
            if holder_alive and row.worker_id != worker_id:
                return None
            generation = int(row.generation) + 1
            conn.execute(
                _LEASES.update()
                .where(_LEASES.c.connector == connector)
                .values(worker_id=worker_id, session=self.session, generation=generation)
            )
            return generation

    def release(self, connector: str, generation: int) -> None:
        """Give the lease up (the query is stopped); a no-op if it was taken meanwhile."""
        with self.engine.begin() as conn:
            conn.execute(
                _LEASES.update()
                .where(
                    _LEASES.c.connector == connector,
                    _LEASES.c.generation == generation,
                    _LEASES.c.session == self.session,
                )
                .values(worker_id=None, session=None)
            )

    def holds(self, connector: str, generation: int) -> bool:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(_LEASES.c.session, _LEASES.c.generation).where(
                    _LEASES.c.connector == connector
                )
            ).first()
        return row is not None and row[0] == self.session and row[1] == generation

    def close(self) -> None:
        self.engine.dispose()


class PgConfigStore:
    """The config store (`sluice.store.configs.ConfigStore`) in PostgreSQL."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._reported: set[tuple[str, float]] = set()

    def names(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(_CONNECTORS.c.name).order_by("name"))]

    def _parse(self, row: Any) -> StoredConnector | None:
        """A row as a StoredConnector; a malformed row is logged (naming it) and skipped."""
        try:
            config = json.loads(row.config)
            tasks = json.loads(row.task_configs)
            if not isinstance(config, dict) or not isinstance(tasks, list):
                raise ValueError("config must be a JSON object and task_configs a JSON array")
            if row.target_state not in TARGET_STATES:
                raise ValueError(f"target_state {row.target_state!r} is not a target state")
        except ValueError as exc:
            if (row.name, row.updated_at) not in self._reported:  # once, not every round
                self._reported.add((row.name, row.updated_at))
                log.error(
                    "cluster store: connector row %r is malformed (%s); ignored until fixed",
                    row.name,
                    exc,
                )
            return None
        return StoredConnector(
            row.name, {str(k): str(v) for k, v in config.items()}, row.target_state, tasks
        )

    def get(self, name: str) -> StoredConnector | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(_CONNECTORS).where(_CONNECTORS.c.name == name)).first()
        return None if row is None else self._parse(row)

    def all(self) -> list[StoredConnector]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(_CONNECTORS).order_by(_CONNECTORS.c.name)).all()
        return [c for c in map(self._parse, rows) if c is not None]

    def put(self, name: str, config: dict[str, str], target_state: str = "STARTED") -> None:
        if target_state not in TARGET_STATES:
            raise ValueError(f"target state {target_state!r} is not a target state")
        values = {
            "config": json.dumps(config, sort_keys=True),
            "target_state": target_state,
            "task_configs": "[]",
            "updated_at": time.time(),
        }
        stmt = pg_insert(_CONNECTORS).values(name=name, **values)
        with self.engine.begin() as conn:
            conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=values))

    def set_target_state(self, name: str, target_state: str) -> None:
        if target_state not in TARGET_STATES:
            raise ValueError(f"target state {target_state!r} is not a target state")
        self._update(name, target_state=target_state)

    def set_task_configs(self, name: str, task_configs: list[dict[str, str]]) -> None:
        self._update(name, task_configs=json.dumps(task_configs, sort_keys=True))

    def _update(self, name: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                _CONNECTORS.update()
                .where(_CONNECTORS.c.name == name)
                .values(updated_at=time.time(), **values)
            )

    def delete(self, name: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(_CONNECTORS.delete().where(_CONNECTORS.c.name == name))


class PgStatusStore:
    """The status store (`sluice.store.statuses.StatusStore`) in PostgreSQL."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def put(
        self,
        connector: str,
        state: str,
        worker_id: str,
        *,
        trace: str | None = None,
        tasks: int = 0,
        task_state: str | None = None,
    ) -> None:
        rows = [
            dict(zip(STATUS_COLUMNS, row, strict=True))
            for row in status_rows(connector, state, worker_id, trace, tasks, task_state)
        ]
        with self.engine.begin() as conn:
            # one writer per connector at a time: two puts (a REST create and the owner's round)
            # would otherwise both delete nothing and then insert the same keys
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(connector))))
            conn.execute(_STATUSES.delete().where(_STATUSES.c.connector == connector))
            conn.execute(_STATUSES.insert(), rows)

    def get(self, connector: str) -> tuple[Status | None, list[Status]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(_STATUSES)
                .where(_STATUSES.c.connector == connector)
                .order_by(_STATUSES.c.task)
            ).all()
        return split_statuses((r.task, r.state, r.trace, r.worker_id) for r in rows)

    def all(self) -> dict[str, tuple[Status | None, list[Status]]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(_STATUSES).order_by(_STATUSES.c.connector, _STATUSES.c.task)
            ).all()
        return split_all_statuses(
            (r.connector, r.task, r.state, r.trace, r.worker_id) for r in rows
        )

    def delete(self, connector: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(_STATUSES.delete().where(_STATUSES.c.connector == connector))
