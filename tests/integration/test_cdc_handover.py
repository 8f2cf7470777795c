"""The snapshot's handover to the log and schema changes, on both databases, driven as the
runtime drives a task (no Spark: `latest`, `split` into two sub-ranges, `read` of each, the
records applied to a target by key as the JDBC sink applies them).

A writer commits transactions of inserts, updates, primary-key changes and deletes (and rolls
some back) before each range is planned (their events fall in the log part, before the chunk's
low watermark) and after it (inside the chunk's window), across the whole key range, so changes
land before, inside and after each chunk's window, on rows read and not yet read. Meanwhile
`ADD COLUMN … NULL` and `ADD COLUMN … NOT NULL DEFAULT` land while the task runs (it asks for a
restart; a new connector and task go on from the last position) and while it is stopped (the
next task starts from a position planned before them). At the end the target equals the table
row for row, new columns included, and the change events (`op` c/u/d) are exactly the writer's.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.connectors.cdc._evolve import SchemaChanged
from sluice.sdk import ReadLimit
from tests.e2e.cdc_mirror import DDL, MirrorWriter
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_evolve import _task
from tests.integration.test_cdc_mysql import _source as my_source
from tests.integration.test_cdc_mysql import row_metadata  # noqa: F401  (fixture)
from tests.integration.test_cdc_postgres import _source as pg_source
from tests.integration.test_cdc_postgres import slot  # noqa: F401  (fixture)

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures
PREFILL = 300
LIMIT = ReadLimit(max_rows=60)


class Mirror:
    """A CDC task driven by hand, its records applied to `target` (id → row)."""

    def __init__(self, cls: type, config: dict[str, str], db: Db) -> None:
        self.cls, self.config, self.db = cls, config, db
        self.connector, self.task = _task(cls, config)
        (self.partition,) = self.task.partitions()
        self.position: Any = None
        self.target: dict[int, dict] = {}
        self.ops: dict[str, int] = {}
        self.restarts = 0

    def restart(self) -> None:
        """A new connector and task (a restart, or a kill -9 and a new worker), from the last
        position."""
        self.task.stop()
        self.connector, self.task = _task(self.cls, self.config)
        self.restarts += 1

    def step(self, between: Any = None) -> bool:
        """Plan one range and read it; `between()` runs after planning, before reading. False
        if nothing was planned."""
        try:
            end = self.task.latest(self.partition, self.position, LIMIT)
        except SchemaChanged:
            self.restart()  # the runtime restarts the connector at once
            return True
        if between is not None:
            between()
        if end is None or end == self.position:
            return False
        cuts = self.task.split(self.partition, self.position, end, 2)
        for low, high in itertools.pairwise([self.position, *cuts, end]):
            for record in jdbc_db.task_records(self.task.read(self.partition, low, high)):
                self._apply(record.value)
        self.position = end
        return True

    def _apply(self, value: dict) -> None:
        op = value["op"]
        self.ops[op] = self.ops.get(op, 0) + 1
        if op == "d":
            self.target.pop(value["before"]["id"], None)
        else:
            self.target[value["after"]["id"]] = value["after"]

    def rows(self, columns: list[str]) -> list[tuple]:
        return [tuple(r.get(c) for c in columns) for _, r in sorted(self.target.items())]


def _flushed(d: Db) -> None:
    """The WAL written so far flushed (decoding reads flushed WAL only, and the test server
    commits asynchronously): a transaction committed synchronously flushes everything before."""
    if d.dialect == "postgresql":
        with d.engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL synchronous_commit = on")
            conn.exec_driver_sql("SELECT pg_logical_emit_message(true, 'test', '')")


def _handover(d: Db, config: dict[str, str], cls: type, seed: int) -> None:
    items = d.table("items")
    name = "VARCHAR(200)" if d.dialect == "mysql" else "TEXT"
    d.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name {name} NOT NULL, n INT)")
    d.executemany(
        f"INSERT INTO {items} VALUES (%s, %s, %s)", [(i, f"row{i}", i) for i in range(1, 301)]
    )
    writer = MirrorWriter(d, set(range(1, PREFILL + 1)), 10_000, seed)
    rng = random.Random(seed)

    def write() -> None:
        writer._transaction(rollback=rng.random() < 0.15)

    def alter(column: str) -> None:
        _, my_type, pg_type, value = next(x for x in DDL if x[0] == column)
        kind = my_type if d.dialect == "mysql" else pg_type
        d.execute(f"ALTER TABLE {items} ADD COLUMN {column} {kind}")
        writer.columns[column] = value

    mirror = Mirror(cls, config, d)
    for step in range(40):
        write()  # before planning: in the log part of the range
        if step == 4:
            alter("note")  # while running: a restart
        if step == 8:
            alter("qty")  # while running, with a default: a restart, then a re-read
        if step == 18:  # a stop (a kill -9): two changes land meanwhile
            alter("tag")
            write()
            alter("flag")
            mirror.restart()
        _flushed(d)
        mirror.step(between=write)  # after planning: inside the range's chunk window
    for _ in range(200):  # the rest of the log and of the snapshots
        _flushed(d)
        state = mirror.position.get("snapshot")
        if not mirror.step() and state is None:
            break
    columns = ["id", "name", "n", *[c for c, *_ in DDL]]
    want = d.rows(f"SELECT {', '.join(columns)} FROM {items} ORDER BY id")
    have = mirror.rows(columns)
    diff = [(a, b) for a, b in zip(want, have, strict=False) if a != b]
    assert have == want, (len(want), len(have), diff[:3], mirror.ops)
    changes = sum(n for op, n in mirror.ops.items() if op != "r")
    assert changes == writer.events, (mirror.ops, writer.events)
    assert mirror.restarts >= 3 and writer.rolled_back >= 1, (mirror.restarts, writer.rolled_back)
    assert json.dumps(mirror.position)  # a position is plain JSON


def test_mariadb_snapshot_handover_through_schema_changes_and_stops(
    my: Db,
    row_metadata,  # noqa: F811
) -> None:
    config = my_source(my, **{"snapshot.mode": "initial"})
    _handover(my, config, MySqlCdcSourceConnector, seed=11)


def test_postgresql_snapshot_handover_through_schema_changes_and_stops(
    pg: Db,
    slot: str,  # noqa: F811
) -> None:
    config = pg_source(pg, slot, **{"snapshot.mode": "initial"})
    _handover(pg, config, PostgresCdcSourceConnector, seed=12)
