"""kill -9 a process copying a PostgreSQL table → topic → MariaDB; restart; exactly the rows.

The child (`jdbc_child.py`) runs the JDBC source (incrementing, two tasks: the first load is cut
into key ranges) and the JDBC sink (upsert: multi-row `INSERT … ON DUPLICATE KEY UPDATE`) on one
SparkSession. (MariaDB → PostgreSQL is covered value for value in the integration tests; this
direction also makes the copy faster, PostgreSQL being read with COPY.) It is killed with its whole
process group (JVM included) at random moments — at a random fill level of the target, and a
random time after a start — then started again until the copy completes. The target must then
hold exactly the source's rows, value for value, and the topic between them each row exactly once
(the upsert would hide a row published twice). `SLUICE_CRASH_SEED` fixes the random seed.

The suite copies 200,000 rows (`SLUICE_JDBC_ROWS`) and kills once, at a random fill level of the
target; `SLUICE_CRASH_ROUNDS=2` adds the kill a random time after a start (`make crash-jdbc`: 1M
rows, both kills).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sluice.bus.embedded import EmbeddedLog
from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db

# more than the default 300 s on a loaded 2-core machine: a kill -9 and a restart of a Spark process
# copying 200,000 rows
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

CHILD = Path(__file__).with_name("jdbc_child.py")
ROWS = int(os.environ.get("SLUICE_JDBC_ROWS", "200000"))
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


def start_child(root: Path, log: Path, source: Db, sink: Db, table: str, *extra: str):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return spawn(
        [sys.executable, str(CHILD), str(root), source.jdbc_url, sink.jdbc_url, table, *extra],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def count(d: Db, table: str) -> int:
    try:
        return int(d.scalar(f"SELECT COUNT(*) FROM {d.q(table)}"))
    except Exception:  # the table is being created or the server restarts
        return -1


def topic_records(root: Path, topic: str) -> int:
    """How many records were ever published to `topic` in the child's embedded bus (the sum of
    its queues' end offsets: retention, which only drops old segments, does not lower it)."""
    log = EmbeddedLog(root / "bus")
    try:
        return sum(r.max_offset for r in log.offsets(topic).values())
    finally:
        log.close()


def assert_same_rows(source: Db, target: Db, table: str, rows: int) -> None:
    """Both tables hold exactly the same rows, compared value for value in id order."""
    assert count(target, table) == rows
    step = 100_000
    for low in range(0, rows, step):
        sql = "SELECT * FROM {} WHERE id > %s AND id <= %s ORDER BY id"
        a = source.rows(sql.format(source.q(table)), (low, low + step))
        b = target.rows(sql.format(target.q(table)), (low, low + step))
        assert a == b, f"rows {low + 1}..{low + step} differ"


def make_big_table(source: Db, target: Db, rows: int) -> None:
    """A `rows`-row PostgreSQL table `big`, made on the server, and its empty MariaDB twin."""
    source.execute(
        f"CREATE TABLE {source.q('big')} (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
        "amount NUMERIC(18,4), created TIMESTAMP(6), note VARCHAR(60))"
    )
    source.execute(
        f"INSERT INTO {source.q('big')} SELECT g, 'näme ' || g, g * 1.2345, "
        "TIMESTAMP '2024-01-01' + g * INTERVAL '1001 microseconds', "
        f"CASE WHEN g %% 7 = 0 THEN NULL ELSE 'note ' || md5(g::text) END "
        f"FROM generate_series(1, {rows}) g"
    )
    target.execute(
        f"CREATE TABLE {target.q('big')} (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
        "amount DECIMAL(18,4), created DATETIME(6), note VARCHAR(60)) CHARSET utf8mb4"
    )


def test_kill_9_mid_copy_then_restart_copies_exactly_the_source(
    tmp_path: Path, my: Db, pg: Db
) -> None:
    make_big_table(pg, my, ROWS)
    root, log = tmp_path / "store", tmp_path / "child.log"
    seed = int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns()))
    rng = random.Random(seed)
    # a micro-batch is a tenth of the table at most: the fill-level kill comes mid-copy
    settings = ("max.tasks=2", f"source.read.max.rows={min(100_000, ROWS // 10)}")
    # kills at random fill levels and, with more than one round, one a random time after a
    # start (before or after them)
    plans: list[tuple[str, float]] = [
        ("fill", f) for f in sorted(rng.uniform(0.05, 0.8) for _ in range(max(1, ROUNDS - 1)))
    ]
    if ROUNDS > 1:
        plans.insert(rng.randrange(len(plans) + 1), ("time", rng.uniform(3.0, 15.0)))
    kills: list[str] = []
    for kind, amount in plans:
        before = max(count(my, "big"), 0)
        proc = start_child(root, log, pg, my, "big", *settings)
        if kind == "time":
            deadline = time.monotonic() + amount
            wait_until(
                lambda d=deadline, p=proc: time.monotonic() >= d or p.poll() is not None,
                60,
                "the kill time",
                every=0.05,
            )
        else:
            target = max(before + 1, int(ROWS * amount))
            wait_until(
                lambda t=target, p=proc: count(my, "big") >= t or p.poll() is not None,
                300,
                f"{target} rows in the target",
                every=0.5,
            )
        assert proc.poll() is None, f"child exited early:\n{log.read_text()[-4000:]}"
        kill9(proc)
        kills.append(f"{kind}={amount:.2f} at target={count(my, 'big')}/{ROWS}")
    proc = start_child(root, log, pg, my, "big", *settings)
    try:
        wait_until(
            lambda: count(my, "big") >= ROWS or proc.poll() is not None,
            600,
            "the whole table",
            every=0.5,
        )
        assert proc.poll() is None, f"child failed:\n{log.read_text()[-4000:]}"
    finally:
        if proc.poll() is None:
            kill9(proc)
    published = topic_records(root, "copy")
    print(f"seed {seed}; kills:", "; ".join(kills), f"| records in the topic: {published}")
    assert_same_rows(pg, my, "big", ROWS)
    # Every row reached the target through the topic, so the topic holds each row at least
    # once; with exactly ROWS records in it, it holds each exactly once.
    assert published == ROWS, f"{published - ROWS} rows published twice; kills: {kills}"
