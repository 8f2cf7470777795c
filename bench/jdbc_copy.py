"""Benchmark: an 8-column table PostgreSQL → topic → PostgreSQL and MariaDB → topic → PostgreSQL.

Steps, each timed from start until the target table holds every row:
  baseline   `psql -c "COPY src TO STDOUT" | psql -c "COPY dst FROM STDIN"` (the physical floor);
  pg → pg    JdbcSourceConnector (incrementing) → topic → JdbcSinkConnector, both started together;
  maria → pg the same from MariaDB;
  dlt        `dlt` (sql_database → postgres), when `--dlt-python` names an interpreter that has it.

The source tables are generated on the servers (generate_series / MariaDB's sequence engine) in
the schema/database `sluice_bench`, which the run drops at the end. Needs the test servers
(PostgreSQL on 127.0.0.1:5432, MariaDB on 127.0.0.1:3306, user root, no password).

Usage: python bench/jdbc_copy.py [--rows 2000000] [--tasks 2] [--mode upsert|insert]
       [--converter AvroConverter] [--dlt-python /path/to/venv/bin/python]
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

import sqlalchemy as sa

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

NS = "sluice_bench"
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


def count(name: str) -> int:
    with sa.create_engine(PG).connect() as c:
        return c.exec_driver_sql(f"SELECT COUNT(*) FROM {NS}.{name}").scalar()


def baseline(rows: int) -> float:
    fresh_target("dst_copy")
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
    return seconds


def sluice_copy(
    runner: ConnectorRunner, source_url: str, target: str, rows: int, args: argparse.Namespace
) -> float:
    fresh_target(target)
    conv = {"value.converter": args.converter}
    topic = f"bench-{target}"
    start = time.perf_counter()
    runner.start(
        f"src-{target}",
        {
            "connector.class": "JdbcSourceConnector",
            "connection.url": source_url,
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": "src",
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
    while count(target) < rows:
        for running in runner.running.values():
            failure = running.failure()
            if failure:
                raise RuntimeError(failure[0])
        if time.monotonic() > deadline:
            raise TimeoutError(target)
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    runner.stop_all()
    return seconds


def dlt_copy(python: str, rows: int) -> float | None:
    fresh_target("dst_dlt")
    script = f"""
import time, dlt
from dlt.sources.sql_database import sql_table
start = time.perf_counter()
src = sql_table(credentials="postgresql://root@127.0.0.1:5432/test", schema="{NS}", table="src",
                backend="pyarrow")
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
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500_000, help="read.max.rows")
    parser.add_argument("--mode", default="upsert", choices=("upsert", "insert"))
    parser.add_argument("--converter", default="AvroConverter")
    parser.add_argument("--dlt-python", default="")
    parser.add_argument("--skip", default="", help="comma list of steps to skip: pg,maria")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    skip = set(args.skip.split(","))
    print(f"generating {args.rows:,} rows on both servers…", flush=True)
    setup(args.rows)
    results: list[tuple[str, float | None]] = [
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
        if "pg" not in skip:
            results.append(
                ("pg → topic → pg", sluice_copy(runner, pg_url, "dst_pg", args.rows, args))
            )
        if "maria" not in skip:
            results.append(
                ("maria → topic → pg", sluice_copy(runner, my_url, "dst_maria", args.rows, args))
            )
        if args.dlt_python:
            results.append(("dlt sql_database → postgres", dlt_copy(args.dlt_python, args.rows)))
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{args.rows:,} rows x 8 columns, mode={args.mode}, converter={args.converter}, "
        f"max.tasks={args.tasks}, read.max.rows={args.batch}; {platform.node()}, "
        f"{os.cpu_count()} cores"
    )
    base = results[0][1] or 1.0
    print("| step | seconds | rows/s | x COPY pipe |\n|---|---:|---:|---:|")
    for name, seconds in results:
        if seconds is None:
            print(f"| {name} | failed | | |")
            continue
        print(f"| {name} | {seconds:.2f} | {args.rows / seconds:,.0f} | {seconds / base:.2f} |")
    with sa.create_engine("postgresql+psycopg://root@127.0.0.1:5432/test").begin() as c:
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS}_dlt CASCADE")
    with sa.create_engine("mysql+pymysql://root@127.0.0.1:3306/test").begin() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")


if __name__ == "__main__":
    main()
