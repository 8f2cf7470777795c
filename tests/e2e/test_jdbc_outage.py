"""A database stopped for 20 s in the middle of a copy: nothing lost, nothing duplicated.

MariaDB → topic → PostgreSQL, both servers private instances (`jdbc_servers`), so that stopping
them does not disturb the shared ones. First the source database is stopped for 20 s while rows
are being copied, then the target database. The pipeline must stay up through both outages (the
source waits and retries its reads, the sink retries its transaction with backoff), then finish:
the topic holds each source row exactly once and the target equals the source.

The copy is paced (`paced_runner`: one micro-batch a second, `read.max.rows` rows each), so the
source outage comes while rows are still being copied whatever the machine's speed; the target
outage comes while the rows added after the first one wait in the topic.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.jdbc_servers import PrivateMariaDB, PrivatePostgres

# more than the default 300 s on a loaded 2-core machine: two private database servers, two 20 s
# outages, a paced copy
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

OUTAGE_S = 20.0
FIRST, MORE = 20_000, 10_000
#: rows per micro-batch of the source: FIRST rows take at least FIRST / READ_ROWS - 1 batches
READ_ROWS = 1000


def _engine(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def _count(engine: Any) -> int:
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT COUNT(*) FROM orders").scalar())
    except Exception:  # the server is away
        return -1


def _rows(engine: Any) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql("SELECT * FROM orders ORDER BY id")]


def _add(engine: Any, low: int, high: int) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO orders SELECT seq, CONCAT('order ', seq), seq * 0.25, "
            "TIMESTAMP '2024-06-01 00:00:00' + INTERVAL seq MICROSECOND "
            f"FROM seq_{low}_to_{high}"
        )


def _outage(runner, server: Any, what: str) -> None:
    """Stop `server` for OUTAGE_S seconds; every connector must stay healthy meanwhile."""
    server.stop()
    until = time.monotonic() + OUTAGE_S

    def over() -> bool:
        for running in runner.running.values():
            failure = running.failure()
            assert failure is None, f"{running.name} failed during the {what} outage: {failure[0]}"
        return time.monotonic() >= until

    try:
        wait_until(over, OUTAGE_S + 30, f"the end of the {what} outage")
    finally:
        server.start()  # always, even when the pipeline failed


def test_source_and_target_outages_lose_and_duplicate_nothing(paced_runner) -> None:
    runner = paced_runner
    maria, postgres = PrivateMariaDB(), PrivatePostgres()
    try:
        maria.start()
        postgres.start()
        with _engine(f"mysql+pymysql://root@127.0.0.1:{maria.port}/mysql").begin() as conn:
            conn.exec_driver_sql("CREATE DATABASE shop")
        source = _engine(f"mysql+pymysql://root@127.0.0.1:{maria.port}/shop")
        target = _engine(f"postgresql+psycopg://root@127.0.0.1:{postgres.port}/postgres")
        with source.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE orders (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
                "amount DECIMAL(18,2), at DATETIME(6))"
            )
        _add(source, 1, FIRST)
        with target.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE orders (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
                "amount NUMERIC(18,2), at TIMESTAMP(6))"
            )
        avro = {"value.converter": "AvroConverter"}
        runner.start(
            "src",
            {
                "connector.class": "JdbcSourceConnector",
                "connection.url": maria.url("shop"),
                "connection.user": "root",
                "connection.attempts": "200",  # reads retry through the outage (~40 s)
                "connection.backoff.ms": "200",
                "mode": "incrementing",
                "incrementing.column.name": "id",
                "table.whitelist": "orders",
                "connect.topicname": "orders",
                "read.max.rows": str(READ_ROWS),  # paced: the outage hits mid-copy
                **avro,
            },
        )
        runner.start(
            "dst",
            {
                "connector.class": "JdbcSinkConnector",
                "connection.url": postgres.url(),
                "connection.user": "root",
                "connect.topicnames": "orders",
                "table.name.format": "orders",
                "insert.mode": "upsert",
                "pk.mode": "record_value",
                "pk.fields": "id",
                "read.max.rows": "3000",
                "errors.retry.timeout": "-1",  # wait for the database as long as it takes
                "errors.retry.delay.max.ms": "1000",
                **avro,
            },
        )
        wait_until(lambda: _count(target) > 0, 180, "the copy to start")
        # at most READ_ROWS rows a second reach the topic: the source has rows left to read
        assert runner.bus.count("orders") < FIRST
        _outage(runner, maria, "source")
        _add(source, FIRST + 1, FIRST + MORE)
        copied = _count(target)
        wait_until(lambda: _count(target) > copied, 180, "rows to flow again")
        assert runner.bus.count("orders") < FIRST + MORE  # paced: rows still on their way
        _outage(runner, postgres, "target")
        wait_until(lambda: _count(target) >= FIRST + MORE, 300, "the whole table")
        for running in runner.running.values():
            assert running.failure() is None
        assert runner.bus.count("orders") == FIRST + MORE  # each row once in the topic
        assert _rows(target) == _rows(source)
    finally:
        runner.close()
        maria.close()
        postgres.close()
