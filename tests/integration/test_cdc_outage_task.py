"""A CDC task riding out its database being away, driven as the runtime drives it (no Spark),
on each database: through a TCP proxy that is cut (open connections reset, new ones refused, as
a stopped server looks to a client; the shared servers are not stopped), `latest` (driver, 20 s
away) and `read` (executor, 3 s away) retry with backoff, telling the thread's retry watcher —
what the task's status shows as `retrying` — with an error naming the server, and return the
range and exactly the records (50 inserts, 5 deletes) written meanwhile, once it is back."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.sdk import ReadLimit
from sluice.sdk.retry import watching
from tests.e2e.tcp_proxy import TcpProxy
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, PG_HOST, Db
from tests.integration.test_cdc_evolve import _task
from tests.integration.test_cdc_handover import _flushed
from tests.integration.test_cdc_mysql import _source as my_source
from tests.integration.test_cdc_mysql import row_metadata  # noqa: F401  (fixture)
from tests.integration.test_cdc_postgres import _source as pg_source
from tests.integration.test_cdc_postgres import slot  # noqa: F401  (fixture)

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures
LIMIT = ReadLimit(max_rows=10_000)
OUTAGE_S = 20.0  # the server away while the driver plans; 3 s more while an executor reads


class Notes:
    """A retry watcher that keeps what it is told."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def retrying(self, error: BaseException, wait_s: float) -> None:
        self.errors.append(str(error))

    def settled(self) -> None:
        pass


def _ride_out(d: Db, config: dict[str, str], cls: type, proxy: TcpProxy) -> None:
    items = d.table("items")
    _, task = _task(cls, config)
    (partition,) = task.partitions()
    start = task.latest(partition, None, LIMIT)
    d.executemany(f"INSERT INTO {items} VALUES (%s, %s)", [(i, f"n{i}") for i in range(1, 51)])
    d.execute(f"DELETE FROM {items} WHERE id <= 5")
    _flushed(d)
    timers: list[threading.Timer] = []

    def away_for(seconds: float) -> None:
        proxy.cut()
        timers.append(threading.Timer(seconds, proxy.restore))
        timers[-1].start()

    notes, read = Notes(), Notes()
    try:
        away_for(OUTAGE_S)
        with watching(notes):
            end = task.latest(partition, start, LIMIT)  # planning retries until it is back
        assert notes.errors, "no retry while the server was away"
        assert f"127.0.0.1:{proxy.port}" in notes.errors[0], notes.errors  # names the server
        timers[-1].join()
        away_for(3.0)
        with watching(read):
            records = [r.value for r in jdbc_db.task_records(task.read(partition, start, end))]
        assert read.errors, "no retry while the server was away"
        timers[-1].join()
    finally:
        for timer in timers:
            timer.cancel()
        task.stop()
    ops = [v["op"] for v in records]
    assert ops.count("c") == 50 and ops.count("d") == 5 and len(ops) == 55, ops


@pytest.fixture
def proxies() -> Any:
    made: list[TcpProxy] = []

    def make(address: str) -> TcpProxy:
        host, port = address.split(":")
        made.append(TcpProxy((host, int(port))))
        return made[-1]

    yield make
    for proxy in made:
        proxy.cut()


def test_mariadb_task_rides_out_an_outage(my: Db, row_metadata, proxies) -> None:  # noqa: F811
    proxy = proxies(MY_HOST)
    my.execute(f"CREATE TABLE {my.table('items')} (id INT PRIMARY KEY, name VARCHAR(20))")
    config = my_source(my, **{"errors.retry.delay.max.ms": "500"})
    config["connection.url"] = f"jdbc:mysql://127.0.0.1:{proxy.port}/{my.namespace}"
    _ride_out(my, config, MySqlCdcSourceConnector, proxy)


def test_postgresql_task_rides_out_an_outage(pg: Db, slot: str, proxies) -> None:  # noqa: F811
    proxy = proxies(PG_HOST)
    pg.execute(f"CREATE TABLE {pg.table('items')} (id INT PRIMARY KEY, name TEXT)")
    config = pg_source(pg, slot, **{"errors.retry.delay.max.ms": "500"})
    config["connection.url"] = f"jdbc:postgresql://127.0.0.1:{proxy.port}/test"
    _ride_out(pg, config, PostgresCdcSourceConnector, proxy)
