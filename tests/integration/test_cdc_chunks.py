"""A CDC snapshot chunk read in bulk (the JDBC dialect's page: one text block parsed by Arrow)
holds exactly what the row-by-row path builds, on both databases: every type of the CDC type
tables, nulls, empty text and bytes; its keys are the row path's key texts; the `r` envelope
drops the rows whose key changed inside the chunk's window (`tests/unit/test_cdc_logic.py`).
Where the page cannot read a chunk
(a MariaDB chunk larger than one value) the row path reads it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sluice.connectors._sql.names import TableName
from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.connectors.cdc._envelope import key_text
from sluice.connectors.cdc._snapshot import chunk_query, snapshot_batch
from tests.integration import jdbc_db
from tests.integration import test_cdc_mysql as maria
from tests.integration import test_cdc_postgres as postgres
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_evolve import _task
from tests.integration.test_cdc_mysql import row_metadata  # noqa: F401  (fixture)
from tests.integration.test_cdc_postgres import slot  # noqa: F401  (fixture)

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures


def _chunk_both_ways(task: Any) -> tuple[Any, pa.StructArray, list[dict]]:
    """The whole table read as one chunk by the page, then again row by row."""
    (partition,) = task.partitions()
    table = task.tables[partition["table"]]
    query = chunk_query(
        task.db,
        TableName.parse(table.name),
        "id",
        None,
        {"lsn": 0, "file": "", "pos": 0, "snapshot": {"upto": None, "done": True}},
    )
    bulk = task.select_chunk(table, query)
    assert isinstance(bulk, pa.StructArray), "the page did not read the chunk"
    mapped, table.mapped = table.mapped, None  # a plan without the columns' reading: row path
    rows = task.select_chunk(table, query)
    table.mapped = mapped
    assert isinstance(rows, list)
    return table, bulk, sorted(rows, key=lambda r: r["id"])


def _same(table: Any, bulk: pa.StructArray, rows: list[dict]) -> None:
    # compared as what reaches the frame: the row path's values typed as the schema
    assert len(bulk) == len(rows) > 0
    as_typed = pa.array(rows, bulk.type)
    for i, field in enumerate(bulk.type):
        assert bulk.field(i).equals(as_typed.field(i)), field.name
    assert bulk.equals(as_typed)
    keys = snapshot_batch(table, bulk, set(), {}, 0).column("key").to_pylist()
    assert keys == [key_text(r, table.pk) for r in rows]


def test_mariadb_chunk_in_bulk_is_the_row_path(my: Db, row_metadata) -> None:  # noqa: F811
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} ({maria.MY_TABLE})")
    marks = ", ".join(["%s"] * len(maria.COLUMNS))
    my.executemany(f"INSERT INTO {items} VALUES ({marks})", [maria._row(i) for i in range(1, 40)])
    my.execute(f"INSERT INTO {items} (id) VALUES (1000)")  # every other column null
    my.execute(f"INSERT INTO {items} (id, vc, tx, bl) VALUES (1001, '', '', X'')")
    _, task = _task(MySqlCdcSourceConnector, maria._source(my, **{"snapshot.mode": "initial"}))
    table, bulk, rows = _chunk_both_ways(task)
    _same(table, bulk, rows)
    empty = bulk.to_pylist()[-1]
    assert (empty["vc"], empty["tx"], empty["bl"]) == ("", "", b"")
    assert all(v is None for k, v in bulk.to_pylist()[-2].items() if k != "id")

    # a chunk larger than one value of the server's: read in halves of the key's range, down
    # to pages that fit; a single row larger than a value sends the chunk row by row
    (page,) = task._pages.values()
    query = (f" FROM {my.table('items')}", ())
    page.max_bytes = page.page_bytes // 5
    halves = task.select_chunk(table, query)
    assert isinstance(halves, pa.StructArray) and halves.equals(bulk)
    page.max_bytes = 64
    assert task.select_chunk(table, query) == rows


def test_postgresql_chunk_in_bulk_is_the_row_path(pg: Db, slot: str) -> None:  # noqa: F811
    items = pg.table("items")
    pg.execute(f"CREATE TABLE {items} ({postgres.PG_TABLE})")
    postgres._insert(pg, [postgres._row(i) for i in range(1, 40)])
    pg.execute(f"INSERT INTO {items} (id) VALUES (1000)")
    pg.execute(f"INSERT INTO {items} (id, vc, tx, bin) VALUES (1001, '', '', ''::bytea)")
    _, task = _task(PostgresCdcSourceConnector, postgres._source(pg, slot))
    table, bulk, rows = _chunk_both_ways(task)
    _same(table, bulk, rows)
    empty = bulk.to_pylist()[-1]
    assert (empty["vc"], empty["tx"], empty["bin"]) == ("", "", b"")
