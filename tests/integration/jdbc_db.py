"""The real PostgreSQL and MariaDB servers of the JDBC tests: fixtures and small helpers.

Every test gets its own uniquely named PostgreSQL schema (`pg`) or MariaDB database (`my`), dropped
afterwards. The servers are the project's (`scripts/servers.sh up postgres mariadb`, see
docs/servers.md), started on first use by `tests.servers.ensure` and stopped at the end of the run
that started them. `SLUICE_TEST_PG` / `SLUICE_TEST_MYSQL` (host:port) point the tests at servers of
your own instead (user root, no password, database `test`); nothing is started then. A server that
does not answer fails the test (never skips it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.servers import ensure

PG_HOST = os.environ.get("SLUICE_TEST_PG", "127.0.0.1:5432")
MY_HOST = os.environ.get("SLUICE_TEST_MYSQL", "127.0.0.1:3306")

# dialect -> (the scripts/servers.sh name, the variable that points at a server of one's own)
SERVER = {"postgresql": ("postgres", "SLUICE_TEST_PG"), "mysql": ("mariadb", "SLUICE_TEST_MYSQL")}


@dataclass
class Db:
    """One test's private namespace on a real server."""

    dialect: str  # "postgresql" | "mysql"
    namespace: str  # the schema (PostgreSQL) or database (MariaDB) of this test
    engine: Any

    @property
    def jdbc_url(self) -> str:
        if self.dialect == "postgresql":
            return f"jdbc:postgresql://{PG_HOST}/test?currentSchema={self.namespace}"
        return f"jdbc:mysql://{MY_HOST}/{self.namespace}?useSSL=false"

    def config(self, **extra: str) -> dict[str, str]:
        """`connection.*` keys for this namespace, plus `extra` (dots given as `__`)."""
        user = "root"
        out = {"connection.url": self.jdbc_url, "connection.user": user}
        out.update({k.replace("__", "."): v for k, v in extra.items()})
        return out

    def q(self, name: str) -> str:
        quote = '"' if self.dialect == "postgresql" else "`"
        # `%` doubled: statements run with `%s` parameters
        return (quote + name.replace(quote, quote * 2) + quote).replace("%", "%%")

    def table(self, name: str) -> str:
        return f"{self.q(self.namespace)}.{self.q(name)}"

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(sql, tuple(params) if params is not None else ())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(sql, [tuple(r) for r in rows])

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        with self.engine.connect() as conn:
            result = conn.exec_driver_sql(sql, tuple(params) if params is not None else ())
            return [tuple(r) for r in result.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        return self.rows(sql, params)[0][0]


def _engine(dialect: str, database: str = "test") -> Any:
    import sqlalchemy as sa

    if dialect == "postgresql":
        return sa.create_engine(
            f"postgresql+psycopg://root@{PG_HOST}/{database}",
            connect_args={"options": "-c TimeZone=UTC", "connect_timeout": 5},
            poolclass=sa.pool.NullPool,
        )
    return sa.create_engine(
        f"mysql+pymysql://root@{MY_HOST}/{database}?charset=utf8mb4",
        connect_args={"init_command": "SET time_zone = '+00:00'", "connect_timeout": 5},
        poolclass=sa.pool.NullPool,
    )


def require(dialect: str) -> Any:
    """An engine on the server's `test` database; fails (not skips) if it does not answer."""
    name, variable = SERVER[dialect]
    if variable not in os.environ:
        ensure(name)  # the project's server: started unless it runs
    engine = _engine(dialect)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        pytest.fail(
            f"the {dialect} test server at "
            f"{PG_HOST if dialect == 'postgresql' else MY_HOST} is unreachable ({exc}); "
            f"see scripts/servers.sh status {name} and its log (scripts/servers.sh logs {name})",
            pytrace=False,
        )
    return engine


@pytest.fixture
def pg() -> Iterator[Db]:
    yield from _namespace("postgresql")


@pytest.fixture
def my() -> Iterator[Db]:
    yield from _namespace("mysql")


@pytest.fixture(params=["mysql", "postgresql"])
def db(request: pytest.FixtureRequest) -> Iterator[Db]:
    """Each test twice: on MariaDB and on PostgreSQL."""
    yield from _namespace(request.param)


def _namespace(dialect: str) -> Iterator[Db]:
    engine = require(dialect)
    name = f"sluice_t_{uuid.uuid4().hex[:10]}"
    quote = '"' if dialect == "postgresql" else "`"
    kind = "SCHEMA" if dialect == "postgresql" else "DATABASE"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE {kind} {quote}{name}{quote}")
    if dialect == "mysql":
        engine = _engine(dialect, name)
    else:
        import sqlalchemy as sa

        engine = sa.create_engine(
            f"postgresql+psycopg://root@{PG_HOST}/test",
            connect_args={"options": f"-c TimeZone=UTC -c search_path={name}"},
            poolclass=sa.pool.NullPool,
        )
    try:
        yield Db(dialect, name, engine)
    finally:
        drop = f"DROP {kind} IF EXISTS {quote}{name}{quote}"
        with require(dialect).begin() as conn:
            conn.exec_driver_sql(drop + (" CASCADE" if dialect == "postgresql" else ""))


# -- driving connectors without Spark -------------------------------------------------------------
def source_task(config: dict[str, str], max_tasks: int = 1) -> list[Any]:
    """Plan a JDBC source like the runtime does and start its tasks (driver side)."""
    from sluice.connectors.jdbc import JdbcSourceConnector, JdbcSourceTask

    # an idle table is looked at again only after poll.interval.ms: tests look right away
    config = {"poll.interval.ms": "0", **config}
    connector = JdbcSourceConnector()
    connector.validate(config)
    connector.start(config)
    tasks = []
    for task_config in connector.task_configs(max_tasks):
        task = JdbcSourceTask()
        task.start(task_config)
        tasks.append(task)
    return tasks


def read_all(task: Any, max_rows: int | None = None, positions: dict | None = None) -> list[dict]:
    """Run `latest`/`read` until no partition advances; return the values read, in order.

    `positions` (partition key → offset) is updated in place, like the runtime's offset log.
    """
    import json

    from sluice.sdk import ReadLimit

    positions = {} if positions is None else positions
    out: list[dict] = []
    while True:
        moved = False
        for partition in task.partitions():
            key = json.dumps(partition, sort_keys=True)
            start = positions.get(key)
            end = task.latest(partition, start, ReadLimit(max_rows=max_rows))
            if end is None or end == start:
                continue
            for batch in task.read(partition, start, end):
                out.extend(batch.column("value").to_pylist())
            positions[key] = end
            moved = True
        if not moved:
            return out


def task_records(items: Iterable[Any]) -> list[Any]:
    """What a source task's `read` yields, as `ConnectRecord`s: its Arrow batches (a CDC
    snapshot chunk read in bulk) unrolled row by row."""
    import pyarrow as pa

    from sluice.sdk._arrow import records_from_batch

    out: list[Any] = []
    for item in items:
        out.extend(records_from_batch(item) if isinstance(item, pa.RecordBatch) else [item])
    return out


def sink_task(config: dict[str, str]) -> Any:
    """A started JDBC sink task, as the runtime starts one for a micro-batch."""
    from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSinkTask
    from sluice.sdk import BatchId, SinkTaskContext

    connector = JdbcSinkConnector()
    connector.validate(config)
    connector.start(config)
    task = JdbcSinkTask()
    task.context = SinkTaskContext(connector_name="t", task_id=0, batch_id=BatchId("run", 0))
    task.start(connector.task_configs(1)[0])
    return task
