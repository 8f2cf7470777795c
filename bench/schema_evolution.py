"""What schema evolution costs (docs/schemas.md), each against a baseline measured in the same run.

1. A fused sink plans its decoders again at every micro-batch (`SinkRunner.codecs`): time of one
   `plan_decoders` on the SQLite registry, against decoding one 10,000-row micro-batch.
2. After a sink took version 2, records of version 1 (a replay) are decoded with their writer
   schema and projected: rows/s of version-1 records decoded as version 2, against version-2
   records (the reader's own version, vectorised).
3. A JDBC source looks at its table's columns when a micro-batch has new rows: time of one
   `Database.columns` on PostgreSQL, against reading one 10,000-row page of the same table.

    .venv/bin/python bench/schema_evolution.py      # PostgreSQL: scripts/servers.sh up postgres
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa

from sluice.converters import canonical, converter_from_config
from sluice.engine.converters import plan_decoders
from sluice.sdk import FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry

AVRO = {"value.converter": "AvroConverter"}
COLUMNS = [(f"c{i}", Schema.of(FieldType.INT64, optional=False)) for i in range(6)]
V1 = Schema.struct(("id", Schema.of(FieldType.INT64, optional=False)), *COLUMNS, optional=False)
V2 = Schema.struct(*V1.fields, ("updated", Schema.timestamp()), optional=False)


def _mean_s(fn: Callable[[], object], n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _rows(schema: Schema, n: int) -> pa.Array:
    data = {f.name: list(range(n)) for f in schema.fields if f.name != "updated"}
    if "updated" in {f.name for f in schema.fields}:
        data["updated"] = [None] * n
    return pa.StructArray.from_arrays(
        [pa.array(data[f.name], f.schema.to_arrow()) for f in schema.fields],
        fields=list(schema.to_arrow()),
    )


def registry_part(batch_rows: int) -> None:
    registry = SqliteSchemaRegistry(os.path.join(tempfile.mkdtemp(), "schemas.sqlite"))
    registry.register("t-value", canonical(V1))
    encode = converter_from_config(AVRO, "value", registry).encoder
    old = encode(V1).arrow(_rows(V1, batch_rows))
    registry.register("t-value", canonical(V2))
    new = encode(V2).arrow(_rows(V2, batch_rows))
    decoder = plan_decoders(AVRO, ["t"], registry).value
    replan = _mean_s(lambda: plan_decoders(AVRO, ["t"], registry), 300)
    decode_new = _mean_s(lambda: decoder.arrow(new), 20)
    decode_old = _mean_s(lambda: decoder.arrow(old), 5)
    print(f"1. plan_decoders (per task and micro-batch): {replan * 1e3:.3f} ms")
    print(f"   baseline: decode {batch_rows} rows of the same version: {decode_new * 1e3:.1f} ms")
    print(f"   overhead: {replan / decode_new * 100:.2f} % of that decode")
    print(f"2. version-1 records read as version 2: {batch_rows / decode_old:,.0f} rows/s")
    print(f"   baseline: version-2 records (vectorised): {batch_rows / decode_new:,.0f} rows/s")


def catalog_part(batch_rows: int) -> None:
    from sluice.connectors._sql.db import Database
    from sluice.connectors.jdbc._config import SourceSettings, TableName

    host = os.environ.get("SLUICE_TEST_PG", "127.0.0.1:5432")
    settings = SourceSettings.parse(
        {
            "connection.url": f"jdbc:postgresql://{host}/test",
            "connection.user": "root",
            "mode": "bulk",
            "table.whitelist": "x",
            "connect.topicname": "t",
        }
    )
    db = Database(settings.connection)
    with db.connect() as conn:
        conn.exec_driver_sql(
            "CREATE TEMP TABLE bench_schema (id bigserial PRIMARY KEY, "
            + ", ".join(f"c{i} bigint NOT NULL" for i in range(6))
            + ", updated timestamptz NOT NULL DEFAULT now())"
        )
        conn.exec_driver_sql(
            "INSERT INTO bench_schema (c0, c1, c2, c3, c4, c5) "
            f"SELECT g, g, g, g, g, g FROM generate_series(1, {batch_rows}) g"
        )
        table = TableName("", "bench_schema")
        check = _mean_s(lambda: db.columns(conn, table), 200)
        page = _mean_s(
            lambda: conn.exec_driver_sql(
                f"SELECT * FROM bench_schema ORDER BY id LIMIT {batch_rows}"
            ).fetchall(),
            10,
        )
    print(f"3. JDBC source column check (per micro-batch with new rows): {check * 1e3:.2f} ms")
    print(f"   baseline: read one {batch_rows}-row page of the table: {page * 1e3:.1f} ms")
    print(f"   overhead: {check / page * 100:.2f} % of that read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows per micro-batch")
    args = parser.parse_args()
    registry_part(args.rows)
    catalog_part(args.rows)


if __name__ == "__main__":
    main()
