"""A CDC mirror through a real worker process, with a writer, schema changes and kill -9: the
round `tests/e2e/test_cdc_mirror.py` runs once in the suite and `crash_cdc_mirror.py` many times
(`make crash-cdc`).

A round: a source table (`items`, prefilled so the snapshot has work) captured by a CDC source
(`snapshot.mode=initial`, Avro, small micro-batches) and mirrored into the other database by the
JDBC sink (upsert by the record key, deletes, `auto.create`, `auto.evolve`), both created over
REST on a worker process of the round's own. A writer commits transactions of inserts, updates,
primary-key changes and deletes, and rolls back some, counting the change events its committed
statements made. Schema changes land on the source table while the writer runs — some while the
worker runs (the source restarts itself to follow, and re-reads the table for a column with a
default), some while it is down after a kill -9 (the restarted source must treat them as if it
had been running). At the end the target equals the source row for row, new columns included,
and the topic holds each change event exactly once (`op` c/u/d counted against the writer's
count; `op='r'` snapshot reads are not change events).
"""

from __future__ import annotations

import io
import json
import random
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.converters._avro import avro_schema
from sluice.converters._schemas import from_connect
from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.e2e.topics import topic_rows
from tests.e2e.worker_process import WorkerProcess
from tests.integration.jdbc_db import MY_HOST, PG_HOST, Db

#: the schema changes a round makes, in order: (column, MariaDB type, PostgreSQL type, value the
#: writer sets after it exists)
DDL = [
    ("note", "VARCHAR(40) NULL", "TEXT NULL", "noted"),
    ("qty", "INT NOT NULL DEFAULT 7", "INT NOT NULL DEFAULT 7", 3),
    ("tag", "VARCHAR(10) NULL", "VARCHAR(10) NULL", "t"),
    ("flag", "INT NOT NULL DEFAULT 1", "INT NOT NULL DEFAULT 1", 0),
]
BASE = ["id", "name", "n"]


class MirrorWriter(threading.Thread):
    """Transactions on the source's `items` until `transactions` are committed: inserts, updates
    (of the columns that exist), a primary-key change, a delete; every sixth is rolled back.
    `events` counts the change events of the committed statements (a key change is two: the old
    key's delete and the new key's create)."""

    def __init__(self, db: Db, ids: set[int], transactions: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.db, self.ids, self.transactions = db, set(ids), transactions
        self.rng = random.Random(seed)
        self.next_id = max(ids, default=0) + 1_000
        self.columns: dict[str, Any] = {}  # added columns the updates set, with their value
        self.events = self.done = self.rolled_back = 0
        self.error: BaseException | None = None
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # held per transaction: a DDL waits for a clean moment

    def run(self) -> None:
        try:
            attempt = 0
            while self.done < self.transactions and not self.stopped.is_set():
                attempt += 1
                with self.lock:
                    self._transaction(rollback=attempt % 6 == 0)
                self.stopped.wait(0.03)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _transaction(self, *, rollback: bool) -> None:
        items = self.db.table("items")
        ids, events = set(self.ids), 0
        with self.db.engine.connect() as conn:
            tx = conn.begin()
            for _ in range(4):
                new = self.next_id
                self.next_id += 1
                conn.exec_driver_sql(
                    f"INSERT INTO {items} (id, name, n) VALUES (%s, %s, %s)", (new, f"r{new}", 0)
                )
                ids.add(new)
                events += 1
            sets = ["name = CONCAT(name, '+')", "n = n + 1"]
            params: list[Any] = []
            for column, value in self.columns.items():
                sets.append(f"{column} = %s")
                params.append(value)
            for old in self.rng.sample(sorted(ids), min(3, len(ids))):
                r = conn.exec_driver_sql(
                    f"UPDATE {items} SET {', '.join(sets)} WHERE id = %s", (*params, old)
                )
                events += r.rowcount
            if ids and self.rng.random() < 0.5:
                old = self.rng.choice(sorted(ids))
                new = self.next_id
                self.next_id += 1
                r = conn.exec_driver_sql(f"UPDATE {items} SET id = %s WHERE id = %s", (new, old))
                if r.rowcount:
                    ids.discard(old)
                    ids.add(new)
                    events += 2 * r.rowcount
            if ids:
                gone = self.rng.choice(sorted(ids))
                r = conn.exec_driver_sql(f"DELETE FROM {items} WHERE id = %s", (gone,))
                ids.discard(gone)
                events += r.rowcount
            if rollback:
                tx.rollback()
                self.rolled_back += 1
                return
            tx.commit()
        self.ids, self.events, self.done = ids, self.events + events, self.done + 1


@dataclass
class Round:
    """One mirror round: `source` → topic → `target` on a worker process under `tmp`.
    `down` lists which of `DDL`'s changes land while the worker is down (the others while it
    runs)."""

    tmp: Path
    source: Db
    target: Db
    down: frozenset[str] = frozenset({"tag", "flag"})
    seed: int = 0
    prefill: int = 800
    transactions: int = 150
    kills: int = 1
    #: the kills anywhere among the changes made while the worker runs (else after them)
    shuffle: bool = False
    worker: WorkerProcess | None = None
    prefix: str = field(default_factory=lambda: f"m{uuid.uuid4().hex[:6]}")
    log: list[str] = field(default_factory=list)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.{self.source.namespace}.items"

    @property
    def store(self) -> Path:
        return self.tmp / "store"

    def _source_config(self) -> dict[str, str]:
        common = {
            "connection.user": "root",
            "topic.prefix": self.prefix,
            "table.include.list": f"{self.source.namespace}.items",
            "value.converter": "AvroConverter",
            "snapshot.mode": "initial",
            "read.max.rows": "100",  # many micro-batches: kills land inside the (re-)snapshot
        }
        if self.source.dialect == "postgresql":
            return {
                **common,
                "connector.class": "PostgresCdcSourceConnector",
                "connection.url": f"jdbc:postgresql://{PG_HOST}/test",
                "slot.name": self.slot,
                "publication.name": self.slot,
            }
        return {
            **common,
            "connector.class": "MySqlCdcSourceConnector",
            "connection.url": f"jdbc:mysql://{MY_HOST}/{self.source.namespace}",
            "database.server.id": str(20_000 + self.seed % 10_000),
        }

    def _sink_config(self) -> dict[str, str]:
        if self.target.dialect == "postgresql":
            url = f"jdbc:postgresql://{PG_HOST}/test?currentSchema={self.target.namespace}"
        else:
            url = f"jdbc:mysql://{MY_HOST}/{self.target.namespace}"
        return {
            "connector.class": "JdbcSinkConnector",
            "connection.url": url,
            "connection.user": "root",
            "connect.topicnames": self.topic,
            "table.name.format": "items",
            "value.converter": "AvroConverter",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "auto.create": "true",
            "auto.evolve": "true",
        }

    @property
    def slot(self) -> str:
        return f"sluice_{self.prefix}"

    # -- the round ---------------------------------------------------------------------------
    def run(self) -> None:
        src = self.source
        name_type = "VARCHAR(200)" if src.dialect == "mysql" else "TEXT"
        charset = " CHARSET utf8mb4" if src.dialect == "mysql" else ""
        src.execute(
            f"CREATE TABLE {src.table('items')} (id INT PRIMARY KEY, name {name_type} NOT NULL, "
            f"n INT){charset}"
        )
        src.executemany(
            f"INSERT INTO {src.table('items')} VALUES (%s, %s, %s)",
            [(i, f"row{i}", i) for i in range(1, self.prefill + 1)],
        )
        rng = random.Random(self.seed)
        writer = MirrorWriter(src, set(range(1, self.prefill + 1)), self.transactions, self.seed)
        self.worker = WorkerProcess(self.tmp)
        self._boot()
        try:
            self._post("src", self._source_config())
            self._post("sink", self._sink_config())
            # the snapshot under way: the writer's changes land before, inside and after chunks
            wait_until(lambda: self._count() >= 100, 300, "the first snapshot rows mirrored")
            writer.start()
            self._round(writer, rng)
            writer.join(600)
            assert writer.error is None, writer.error
            assert writer.done == self.transactions
            self._await_mirror(writer)
            self._check_topic(writer)
        finally:
            writer.stopped.set()
            if self.worker.proc is not None and self.worker.proc.poll() is None:
                self.worker.kill9()
            if src.dialect == "postgresql":
                drop_slot(src, self.slot)

    def _round(self, writer: MirrorWriter, rng: random.Random) -> None:
        """The schema changes and the kills over the first two thirds of the writer's
        transactions (the rest come after the last restart, while any re-read runs): the
        changes made while the worker runs in `DDL`'s order, each kill at a random point after
        them (`shuffle`: anywhere among them), the others while the worker is down after the
        first kill."""
        running = [d for d in DDL if d[0] not in self.down]
        down = [d for d in DDL if d[0] in self.down]
        plan = [("ddl", d) for d in running] + [("kill", None)] * self.kills
        if self.shuffle:
            rng.shuffle(plan)
        at = sorted(rng.sample(range(5, self.transactions * 2 // 3), len(plan)))
        for (kind, ddl), when in zip(plan, at, strict=True):
            wait_until(lambda w=when: writer.done >= w or writer.error, 300, f"{when} transactions")
            assert writer.error is None, writer.error
            self._alive()
            if kind == "ddl":
                self._alter(writer, ddl)
                continue
            self.worker.kill9()
            self.log.append(f"kill at {writer.done} transactions, {self._count()} rows mirrored")
            for ddl in down:  # the changes in the stopped worker's backlog
                wait_until(lambda w=writer.done: writer.done >= w + 2, 120, "writes meanwhile")
                self._alter(writer, ddl)
            down = []
            self._boot()
        for ddl in down:  # no kill (a round without kills)
            self._alter(writer, ddl)

    def _alter(self, writer: MirrorWriter, ddl: tuple[str, str, str, Any]) -> None:
        column, my_type, pg_type, value = ddl
        kind = my_type if self.source.dialect == "mysql" else pg_type
        with writer.lock:
            self.source.execute(
                f"ALTER TABLE {self.source.table('items')} ADD COLUMN {column} {kind}"
            )
            writer.columns[column] = value
        self.log.append(f"ADD COLUMN {column} {kind} at {writer.done} transactions")

    def _boot(self) -> None:
        # A loaded machine boots a worker (a JVM, a Spark session, its connectors) slowly.
        self.worker.wait_boot(self.worker.launch(), timeout=600)

    # -- checks ------------------------------------------------------------------------------
    def _post(self, name: str, config: dict[str, str]) -> None:
        response = self.worker.request(
            "POST", f"/connectors/{self.prefix}-{name}", content=json.dumps(config)
        )
        assert response.status_code == 200, response.text

    def _alive(self) -> None:
        """Neither connector FAILED (the trace's head otherwise)."""
        for name in ("src", "sink"):
            status = self.worker.request("GET", f"/v1/connectors/{self.prefix}-{name}/status")
            connector = status.json()["connector"]
            assert connector["state"] != "FAILED", f"{name}: {connector['trace'][:3000]}"

    def _count(self) -> int:
        try:
            return int(self.target.scalar(f"SELECT COUNT(*) FROM {self.target.table('items')}"))
        except Exception:  # not created yet
            return 0

    def columns(self) -> list[str]:
        return BASE + [d[0] for d in DDL]

    def rows(self, db: Db) -> list[tuple]:
        cols = ", ".join(self.columns())
        return db.rows(f"SELECT {cols} FROM {db.table('items')} ORDER BY id")

    def _await_mirror(self, writer: MirrorWriter) -> None:
        def same() -> bool:
            self._alive()
            try:
                return self.rows(self.target) == self.rows(self.source)
            except Exception:  # the sink has not evolved the table yet
                return False

        try:
            wait_until(same, 300, "the target equal to the source", every=1.0)
        except AssertionError:
            want, have = self.rows(self.source), self.rows(self.target)
            mine = {r[0]: r for r in want}
            theirs = {r[0]: r for r in have}
            diff = [
                (mine.get(k), theirs.get(k))
                for k in sorted(set(mine) | set(theirs))
                if mine.get(k) != theirs.get(k)
            ]
            raise AssertionError(
                f"{len(want)} rows in the source, {len(have)} in the target, {len(diff)} differ, "
                f"e.g. {diff[:4]}; round: {self.log}"
            ) from None

    def _check_topic(self, writer: MirrorWriter) -> None:
        ops = topic_ops(self.store, self.topic)
        changes = sum(n for op, n in ops.items() if op != "r")
        assert changes == writer.events, (ops, writer.events, self.log)


def topic_ops(store: Path, topic: str) -> dict[str, int]:
    """How many records of each `op` `topic` holds (Avro values decoded with the registry)."""
    import fastavro

    registry = SqliteSchemaRegistry(str(store / "schemas.sqlite"))
    parsed: dict[int, Any] = {}
    ops: dict[str, int] = {}
    for row in topic_rows(store, topic):
        value = row["value"]
        schema_id = int.from_bytes(value[1:5], "big")
        if schema_id not in parsed:
            schema = from_connect(json.loads(registry.by_id(schema_id)))
            parsed[schema_id] = fastavro.parse_schema(avro_schema(schema))
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed[schema_id])
        ops[record["op"]] = ops.get(record["op"], 0) + 1
    return ops


def drop_slot(pg: Db, slot: str) -> None:
    pg.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND NOT active",
        (slot,),
    )
    pg.execute(f'DROP PUBLICATION IF EXISTS "{slot}"')
