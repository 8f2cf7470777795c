"""Source lag (`ReplayableSourceTask.lag`, shown by `/metrics`) against the real systems.

Each source is asked how far a known position is behind after a known amount of new data: a
file's bytes, a JDBC table's rows past the cursor, PostgreSQL's WAL bytes after an LSN, the
MariaDB binlog's bytes after a file/position, a Redis stream's entries after an id. Then the
background prober of the worker (`SourceLag`): figures only from a finished probe, redone after
the interval, and a probe that fails is logged once and shows nothing. No Spark: the tasks are
driven as the runtime drives them on the driver.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.connectors.file.source import FileSourceTask
from sluice.connectors.redis import source as redis_source
from sluice.runtime.metrics.source_lag import PartitionLag, SourceLag
from sluice.sdk import ReplayableSourceTask, partition_key
from sluice.store.configs import StoredConnector
from tests.conftest import wait_until
from tests.integration import jdbc_db, test_cdc_postgres
from tests.integration.jdbc_db import Db, read_all, source_task
from tests.servers import ensure

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures
slot = test_cdc_postgres.slot  # fixture: a replication slot name, dropped afterwards


def _started(connector_class: type, config: dict[str, str]) -> Any:
    """The connector's one task, planned and started as the runtime does on the driver."""
    connector = connector_class()
    connector.validate(config)
    connector.start(config)
    task = connector_class.task_class()
    task.start(connector.task_configs(1)[0])
    return task


def test_file_lag_is_the_bytes_after_the_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\n")
    task = FileSourceTask()
    task.start({"filename": str(path), "connect.topicname": "t"})
    (partition,) = task.partitions()
    assert task.lag_unit == "bytes"
    assert task.lag(partition, None) == 8
    assert task.lag(partition, {"position": 4}) == 4
    with path.open("ab") as f:
        f.write(b"three\npartial")  # a last line still being written counts: it is data
    assert task.lag(partition, {"position": 8}) == 13
    path.unlink()
    assert task.lag(partition, {"position": 8}) is None  # gone: the task says so when it reads


def test_jdbc_lag_is_the_rows_past_the_cursor(pg: Db) -> None:
    pg.execute(f"CREATE TABLE {pg.table('items')} (id INTEGER PRIMARY KEY, v TEXT)")
    pg.executemany(
        f"INSERT INTO {pg.table('items')} VALUES (%s, %s)", [(i, "x") for i in range(10)]
    )
    (task,) = source_task(
        pg.config(mode="incrementing", incrementing__column__name="id", table__whitelist="items")
    )
    (partition,) = task.partitions()
    assert task.lag(partition, None) == 10
    positions: dict[str, Any] = {}
    assert len(read_all(task, positions=positions)) == 10
    (at,) = positions.values()
    assert task.lag(partition, at) == 0
    pg.executemany(
        f"INSERT INTO {pg.table('items')} VALUES (%s, %s)", [(i, "y") for i in (10, 11, 12)]
    )
    assert task.lag(partition, at) == 3
    bulk = source_task(pg.config(mode="bulk", table__whitelist="items"))[0]
    assert bulk.lag(bulk.partitions()[0], None) is None  # no cursor to count from


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _capture(db: Db, connector_class: type, columns: str, **extra: str) -> tuple[Any, str]:
    """A CDC task capturing a new table `items` of `db` (started as the runtime starts it)."""
    items = db.table("items")
    db.execute(f"CREATE TABLE {items} ({columns})")
    config = {"topic.prefix": "cdc", "table.include.list": f"{db.namespace}.items"}
    return _started(connector_class, {**db.config(), **config, **extra}), items


def test_postgres_cdc_lag_is_the_wal_bytes_after_the_position(pg: Db, slot: str) -> None:
    columns = "id INTEGER PRIMARY KEY, v TEXT"
    extra = {"slot.name": slot, "publication.name": slot}
    task, items = _capture(pg, PostgresCdcSourceConnector, columns, **extra)
    (partition,) = task.partitions()
    assert task.lag_unit == "bytes"
    current = "SELECT pg_current_wal_lsn()::text"
    before = _lsn(pg.scalar(current))
    pg.executemany(f"INSERT INTO {items} VALUES (%s, %s)", [(i, "v" * 100) for i in range(500)])
    written = _lsn(pg.scalar("SELECT pg_current_wal_insert_lsn()::text"))
    # the test server commits with synchronous_commit = off: the WAL writer writes the rows out
    # (what pg_current_wal_lsn() and the lag count) up to wal_writer_delay later
    wait_until(
        lambda: _lsn(pg.scalar(current)) >= written, 30, "the WAL written out past the rows", 0.05
    )
    lag = task.lag(partition, {"lsn": before})
    after = _lsn(pg.scalar(current))
    # 500 rows of ~100 bytes went into the WAL; the server's other writers may add more
    assert written - before > 500 * 100
    assert written - before <= lag <= after - before
    # before the first commit: measured from the slot's confirmed position
    confirmed = _lsn(
        pg.scalar(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
    )
    assert task.lag(partition, None) >= written - confirmed > 500 * 100


def test_mariadb_cdc_lag_is_the_binlog_bytes_after_the_position(my: Db) -> None:
    my.execute("SET GLOBAL binlog_row_metadata = 'FULL'")
    server_id = str(7000 + uuid.uuid4().int % 10_000)
    columns = "id INT NOT NULL PRIMARY KEY, v TEXT"
    task, items = _capture(
        my, MySqlCdcSourceConnector, columns, **{"database.server.id": server_id}
    )
    (partition,) = task.partitions()

    def end() -> tuple[str, int]:
        name, pos = my.rows("SHOW MASTER STATUS")[0][:2]
        return name, int(pos)

    file, before = end()
    my.executemany(f"INSERT INTO {items} VALUES (%s, %s)", [(i, "v" * 100) for i in range(500)])
    written = end()
    lag = task.lag(partition, {"file": file, "pos": before})
    after = end()
    assert written[0] == after[0] == file, "the binlog rotated during the test: run it again"
    assert written[1] - before > 500 * 100
    assert written[1] - before <= lag <= after[1] - before
    assert task.lag(partition, {"file": "no-such-bin.000001", "pos": 4}) is None  # purged


@pytest.fixture
def redis_client() -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(f"redis://{ensure('redis')}/0")
    stream = f"sluice-lag-{uuid.uuid4().hex[:8]}"
    client.stream_name = stream  # type: ignore[attr-defined]
    yield client
    client.delete(stream)
    client.close()


def test_redis_stream_lag_is_the_entries_after_the_id(
    redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = redis_client.stream_name
    ids = [redis_client.xadd(stream, {"value": str(i)}).decode() for i in range(5)]
    task = redis_source.RedisStreamSourceTask()
    url = redis_client.connection_pool.connection_kwargs
    task.start({"redis.streams": stream, "redis.url": f"redis://{url['host']}:{url['port']}/0"})
    partition = {"stream": stream}
    try:
        assert task.lag(partition, None) == 5
        assert task.lag(partition, {"id": ids[1]}) == 3
        assert task.lag(partition, {"id": ids[4]}) == 0
        # past the counting cap on both sides of the position: XLEN - the entries up to it, or
        # the cap as a floor when both sides are longer
        monkeypatch.setattr(redis_source, "_LAG_COUNT_CAP", 3)
        assert task.lag(partition, {"id": ids[0]}) == 4  # after: 4 ≥ cap; up to it: 1
        monkeypatch.setattr(redis_source, "_LAG_COUNT_CAP", 2)
        assert task.lag(partition, {"id": ids[2]}) == 2  # 2 after, 3 up to it: the floor
    finally:
        task.stop()


# -- the worker's background prober ---------------------------------------------------------------
def _stored(path: Path) -> StoredConnector:
    config = {"connector.class": "FileSourceConnector", "filename": str(path)}
    return StoredConnector("files", config, "STARTED", [{**config, "connect.topicname": "t"}])


def test_the_prober_shows_finished_probes_and_redoes_them_after_the_interval(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\n" * 10)
    key = partition_key({"filename": str(path)})
    committed: dict[str, dict] = {}
    lag = SourceLag(
        task_class=lambda _: FileSourceTask,
        resolve=lambda _, config: dict(config),
        committed=lambda _: dict(committed),
        interval_s=0.2,
    )
    try:
        stored = _stored(path)
        assert lag.of(stored) == []  # the first scrape queues the first probe
        wait_until(lambda: lag.of(stored) == [PartitionLag(key, "bytes", 20)], 10, "a probe")
        committed[key] = {"position": 16}
        wait_until(lambda: lag.of(stored) == [PartitionLag(key, "bytes", 4)], 10, "a new probe")
        lag.forget(set())
        assert lag.of(stored) == []  # a deleted connector's figures are gone
    finally:
        lag.close()


def test_the_first_scrape_waits_for_a_first_probe_then_never_again(tmp_path: Path) -> None:
    """`first_figures` (what a scrape calls before reading): a source never probed is probed and
    shown at once (found: no source lag on the first scrape after minutes of running); a probe
    that does not finish in time costs that scrape its timeout, and no later one."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\n" * 10)
    key = partition_key({"filename": str(path)})

    def prober(task_class: type) -> SourceLag:  # probes once an hour: only what a scrape asks
        return SourceLag(
            task_class=lambda _: task_class,
            resolve=lambda _, config: dict(config),
            committed=lambda _: {},
            interval_s=3600,
        )

    lag = prober(FileSourceTask)
    try:
        stored = _stored(path)
        lag.first_figures([stored], timeout_s=30)
        assert lag.of(stored) == [PartitionLag(key, "bytes", 20)]
    finally:
        lag.close()

    held = threading.Event()

    class _Slow(FileSourceTask):
        def lag(self, partition: Any, position: Any) -> int | None:
            held.wait(30)
            return super().lag(partition, position)

    slow = prober(_Slow)
    try:
        slow.first_figures([stored], timeout_s=0.2)  # gives up: the probe is still running
        assert slow.of(stored) == []
        held.set()
        wait_until(lambda: slow.of(stored) == [PartitionLag(key, "bytes", 20)], 10, "the probe")
        slow.first_figures([stored], timeout_s=30)  # known now: returns without probing
        assert slow._queued == set()
    finally:
        slow.close()


class _BadUnit(ReplayableSourceTask):
    lag_unit = "lines"

    def partitions(self) -> list[dict]:
        return [{"p": "0"}]

    def latest(self, partition: Any, start: Any, limit: Any) -> Any:
        return start

    def read(self, partition: Any, start: Any, end: Any) -> list:
        return []

    def lag(self, partition: Any, position: Any) -> int | None:
        return 1


def test_a_failing_probe_is_logged_once_and_shows_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lag = SourceLag(
        task_class=lambda _: _BadUnit,
        resolve=lambda _, config: dict(config),
        committed=lambda _: {},
        interval_s=0.05,
    )
    stored = _stored(tmp_path / "in.txt")
    try:
        with caplog.at_level(logging.WARNING, "sluice.runtime.metrics.source_lag"):
            for _ in range(3):
                lag.of(stored)
                wait_until(lambda: "files" in lag._probes, 10, "a probe")
                lag._probes.clear()
        messages = [r.getMessage() for r in caplog.records]
        assert messages == [
            "source lag of connector files not known: _BadUnit.lag_unit is 'lines', "
            "not one of bytes, records"
        ], messages
    finally:
        lag.close()
