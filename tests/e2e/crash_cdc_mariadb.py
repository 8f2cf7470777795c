"""kill -9 of a process mirroring MariaDB → topic → PostgreSQL by change data capture (the
binlog), while a workload runs on MariaDB; restart; the mirror is exact and the topic holds each
change event exactly once.

Not part of the suite (the file name does not match `test_*.py`): one round costs about 100 s on
the 2-core machine, over the suite's budget for it; `make crash-cdc` runs it, five kills
(`SLUICE_CDC_KILLS`), beside `test_cdc_crash.py`. `SLUICE_CRASH_SEED` fixes the kill points.
The child and the workload are the PostgreSQL test's (`cdc_child.py`, `Workload`).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_cdc_crash import Workload, _count, _read, _rows, start_child_cdc
from tests.e2e.test_jdbc_crash import kill9, topic_records
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

TRANSACTIONS = 150  # per kill


def test_kill_9_while_capturing_mariadb_keeps_the_mirror_exact(
    tmp_path: Path, pg: Db, my: Db
) -> None:
    """MariaDB → topic → PostgreSQL: the child streams `items` from the binlog
    (`snapshot.mode=never`) while a workload writes on MariaDB; it is killed with `kill -9`
    (`SLUICE_CDC_KILLS` times, 1 by default) once a random number of rows reached PostgreSQL,
    and started again. Afterwards PostgreSQL equals MariaDB and the topic holds exactly one
    record per change: the binlog range of a micro-batch that did not commit is read again from
    its stored file + position, never skipped nor doubled."""
    server = f"sluice_crash_{uuid.uuid4().hex[:8]}"  # the replica server id is derived from it
    columns = "(id INT PRIMARY KEY, name TEXT NOT NULL, n INT)"
    my.execute(f"CREATE TABLE {my.table('items')} {columns} CHARSET utf8mb4")
    pg.execute(f"CREATE TABLE {pg.table('items')} {columns}")
    rng = random.Random(int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns())))
    kills = int(os.environ.get("SLUICE_CDC_KILLS", "1"))
    root, log = tmp_path / "store", tmp_path / "child.log"
    table = f"{my.namespace}.items"
    proc = start_child_cdc(root, log, my, pg, table, server)
    transactions = TRANSACTIONS * kills
    workload = Workload(my, pause=0.05, transactions=transactions)
    try:
        wait_until(lambda: b"RUNNING" in _read(log) or proc.poll() is not None, 180, "child up")
        assert proc.poll() is None, f"child exited early:\n{_read(log)[-4000:].decode()}"
        # Capture starts at the binlog position the running connector read at its start; a
        # row in PostgreSQL means the micro-batches up to it committed, that position included.
        workload.start()
        top = transactions * 7  # rows the workload leaves
        for k in range(kills):
            # a restarted child is up again first: the kill lands while it runs, not as it starts
            wait_until(
                lambda k=k, p=proc: _read(log).count(b"RUNNING") > k or p.poll() is not None,
                180,
                "child up again",
            )
            threshold = rng.randrange(50 + k * top // kills, 50 + (k + 1) * top // kills)
            wait_until(
                lambda t=threshold, p=proc: _count(pg) >= t or p.poll() is not None,
                300,
                f"{threshold} rows mirrored",
                every=0.05,
            )
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            kill9(proc)
            print(f"kill {k + 1}: {_count(pg)} rows mirrored, {workload.done} transactions written")
            proc = start_child_cdc(root, log, my, pg, table, server)
        workload.join(300)
        assert workload.error is None, workload.error
        assert workload.done == transactions

        def same() -> bool:
            assert proc.poll() is None, f"child failed:\n{_read(log)[-4000:].decode()}"
            return _rows(pg) == _rows(my)

        wait_until(same, 300, "PostgreSQL equal to MariaDB", every=0.5)
        published = topic_records(root, f"cdc.{table}")
        print(f"{workload.events} changes, {published} records in the topic")
        assert published == workload.events
    finally:
        workload.stopped.set()
        if proc.poll() is None:
            kill9(proc)
