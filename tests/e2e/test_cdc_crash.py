"""kill -9 a process mirroring PostgreSQL → topic → MariaDB by change data capture, while a
workload runs; restart; the mirror is exact and the topic holds each change event exactly once.

The child (`cdc_child.py`) runs `PostgresCdcSourceConnector` (small micro-batches) and the JDBC
sink applying its change events. A writer thread commits transactions of inserts, updates and
deletes on PostgreSQL throughout, counting the rows each statement changed (one change event
each). The child is killed with its whole process group once a random number of rows reached
MariaDB (while changes are still streaming), then started again. Afterwards MariaDB equals
PostgreSQL row for row, and the topic holds exactly as many records as the workload made changes:
a lost one would leave the tables unequal or the count short, a doubled one the count high (the
upsert would hide it at the target). The same worker snapshots a second table meanwhile, and the
kill lands during that snapshot too (see the test's docstring for what is checked there).
`SLUICE_CRASH_SEED` fixes the random seed; `SLUICE_CDC_KILLS=5` kills five times (`make
crash-cdc` runs that).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from sluice.bus.embedded import EmbeddedLog
from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.e2e.test_jdbc_crash import kill9, topic_records
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_postgres import check_handover

# more than the default 300 s on a loaded 2-core machine: kill -9 and restarts of a CDC worker
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

CHILD = Path(__file__).with_name("cdc_child.py")
TRANSACTIONS = 400
PREFILLED = 4000  # rows of the snapshotted table


class Workload(threading.Thread):
    """Transactions of 10 inserts, 5 updates and 2 deletes on `items`, counting change events;
    with `prefilled` rows (ids 1…prefilled, below `base`), each transaction also updates one of
    them (the ids it touched are in `touched`)."""

    def __init__(
        self,
        db: Db,
        pause: float,
        *,
        base: int = 0,
        prefilled: int = 0,
        transactions: int = TRANSACTIONS,
        table: str = "items",
    ) -> None:
        super().__init__(daemon=True)
        self.transactions, self.table = transactions, table
        self.db, self.pause, self.events, self.done, self.error = db, pause, 0, 0, None
        self.base, self.prefilled = base, prefilled
        self.touched: set[int] = set()
        self.stopped = threading.Event()

    def run(self) -> None:
        items = self.db.table(self.table)
        try:
            for b in range(self.transactions):
                with self.db.engine.begin() as conn:
                    if self.prefilled:
                        old = b * 37 % self.prefilled + 1
                        conn.exec_driver_sql(
                            f"UPDATE {items} SET name = CONCAT(name, '*'), n = n + 1 WHERE id = %s",
                            (old,),
                        )
                        self.touched.add(old)
                    rows = [(self.base + b * 10 + i, f"n{b}-{i}", b) for i in range(10)]
                    for row in rows:
                        r = conn.exec_driver_sql(f"INSERT INTO {items} VALUES (%s, %s, %s)", row)
                        self.events += r.rowcount
                    low = self.base + (b - 1) * 10
                    r = conn.exec_driver_sql(
                        f"UPDATE {items} SET name = CONCAT(name, '+'), n = n + 1 "
                        "WHERE id >= %s AND id < %s",
                        (low, low + 5),
                    )
                    self.events += r.rowcount
                    r = conn.exec_driver_sql(
                        f"DELETE FROM {items} WHERE id IN (%s, %s)", (low + 8, low + 9)
                    )
                    self.events += r.rowcount
                self.done = b + 1
                if self.stopped.wait(self.pause):  # a steady trickle, so kills land mid-stream
                    return
        except Exception as exc:  # reported by the test
            self.error = exc


def test_kill_9_while_capturing_keeps_the_mirror_exact(tmp_path: Path, pg: Db, my: Db) -> None:
    """One worker process runs two mirrors: `items` streaming (`snapshot.mode=never`) and
    `snap`, 4,000 rows snapshotted (500 a micro-batch, two Spark partitions each) while a
    workload inserts above them and updates them. It is killed with `kill -9` while `items`
    streams and `snap`'s snapshot runs (`SLUICE_CDC_KILLS` times, 1 by default, later each
    time), and started again. Afterwards both MariaDB tables equal PostgreSQL's; `items`' topic
    holds exactly one record per change; in `snap`'s, no row was read twice (`op='r'`), every row
    the workload never touched was read once, and no change is there twice or also in a read."""
    slot = f"sluice_crash_{uuid.uuid4().hex[:8]}"
    columns = "(id INT PRIMARY KEY, name TEXT NOT NULL, n INT)"
    for name in ("items", "snap"):
        pg.execute(f"CREATE TABLE {pg.table(name)} {columns}")
        my.execute(f"CREATE TABLE {my.table(name)} {columns} CHARSET utf8mb4")
    pg.executemany(
        f"INSERT INTO {pg.table('snap')} VALUES (%s, %s, %s)",
        [(i, f"row{i}", i) for i in range(1, PREFILLED + 1)],
    )
    rng = random.Random(int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns())))
    kills = int(os.environ.get("SLUICE_CDC_KILLS", "1"))
    root, log = tmp_path / "store", tmp_path / "child.log"
    table, snap = f"{pg.namespace}.items", f"{pg.namespace}.snap"

    def child():
        return start_child_cdc(root, log, pg, my, table, slot, snap, f"{slot}_snap")

    proc = child()
    workload = Workload(pg, pause=0.02)
    snap_load = Workload(
        pg, pause=0.05, base=1_000_000, prefilled=PREFILLED, transactions=150, table="snap"
    )
    try:
        wait_until(lambda: b"RUNNING" in _read(log) or proc.poll() is not None, 180, "child up")
        assert proc.poll() is None, f"child exited early:\n{_read(log)[-4000:].decode()}"
        workload.start()
        snap_load.start()
        for k in range(kills):
            # Once the mirrors caught a random amount: the sources committed micro-batches
            # (and advanced their slots), more are in flight, the snapshot is under way.
            # a restarted child is up again first: the kill lands while it runs, not as it starts
            wait_until(
                lambda k=k, p=proc: _read(log).count(b"RUNNING") > k or p.poll() is not None,
                180,
                "child up again",
            )
            threshold = rng.randrange(100 + k * 1500 // kills, 100 + (k + 1) * 1500 // kills)
            chunked = rng.randrange(200 + k * 1800 // kills, 200 + (k + 1) * 1800 // kills)
            wait_until(
                lambda t=threshold, c=chunked, p=proc: (
                    _count(my) >= t or _count(my, "snap") >= c or p.poll() is not None
                ),
                300,
                f"{threshold} rows mirrored",
                every=0.05,
            )
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            kill9(proc)
            print(
                f"kill {k + 1}: {_count(my)} rows mirrored, {workload.done}/{TRANSACTIONS} "
                f"transactions written; snapshot mirror at {_count(my, 'snap')} rows"
            )
            proc = child()
        for load in (workload, snap_load):
            load.join(300)
            assert load.error is None, load.error
        assert workload.done == TRANSACTIONS

        def same() -> bool:
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            return _rows(my) == _rows(pg) and _rows(my, "snap") == _rows(pg, "snap")

        try:
            wait_until(same, 300, "MariaDB equal to PostgreSQL", every=0.5)
        except AssertionError:
            raise AssertionError(
                f"{len(_rows(pg))} rows in PostgreSQL, {len(_rows(my))} in MariaDB, "
                f"{topic_records(root, f'cdc.{table}')} records in the topic of "
                f"{workload.events} changes; child:\n{_read(log)[-3000:].decode()}"
            ) from None
        published = topic_records(root, f"cdc.{table}")
        print(f"{workload.events} changes, {published} records in the topic")
        assert published == workload.events
        events = [json.loads(v)["payload"] for v in topic_values(root, f"cdc.{snap}")]
        reads = check_handover(events)
        untouched = set(range(1, PREFILLED + 1)) - snap_load.touched
        assert untouched <= reads, sorted(untouched - reads)[:5]
    finally:
        for load in (workload, snap_load):
            load.stopped.set()  # a failed test does not leave the writers running
        if proc.poll() is None:
            kill9(proc)
        _drop_slot(pg, slot)
        _drop_slot(pg, f"{slot}_snap")


def topic_values(root: Path, topic: str) -> list[bytes]:
    """Every value in `topic` of the child's embedded bus."""
    log = EmbeddedLog(root / "bus")
    try:
        return [
            value
            for queue, r in sorted(log.offsets(topic).items())
            for _, batch in log.read(topic, queue, r.min_offset, r.max_offset)
            for value in batch.column("value").to_pylist()
        ]
    finally:
        log.close()


def _drop_slot(pg: Db, slot: str) -> None:
    pg.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND NOT active",
        (slot,),
    )
    pg.execute(f'DROP PUBLICATION IF EXISTS "{slot}"')


def start_child_cdc(
    root: Path, log: Path, source: Db, target: Db, table: str, slot: str, *snap: str
):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return spawn(
        [
            sys.executable,
            str(CHILD),
            str(root),
            source.jdbc_url,
            target.jdbc_url,
            table,
            slot,
            *snap,
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _read(log: Path) -> bytes:
    return log.read_bytes() if log.exists() else b""


def _count(d: Db, table: str = "items") -> int:
    return int(d.scalar(f"SELECT COUNT(*) FROM {d.table(table)}"))


def _rows(d: Db, table: str = "items") -> list[tuple]:
    return d.rows(f"SELECT id, name, n FROM {d.table(table)} ORDER BY id")
