"""Benchmark: the lake sinks against their format's own Python writer called once, same run.

N records of ~200 bytes (a key, a header, a JSON object value of five fields) in a topic of the
embedded bus (8 queues), written to each table format:

  baseline  the same rows as one Arrow table (the sink's own columns, built before the clock
            starts), written in one call: `pyarrow.parquet.write_table`,
            `deltalake.write_deltalake`, pyiceberg `table.append`; and "parse+call": the same
            plus parsing the JSON values into those columns (`pyarrow.json`, one thread-pool
            call), which the sink must do too;
  sluice    topic → `ParquetSinkConnector` / `DeltaSinkConnector` / `IcebergSinkConnector`
            (`max.tasks` tasks, local[2]), already running: a warm-up of N/10 records first, then
            timed from writing the N records into the topic until the table holds them all
            (appending to the topic — reported apart —, reading and decoding it, parsing the
            JSON values, staging, committing).

Usage: python bench/lake.py [--records 1000000] [--tasks 2] [--formats parquet,delta,iceberg]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.json as pajson
import pyarrow.parquet as pq
from bench._wait import until

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.embedded.log import EmbeddedLog
from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

QUEUES = 8
REGIONS = ("eu", "us", "apac")


def frame(first: int, n: int) -> pa.Table:
    """Records first … first+n-1 as the topic stores them (~200 bytes each)."""
    ids = range(first, first + n)
    values = [
        json.dumps(
            {
                "id": i,
                "name": f"customer {i}",
                "region": REGIONS[i % 3],
                "amount": i * 0.25,
                "note": "x" * 100,
            }
        ).encode()
        for i in ids
    ]
    return pa.table(
        {
            "key": pa.array([b"k%d" % (i % 1000) for i in ids], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(
                [1_790_000_000_000_000] * n, STORED_SCHEMA.field("timestamp").type
            ),
            "headers": pa.array(['{"h":"v"}'] * n, pa.string()),
        },
        schema=STORED_SCHEMA,
    )


def frames(first: int, n: int) -> list[pa.Table]:
    """The records in pieces of 100,000, built before any clock starts."""
    return [frame(s, min(100_000, first + n - s)) for s in range(first, first + n, 100_000)]


def fill(root: str, pieces: list[pa.Table]) -> None:
    log = EmbeddedLog(os.path.join(root, "bus"))
    try:
        log.create_topic("bench", queues=QUEUES)
        for data in pieces:
            cuts = [len(data) * q // QUEUES for q in range(QUEUES + 1)]
            for q in range(QUEUES):
                log.append("bench", q, data.slice(cuts[q], cuts[q + 1] - cuts[q]))
    finally:
        log.close()


def rows(data: pa.Table) -> pa.Table:
    """The rows the sinks write for these records (value fields + metadata columns)."""
    n = len(data)
    parsed = pajson.read_json(io.BytesIO(b"\n".join(data["value"].to_pylist())))
    meta = {
        "_topic": pa.array(["bench"] * n),
        "_queue_id": pa.array([0] * n, pa.int32()),
        "_queue_offset": pa.array(range(n), pa.int64()),
        "_key": data["key"].cast(pa.string()),
        "_timestamp": data["timestamp"],
        "_headers": data["headers"],
    }
    for name, column in meta.items():
        parsed = parsed.append_column(name, column)
    return parsed


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def baseline(kind: str, table: pa.Table, where: str) -> float:
    if kind == "parquet":
        os.makedirs(where)
        return timed(lambda: pq.write_table(table, os.path.join(where, "all.parquet")))
    if kind == "delta":
        from deltalake import write_deltalake

        return timed(lambda: write_deltalake(where, table))
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(where)
    catalog = SqlCatalog("b", uri=f"sqlite:///{where}/c.sqlite", warehouse=f"file://{where}")
    catalog.create_namespace("b")
    target = catalog.create_table("b.t", schema=table.schema)
    return timed(lambda: target.append(table))


def count(kind: str, where: dict[str, str]) -> int:
    try:
        if kind == "parquet":
            return ds.dataset(where["path"], format="parquet").count_rows()
        if kind == "delta":
            from deltalake import DeltaTable

            return DeltaTable(where["delta.table.path"]).count()
        from pyiceberg.catalog.sql import SqlCatalog

        wh = where["iceberg.warehouse"]
        if not os.path.exists(f"{wh}/catalog.sqlite"):  # the sink creates it, not the bench
            return 0
        catalog = SqlCatalog(
            "sluice", uri=f"sqlite:///{wh}/catalog.sqlite", warehouse=f"file://{wh}"
        )
        snapshot = catalog.load_table("b.t").current_snapshot()
        return int(snapshot.summary["total-records"]) if snapshot else 0
    except Exception:  # not created yet
        return 0


def target(kind: str, root: str) -> dict[str, str]:
    if kind == "parquet":
        return {"connector.class": "ParquetSinkConnector", "path": f"{root}/parquet"}
    if kind == "delta":
        return {"connector.class": "DeltaSinkConnector", "delta.table.path": f"{root}/delta"}
    return {
        "connector.class": "IcebergSinkConnector",
        "iceberg.warehouse": f"{root}/warehouse",
        "iceberg.table": "b.t",
    }


def reached(kind: str, where: dict[str, str], n: int) -> bool:
    return count(kind, where) >= n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--formats", default="parquet,delta,iceberg")
    args = parser.parse_args()
    n, warm = args.records, max(args.records // 10, 1000)
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; {n:,} records of ~200 bytes, {args.tasks} tasks"
    )
    root = tempfile.mkdtemp(prefix="sluice-bench-lake-")
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    records = frame(0, n)
    parse = timed(lambda: rows(records))  # the JSON parsing the sink does too
    table = rows(records)
    try:
        for kind in args.formats.split(","):
            write = baseline(kind, table, f"{root}/plain-{kind}")
            plain, parsed = n / write, n / (parse + write)
            store = f"{root}/store-{kind}"
            runner = ConnectorRunner(spark, store, trigger_interval_ms=0, default_queues=QUEUES)
            where = target(kind, root)
            try:
                fill(store, frames(0, warm))
                pieces = frames(warm, n)
                runner.start(
                    kind, {**where, "connect.topicnames": "bench", "max.tasks": str(args.tasks)}
                )
                until(partial(reached, kind, where, warm), runner)
                started = time.perf_counter()
                fill(store, pieces)
                filled = time.perf_counter() - started
                until(partial(reached, kind, where, warm + n), runner)
                sink = n / (time.perf_counter() - started)
            finally:
                runner.close()
            print(
                f"{kind:8} one call {plain:>10,.0f} rows/s, parse+call {parsed:>10,.0f} rows/s; "
                f"sluice sink {sink:>10,.0f} rows/s ({sink / plain:.2f}x, {sink / parsed:.2f}x; "
                f"{filled:.1f} s of it appending to the topic)",
                flush=True,
            )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
