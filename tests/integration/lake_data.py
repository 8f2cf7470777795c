"""Records for the lake sink tests, written into an embedded topic, and each format read back by
engines other than the one that wrote it (Spark, DuckDB, pyarrow)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.embedded.log import EmbeddedLog

REGIONS = ("eu", "us", "日本/東京")  # a '/' in a partition value must be escaped
DAY = datetime(2026, 11, 24, 10, 30, tzinfo=UTC)


def record(i: int, *, note: bool = False) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i,
        "name": f"ünïcødé 日本 {i}",
        "region": REGIONS[i % 3],
        "amount": i * 0.5,
    }
    if note:
        value["note"] = f"nötiz {i}"
    return value


def fill(root: str | Path, topic: str, first: int, n: int, *, note: bool = False) -> None:
    """Write records `first … first+n-1` to `topic` (4 queues) of the embedded bus under `root`:
    a key on two of three, a header on every other one, JSON object values."""
    log = EmbeddedLog(os.path.join(root, "bus"))
    try:
        log.create_topic(topic, queues=4)
        for queue in range(4):
            ids = [i for i in range(first, first + n) if i % 4 == queue]
            batch = pa.record_batch(
                [
                    pa.array([f"k-ü{i}".encode() if i % 3 else None for i in ids], pa.binary()),
                    pa.array(
                        [
                            json.dumps(record(i, note=note), ensure_ascii=False).encode()
                            for i in ids
                        ],
                        pa.binary(),
                    ),
                    pa.array([DAY] * len(ids), STORED_SCHEMA.field("timestamp").type),
                    pa.array(
                        [json.dumps({"h": f"wert ü {i}"}) if i % 2 else None for i in ids],
                        pa.string(),
                    ),
                ],
                schema=STORED_SCHEMA,
            )
            if ids:
                log.append(topic, queue, batch)
    finally:
        log.close()


def check_rows(rows: list[dict[str, Any]], n: int, *, noted_from: int | None = None) -> None:
    """Each of the `n` records exactly once, with its key, header, value and partition."""
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(n)), f"{len(ids)} rows, {len(set(ids))} distinct ids, want {n}"
    for r in rows:
        i = r["id"]
        want = record(i)
        assert r["name"] == want["name"] and r["region"] == want["region"], r
        assert r["amount"] == want["amount"], r
        key = r["_key"]
        key = key.encode() if isinstance(key, str) else key
        assert key == (f"k-ü{i}".encode() if i % 3 else None), r
        assert (json.loads(r["_headers"]) if r["_headers"] else None) == (
            {"h": f"wert ü {i}"} if i % 2 else None
        ), r
        assert str(r["dt"]) == "2026-11-24", r
        if noted_from is not None:
            assert r.get("note") == (f"nötiz {i}" if i >= noted_from else None), r


# ---------------------------------------------------------------------------- reading back
def _duckdb(sql: str) -> list[dict[str, Any]]:
    import duckdb

    con = duckdb.connect()
    try:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def _quoted(files: list[str]) -> str:
    return "[" + ", ".join("'" + f.removeprefix("file://") + "'" for f in files) + "]"


def delta_parts(path: str) -> dict[tuple[tuple[str, str], ...], list[str]]:
    """The table's data files grouped by their partition values, as its log records them (a
    reader without Delta support must not take them from folder names: delta-rs escapes
    non-ASCII there as UTF-8 %XX, which Spark's partition discovery decodes byte by byte)."""
    from urllib.parse import unquote

    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    parts: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for action in actions:
        values = tuple(
            (k.removeprefix("partition."), v)
            for k, v in action.items()
            if k.startswith("partition.")
        )
        parts.setdefault(values, []).append(os.path.join(path, unquote(action["path"])))
    return parts


def iceberg_table(warehouse: str, name: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    if not os.path.exists(f"{warehouse}/catalog.sqlite"):  # the sink creates it, not a reader
        raise FileNotFoundError(f"no catalog in {warehouse}")
    catalog = SqlCatalog(
        "sluice", uri=f"sqlite:///{warehouse}/catalog.sqlite", warehouse=f"file://{warehouse}"
    )
    return catalog.load_table(name)


def read_with(kind: str, engine: str, spark: Any, where: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of a table written by the `kind` sink, read by `engine` (pyarrow | spark |
    duckdb). Delta and Iceberg are read by Spark and DuckDB from the data files their log or
    manifests list (their Spark/DuckDB readers need jars or extensions from the network)."""
    if kind in ("parquet", "json"):
        path = where["path"]
        if engine == "spark":
            reader = spark.read.option("mergeSchema", "true")
            return _spark_rows(reader.parquet(path) if kind == "parquet" else reader.json(path))
        if engine == "duckdb":
            fn = "read_parquet" if kind == "parquet" else "read_json_auto"
            return _duckdb(
                f"SELECT * FROM {fn}('{path}/**/*.{kind}', hive_partitioning=true, "
                "union_by_name=true)"
            )
        import pyarrow.dataset as ds

        found = ds.dataset(path, format=kind, partitioning="hive")
        # files written before a new field lack its column: read with the union of all schemas
        schema = pa.unify_schemas(
            [found.schema, *(f.physical_schema for f in found.get_fragments())]
        )
        merged = ds.dataset(path, format=kind, partitioning="hive", schema=schema)
        return merged.to_table().to_pylist()
    if kind == "delta":
        from deltalake import DeltaTable

        path = where["delta.table.path"]
        if engine == "pyarrow":
            return DeltaTable(path).to_pyarrow_table().to_pylist()
        rows = []
        for values, files in delta_parts(path).items():
            for row in _parquet_rows(engine, spark, files):
                rows.append({**row, **dict(values)})
        return rows
    table = iceberg_table(where["iceberg.warehouse"], where["iceberg.table"])
    if engine == "pyarrow":
        return table.scan().to_arrow().to_pylist()
    return _parquet_rows(engine, spark, [t.file.file_path for t in table.scan().plan_files()])


def _parquet_rows(engine: str, spark: Any, files: list[str]) -> list[dict[str, Any]]:
    if engine == "spark":
        return _spark_rows(spark.read.option("mergeSchema", "true").parquet(*files))
    return _duckdb(
        f"SELECT * FROM read_parquet({_quoted(files)}, hive_partitioning=false, union_by_name=true)"
    )
