"""Benchmark: an 8-column table PostgreSQL → topic → PostgreSQL and MariaDB → topic → PostgreSQL.

Steps, each timed from start until the target table holds every row (after an untimed warm-up
copy of a small table, which starts Spark's Python workers); "steady" is the rate between 20% and
80% of the rows, without the start-up of the two queries:
  baseline   `psql -c "COPY src TO STDOUT" | psql -c "COPY dst FROM STDIN"` (the physical floor);
  pg → pg    JdbcSourceConnector (incrementing) → topic → JdbcSinkConnector, both started together;
  maria → pg the same from MariaDB;
  dlt        `dlt` (sql_database → postgres), when `--dlt-python` names an interpreter that has it.

The source tables are generated on the servers (generate_series / MariaDB's sequence engine) in
the schema/database `sluice_bench`, which the run drops at the end. Needs the test servers
(PostgreSQL on 127.0.0.1:5432, MariaDB on 127.0.0.1:3306, user root, no password).

With `--stages N`, it then times each stage alone on N rows in this process (no Spark): each
source into Arrow (MariaDB both ways: CSV pages and driver rows), the converter's encode and decode,
and the PostgreSQL sink in insert and upsert mode.

Usage: python bench/jdbc_copy.py [--rows 2000000] [--tasks 2] [--mode upsert|insert]
       [--converter AvroConverter] [--dlt-python /path/to/venv/bin/python] [--skip pg,maria]
       [--stages 200000]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

NS = "sluice_bench"
WARM = 20_000  # rows of the untimed warm-up copy (starts Spark's Python workers, imports)
PG = f"postgresql+psycopg://root@127.0.0.1:5432/test?options=-csearch_path%3D{NS}"
MY = f"mysql+pymysql://root@127.0.0.1:3306/{NS}?charset=utf8mb4"
COLUMNS_PG = (
    "id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, amount NUMERIC(18,4), qty INTEGER, "
    "price DOUBLE PRECISION, flag BOOLEAN, created TIMESTAMPTZ(6), note TEXT"
)


def setup(rows: int) -> None:
    with sa.create_engine("postgresql+psycopg://root@127.0.0.1:5432/test").begin() as c:
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.exec_driver_sql(f"CREATE SCHEMA {NS}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.src ({COLUMNS_PG})")
        c.exec_driver_sql(
            f"""INSERT INTO {NS}.src SELECT g, 'name ' || g, g * 1.5, g %% 1000, g / 7.0,
                g %% 2 = 0, timestamptz '2024-01-01' + g * interval '1 second',
                'note ' || md5(g::text) FROM generate_series(1, {rows}) g"""
        )
        c.exec_driver_sql(f"CREATE TABLE {NS}.warm AS SELECT * FROM {NS}.src WHERE id <= {WARM}")
        c.exec_driver_sql(f"ALTER TABLE {NS}.warm ADD PRIMARY KEY (id)")
    with sa.create_engine("mysql+pymysql://root@127.0.0.1:3306/test").begin() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
        c.exec_driver_sql(f"CREATE DATABASE {NS}")
        c.exec_driver_sql(
            f"CREATE TABLE {NS}.src (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
            "amount DECIMAL(18,4), qty INT, price DOUBLE, flag BOOLEAN, created DATETIME(6), "
            "note TEXT) CHARSET utf8mb4"
        )
        c.exec_driver_sql(
            f"""INSERT INTO {NS}.src SELECT seq, CONCAT('name ', seq), seq * 1.5, seq %% 1000,
                seq / 7.0, seq %% 2 = 0, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND,
                CONCAT('note ', MD5(seq)) FROM seq_1_to_{rows}"""
        )


def fresh_target(name: str) -> None:
    with sa.create_engine(PG).begin() as c:
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {NS}.{name}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.{name} ({COLUMNS_PG})")


_TARGET: sa.Engine | None = None


def _target() -> sa.Engine:
    global _TARGET
    if _TARGET is None:
        _TARGET = sa.create_engine(PG)
    return _TARGET


def count(name: str) -> int:
    with _target().connect() as c:
        return c.exec_driver_sql(f"SELECT COUNT(*) FROM {NS}.{name}").scalar()


def copied(name: str) -> int:
    """Rows committed so far, cheaply: the largest id (an index probe). The source's ids are
    1..N and each micro-batch commits in one transaction, in order, so that is the row count
    at every commit; polling COUNT(*) instead cost PostgreSQL ~4 s of CPU per copy, on the same
    two cores as the copy."""
    with _target().connect() as c:
        return c.exec_driver_sql(f"SELECT COALESCE(MAX(id), 0) FROM {NS}.{name}").scalar()


def baseline(rows: int) -> tuple[float, float, str]:
    fresh_target("dst_copy")
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(
        f'psql -h 127.0.0.1 -U root -d test -c "COPY {NS}.src TO STDOUT" | '
        f'psql -h 127.0.0.1 -U root -d test -c "COPY {NS}.dst_copy FROM STDIN"',
        shell=True,
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - start
    assert count("dst_copy") == rows
    return seconds, rows / seconds, f"{load:.1f} → {os.getloadavg()[0]:.1f}"


def sluice_copy(
    runner: ConnectorRunner,
    source_url: str,
    target: str,
    rows: int,
    args: argparse.Namespace,
    table: str = "src",
) -> tuple[float, float, str]:
    """Seconds until the target holds every row; the steady rate (rows/s between 20% and 80%
    of the rows); the load averages at start and end."""
    fresh_target(target)
    conv = {"value.converter": args.converter}
    topic = f"bench-{target}"
    load = os.getloadavg()[0]
    start = time.perf_counter()
    runner.start(
        f"src-{target}",
        {
            "connector.class": "JdbcSourceConnector",
            "connection.url": source_url,
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": table,
            "connect.topicname": topic,
            "max.tasks": str(args.tasks),
            "read.max.rows": str(args.batch),
            **conv,
        },
    )
    runner.start(
        f"dst-{target}",
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": f"jdbc:postgresql://127.0.0.1:5432/test?currentSchema={NS}",
            "connection.user": "root",
            "connect.topicnames": topic,
            "table.name.format": target,
            "insert.mode": args.mode,
            "pk.mode": "record_value",
            "pk.fields": "id",
            "max.tasks": str(args.tasks),
            **conv,
        },
    )
    deadline = time.monotonic() + 3600
    trace: list[tuple[float, int]] = []
    while (done := copied(target)) < rows:
        trace.append((time.perf_counter() - start, done))
        for running in runner.running.values():
            failure = running.failure()
            if failure:
                raise RuntimeError(failure[0])
        if time.monotonic() > deadline:
            raise TimeoutError(target)
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    trace.append((seconds, rows))
    runner.stop_all()
    assert count(target) == rows, f"{target}: {count(target)} rows, expected {rows}"
    return seconds, _steady(trace, rows), f"{load:.1f} → {os.getloadavg()[0]:.1f}"


def _steady(trace: list[tuple[float, int]], rows: int) -> float:
    """Rows/s between the first samples at or past 20% and 80% of `rows` (0 if too few)."""
    low = next(((t, n) for t, n in trace if n >= rows * 0.2), None)
    high = next(((t, n) for t, n in trace if n >= rows * 0.8), None)
    if low is None or high is None or high[0] <= low[0]:
        return 0.0
    return (high[1] - low[1]) / (high[0] - low[0])


def dlt_copy(python: str, rows: int) -> tuple[float, float, str] | None:
    fresh_target("dst_dlt")
    load = os.getloadavg()[0]
    script = f"""
import time, dlt
from dlt.sources.sql_database import sql_table
start = time.perf_counter()
src = sql_table(credentials="postgresql+psycopg2://root@127.0.0.1:5432/test", schema="{NS}",
                table="src", backend="pyarrow")
# dlt insists on a password; the test server trusts local connections and ignores it
pipe = dlt.pipeline(pipeline_name="sluice_bench", destination=dlt.destinations.postgres(
    "postgresql://root:unused@127.0.0.1:5432/test"), dataset_name="{NS}_dlt")
pipe.run(src, write_disposition="replace", table_name="dst_dlt")
print(time.perf_counter() - start)
"""
    done = subprocess.run([python, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        print("dlt failed:", done.stderr[-2000:], file=sys.stderr)
        return None
    seconds = float(done.stdout.strip().splitlines()[-1])
    return seconds, rows / seconds, f"{load:.1f} → {os.getloadavg()[0]:.1f}"


def stages(rows: int, converter: str) -> list[tuple[str, float, str]]:
    """Each stage alone, in this process (no Spark): (name, rows/s, load average)."""
    from sluice.connectors._sql.dialects import mysql as my_dialect
    from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSinkTask, JdbcSourceConnector
    from sluice.connectors.jdbc import source as source_module
    from sluice.converters import converter_from_config
    from sluice.engine.converters import spark_arrow_type
    from sluice.sdk import BatchId, ReadLimit, SinkTaskContext
    from sluice.store.schemas import SqliteSchemaRegistry
    from sluice.testing import sink_frame

    out: list[tuple[str, float, str]] = []

    def timed(name: str, work: Any) -> Any:
        start = time.perf_counter()
        result = work()
        out.append((name, rows / (time.perf_counter() - start), f"{os.getloadavg()[0]:.1f}"))
        return result

    def read(url: str) -> tuple[list[pa.RecordBatch], Any]:
        config = {
            "connection.url": url,
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": "src",
            "connect.topicname": "t",
        }
        connector = JdbcSourceConnector()
        connector.start(config)
        task = source_module.JdbcSourceTask()
        task.start(connector.task_configs(1)[0])
        part = task.partitions()[0]
        end = task.latest(part, None, ReadLimit(max_rows=rows))
        return list(task.read(part, None, end)), connector.value_schema()

    pg_url = f"jdbc:postgresql://127.0.0.1:5432/test?currentSchema={NS}&user=root"
    batches, schema = timed("PostgreSQL source (COPY → Arrow)", lambda: read(pg_url))
    my_url = f"jdbc:mysql://127.0.0.1:3306/{NS}?user=root"
    timed("MariaDB source (CSV page → Arrow)", lambda: read(my_url))
    real = my_dialect.CsvPage.fetch
    my_dialect.CsvPage.fetch = lambda *a, **k: None  # type: ignore[method-assign]
    try:
        timed("MariaDB source (driver rows)", lambda: read(my_url))
    finally:
        my_dialect.CsvPage.fetch = real  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        registry = SqliteSchemaRegistry(os.path.join(tmp, "schemas.db"))
        conv = converter_from_config({"value.converter": converter}, "value", registry)
        encoder, decoder = conv.encoder(schema), conv.decoder(schema)
        encoded = timed(
            f"{converter} encode", lambda: [encoder.arrow(b.column("value")) for b in batches]
        )
        timed(
            f"{converter} decode",
            lambda: [decoder.arrow(e).values.cast(spark_arrow_type(schema)) for e in encoded],
        )
    from sluice.connectors.jdbc import sink as sink_module

    real_submit = sink_module._EarlyWrites.submit

    def at_flush_only(self: Any, table: Any, piece: Any) -> None:
        self.abandon()

    for mode, early in (("insert", True), ("upsert", True), ("upsert", False)):
        fresh_target("dst_stage")
        config = {
            "connection.url": f"jdbc:postgresql://127.0.0.1:5432/test?currentSchema={NS}",
            "connection.user": "root",
            "connect.topicnames": "t",
            "table.name.format": "dst_stage",
            "insert.mode": mode,
            "pk.mode": "record_value",
            "pk.fields": "id",
        }
        sink = JdbcSinkConnector()
        sink.start(config)
        task = JdbcSinkTask()
        task.context = SinkTaskContext(connector_name="s", task_id=0, batch_id=BatchId("r", 1))
        task.start(sink.task_configs(1)[0])

        def write(task: Any = task) -> None:
            first = 0
            for piece in encoded:  # decoded piece by piece, as a sink task reads its topic
                value = decoder.arrow(piece).values.cast(spark_arrow_type(schema))
                task.put_batch(sink_frame(value, "t", first=first))
                first += len(value)
            task.flush(BatchId("r", 1))

        sink_module._EarlyWrites.submit = real_submit if early else at_flush_only
        try:
            when = "while decoding" if early else "at flush only"
            timed(f"decode + PostgreSQL sink {mode} (COPY), written {when}", write)
        finally:
            sink_module._EarlyWrites.submit = real_submit
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500_000, help="read.max.rows")
    parser.add_argument("--mode", default="upsert", choices=("upsert", "insert"))
    parser.add_argument("--converter", default="AvroConverter")
    parser.add_argument("--dlt-python", default="")
    parser.add_argument("--skip", default="", help="comma list of steps to skip: pg,maria")
    parser.add_argument(
        "--stages", type=int, default=0, help="also time each stage alone on this many rows"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    skip = set(args.skip.split(","))
    print(f"generating {args.rows:,} rows on both servers…", flush=True)
    setup(args.rows)
    results: list[tuple[str, tuple[float, float, str] | None]] = [
        ("baseline: psql COPY | psql COPY", baseline(args.rows))
    ]
    spark = build_session(
        {"spark.master": "local[*]", "spark.driver.memory": "4g"}, log_level="ERROR"
    )
    root = tempfile.mkdtemp(prefix="sluice-bench-")
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    try:
        pg_url = f"jdbc:postgresql://127.0.0.1:5432/test?currentSchema={NS}&user=root"
        my_url = f"jdbc:mysql://127.0.0.1:3306/{NS}?user=root"
        if not {"pg", "maria"} <= skip:
            print("warm-up (untimed)…", flush=True)
            sluice_copy(runner, pg_url, "dst_warm", WARM, args, table="warm")
        for step, url, target in (("pg", pg_url, "dst_pg"), ("maria", my_url, "dst_maria")):
            if step not in skip:
                print(f"{step} → topic → pg…", flush=True)
                copied = sluice_copy(runner, url, target, args.rows, args)
                results.append((f"{step} → topic → pg", copied))
        if args.dlt_python:
            results.append(("dlt sql_database → postgres", dlt_copy(args.dlt_python, args.rows)))
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{args.rows:,} rows x 8 columns, mode={args.mode}, converter={args.converter}, "
        f"max.tasks={args.tasks}, read.max.rows={args.batch}; {platform.node()}, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    first = results[0][1]
    base = first[0] if first else 1.0
    print(
        "| step | seconds | rows/s | steady rows/s | x COPY pipe | load avg |\n"
        "|---|---:|---:|---:|---:|---|"
    )
    for name, result in results:
        if result is None:
            print(f"| {name} | failed | | | | |")
            continue
        seconds, steady, load = result
        print(
            f"| {name} | {seconds:.2f} | {args.rows / seconds:,.0f} | {steady:,.0f} | "
            f"{seconds / base:.2f} | {load} |"
        )
    if args.stages:
        print(f"\neach stage alone, {args.stages:,} rows, no Spark\n| stage | rows/s | load avg |")
        print("|---|---:|---:|")
        for name, rate, load in stages(args.stages, args.converter):
            print(f"| {name} | {rate:,.0f} | {load} |")
    with sa.create_engine("postgresql+psycopg://root@127.0.0.1:5432/test").begin() as c:
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS}_dlt CASCADE")
    with sa.create_engine("mysql+pymysql://root@127.0.0.1:3306/test").begin() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")


if __name__ == "__main__":
    main()
