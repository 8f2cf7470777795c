"""kill -9 a process mirroring PostgreSQL → topic → MariaDB by change data capture, while a
workload runs; restart; the mirror is exact and the topic holds each change event exactly once.

The child (`cdc_child.py`) runs `PostgresCdcSourceConnector` (small micro-batches) and the JDBC
sink applying its change events. A writer thread commits transactions of inserts, updates and
deletes on PostgreSQL throughout, counting the rows each statement changed (one change event
each). The child is killed with its whole process group once a random number of rows reached
MariaDB (while changes are still streaming), then started again. Afterwards MariaDB equals
PostgreSQL row for row, and the topic holds exactly as many records as the workload made changes:
a lost one would leave the tables unequal or the count short, a doubled one the count high (the
upsert would hide it at the target).
`SLUICE_CRASH_SEED` fixes the random seed.
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
from tests.e2e.test_jdbc_crash import kill9, topic_records
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_postgres import check_handover

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

CHILD = Path(__file__).with_name("cdc_child.py")
TRANSACTIONS = 400


class Workload(threading.Thread):
    """Transactions of 10 inserts, 5 updates and 2 deletes on `items`, counting change events;
    with `prefilled` rows (ids 1…prefilled, below `base`), each transaction also updates one of
    them (the ids it touched are in `touched`)."""

    def __init__(
        self,
        pg: Db,
        pause: float,
        *,
        base: int = 0,
        prefilled: int = 0,
        transactions: int = TRANSACTIONS,
    ) -> None:
        super().__init__(daemon=True)
        self.transactions = transactions
        self.pg, self.pause, self.events, self.done, self.error = pg, pause, 0, 0, None
        self.base, self.prefilled = base, prefilled
        self.touched: set[int] = set()
        self.stopped = threading.Event()

    def run(self) -> None:
        items = self.pg.table("items")
        try:
            for b in range(self.transactions):
                with self.pg.engine.begin() as conn:
                    if self.prefilled:
                        old = b * 37 % self.prefilled + 1
                        conn.exec_driver_sql(
                            f"UPDATE {items} SET name = name || '*', n = n + 1 WHERE id = %s",
                            (old,),
                        )
                        self.touched.add(old)
                    rows = [(self.base + b * 10 + i, f"n{b}-{i}", b) for i in range(10)]
                    for row in rows:
                        r = conn.exec_driver_sql(f"INSERT INTO {items} VALUES (%s, %s, %s)", row)
                        self.events += r.rowcount
                    low = self.base + (b - 1) * 10
                    r = conn.exec_driver_sql(
                        f"UPDATE {items} SET name = name || '+', n = n + 1 "
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
    slot = f"sluice_crash_{uuid.uuid4().hex[:8]}"
    pg.execute(f"CREATE TABLE {pg.table('items')} (id INT PRIMARY KEY, name TEXT NOT NULL, n INT)")
    my.execute(
        f"CREATE TABLE {my.table('items')} (id INT PRIMARY KEY, name TEXT NOT NULL, n INT) "
        "CHARSET utf8mb4"
    )
    rng = random.Random(int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns())))
    root, log = tmp_path / "store", tmp_path / "child.log"
    table = f"{pg.namespace}.items"
    args = (pg, my, table)

    def child():
        return start_child_cdc(root, log, *args, slot)

    proc = child()
    workload = Workload(pg, pause=0.02)
    try:
        wait_until(lambda: b"RUNNING" in _read(log) or proc.poll() is not None, 180, "child up")
        assert proc.poll() is None, f"child exited early:\n{_read(log)[-4000:].decode()}"
        workload.start()
        # Kill once the mirror has caught some of the workload (a random amount of it): the
        # source has then committed micro-batches and advanced the slot, and more are in flight.
        threshold = rng.randrange(100, 1500)
        wait_until(
            lambda: _count(my) >= threshold or proc.poll() is not None,
            300,
            f"{threshold} rows mirrored",
            every=0.05,
        )
        assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
        kill9(proc)
        mirrored_then, written_then = _count(my), workload.done
        proc = child()
        workload.join(300)
        assert workload.error is None, workload.error
        assert workload.done == TRANSACTIONS

        def same() -> bool:
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            return _rows(my) == _rows(pg)

        try:
            wait_until(same, 300, "MariaDB equal to PostgreSQL", every=0.5)
        except AssertionError:
            raise AssertionError(
                f"{len(_rows(pg))} rows in PostgreSQL, {len(_rows(my))} in MariaDB, "
                f"{topic_records(root, f'cdc.{table}')} records in the topic of "
                f"{workload.events} changes; child:\n{_read(log)[-3000:].decode()}"
            ) from None
        published = topic_records(root, f"cdc.{table}")
        print(
            f"killed at {mirrored_then} rows mirrored, {written_then}/{TRANSACTIONS} "
            "transactions written; "
            f"{workload.events} changes, {published} records in the topic"
        )
        assert published == workload.events
    finally:
        workload.stopped.set()  # a failed test does not leave the writer running
        if proc.poll() is None:
            kill9(proc)
        _drop_slot(pg, slot)


PREFILLED = 4000


def test_kill_9_during_the_snapshot_keeps_the_mirror_exact(tmp_path: Path, pg: Db, my: Db) -> None:
    """4,000 rows snapshotted (500 a micro-batch, two Spark partitions each) while the workload
    inserts above them and updates them; the child is killed with `kill -9` during the snapshot
    (`SLUICE_CDC_SNAPSHOT_KILLS` times, 1 by default) and started again. Afterwards MariaDB
    equals PostgreSQL; in the topic no row was read twice (`op='r'`), every row the workload
    never touched was read once, and no change event is there twice."""
    slot = f"sluice_snap_{uuid.uuid4().hex[:8]}"
    columns = "(id INT PRIMARY KEY, name TEXT NOT NULL, n INT)"
    pg.execute(f"CREATE TABLE {pg.table('items')} {columns}")
    my.execute(f"CREATE TABLE {my.table('items')} {columns} CHARSET utf8mb4")
    pg.executemany(
        f"INSERT INTO {pg.table('items')} VALUES (%s, %s, %s)",
        [(i, f"row{i}", i) for i in range(1, PREFILLED + 1)],
    )
    rng = random.Random(int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns())))
    kills = int(os.environ.get("SLUICE_CDC_SNAPSHOT_KILLS", "1"))
    root, log = tmp_path / "store", tmp_path / "child.log"
    table = f"{pg.namespace}.items"

    def child():
        return start_child_cdc(root, log, pg, my, table, slot, "initial")

    proc = child()
    workload = Workload(pg, pause=0.05, base=1_000_000, prefilled=PREFILLED, transactions=150)
    try:
        wait_until(lambda: b"RUNNING" in _read(log) or proc.poll() is not None, 180, "child up")
        workload.start()
        for k in range(kills):
            # a random point of the snapshot, later with each kill
            span = PREFILLED // 2 // kills
            threshold = rng.randrange(k * span + 200, (k + 1) * span)
            wait_until(
                lambda t=threshold, p=proc: _count(my) >= t or p.poll() is not None,
                300,
                f"{threshold} rows mirrored",
                every=0.05,
            )
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            kill9(proc)
            print(f"kill {k + 1} at {_count(my)} rows mirrored")
            proc = child()
        workload.join(300)
        assert workload.error is None, workload.error

        def same() -> bool:
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            return _rows(my) == _rows(pg)

        wait_until(same, 300, "MariaDB equal to PostgreSQL", every=0.5)
        events = [json.loads(v)["payload"] for v in topic_values(root, f"cdc.{table}")]
        reads = check_handover(events)
        untouched = set(range(1, PREFILLED + 1)) - workload.touched
        assert untouched <= reads, sorted(untouched - reads)[:5]
    finally:
        workload.stopped.set()
        if proc.poll() is None:
            kill9(proc)
        _drop_slot(pg, slot)


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
    root: Path, log: Path, pg: Db, my: Db, table: str, slot: str, mode: str = "never"
):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), pg.jdbc_url, my.jdbc_url, table, slot, mode],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _read(log: Path) -> bytes:
    return log.read_bytes() if log.exists() else b""


def _count(d: Db) -> int:
    return int(d.scalar(f"SELECT COUNT(*) FROM {d.table('items')}"))


def _rows(d: Db) -> list[tuple]:
    return d.rows(f"SELECT id, name, n FROM {d.table('items')} ORDER BY id")
