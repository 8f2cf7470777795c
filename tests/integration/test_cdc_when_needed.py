"""`snapshot.mode=when_needed` on the real servers: a stored position the log no longer holds
(PostgreSQL: the slot dropped and created again; MariaDB: the position's binlog file gone, as
after a purge) makes the connector snapshot the tables again, with a log line saying why; with
`initial` the same position fails naming it. Driven as the runtime drives the task (no Spark)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.sdk import ConnectException
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_evolve import LIMIT, _flushed, _task
from tests.integration.test_cdc_mysql import _source as my_source
from tests.integration.test_cdc_mysql import row_metadata  # noqa: F401  (fixture)
from tests.integration.test_cdc_postgres import _source as pg_source
from tests.integration.test_cdc_postgres import slot  # noqa: F401  (fixture)

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures
FRESH = {"upto": None, "done": False}


def _snapshot_again(task: Any, start: Any, caplog: pytest.LogCaptureFixture, why: str) -> set:
    """From the lost `start`: an empty range that starts a new snapshot (logged, naming `why`),
    then the snapshot's records: the ids read."""
    (partition,) = task.partitions()
    with caplog.at_level(logging.WARNING, logger="sluice.connectors.cdc"):
        marked = task.latest(partition, start, LIMIT)
    assert marked["snapshot"] == FRESH and why in marked["lost"], marked
    assert any(why in r.getMessage() and "when_needed" in r.getMessage() for r in caplog.records)
    assert list(task.read(partition, start, marked)) == []
    end = task.latest(partition, marked, LIMIT)
    records = [r.value for r in jdbc_db.task_records(task.read(partition, marked, end))]
    assert {v["op"] for v in records} == {"r"}, records
    assert "lost" not in task.latest(partition, end, LIMIT)
    return {v["after"]["id"] for v in records}


def test_postgresql_snapshots_again_when_the_slot_was_recreated(
    pg: Db,
    slot: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    items = pg.table("items")
    pg.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name TEXT)")
    pg.execute(f"INSERT INTO {items} VALUES (1, 'a'), (2, 'b')")
    config = pg_source(pg, slot, **{"snapshot.mode": "when_needed"})
    _, task = _task(PostgresCdcSourceConnector, config)
    (partition,) = task.partitions()
    stored = task.latest(partition, None, LIMIT)  # the first snapshot: both rows
    assert {
        r.value["after"]["id"] for r in jdbc_db.task_records(task.read(partition, None, stored))
    } == {1, 2}
    pg.execute(f"INSERT INTO {items} VALUES (3, 'c')")
    _flushed(pg)
    stored = task.latest(partition, stored, LIMIT)
    stored = {k: v for k, v in stored.items() if k != "snapshot"}
    # the slot is dropped under the stopped connector; its restart creates a new one
    pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    pg.execute(f"INSERT INTO {items} VALUES (4, 'd')")  # in no slot: only a snapshot has it
    _, task = _task(PostgresCdcSourceConnector, config)
    assert _snapshot_again(task, stored, caplog, f"replication slot {slot!r} is at") == {
        1,
        2,
        3,
        4,
    }
    # snapshot.mode=initial: the same position fails, naming the slot and the position
    _, task = _task(PostgresCdcSourceConnector, {**config, "snapshot.mode": "initial"})
    with pytest.raises(ConnectException, match=r"past the stored position .*when_needed"):
        task.latest(partition, stored, LIMIT)


def test_mariadb_snapshots_again_when_the_binlog_is_gone(
    my: Db,
    row_metadata,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name VARCHAR(10))")
    my.execute(f"INSERT INTO {items} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    config = my_source(my, **{"snapshot.mode": "when_needed"})
    _, task = _task(MySqlCdcSourceConnector, config)
    # A position in a binlog file the server no longer has, as after PURGE BINARY LOGS (the
    # shared test server's binlogs are not purged: other tests read them)
    (name, _), *_ = task._binary_logs()
    gone = {"file": name.rsplit(".", 1)[0] + ".000000", "pos": 4}
    assert _snapshot_again(task, gone, caplog, f"binlog {gone['file']} (position 4)") == {1, 2, 3}
    _, task = _task(MySqlCdcSourceConnector, {**config, "snapshot.mode": "initial"})
    (partition,) = task.partitions()
    with pytest.raises(ConnectException, match=r"binlog .*000000 \(position 4\) is no longer on"):
        task.latest(partition, gone, LIMIT)
