"""MariaDB change data capture on real Spark and the real servers.

A MariaDB table, captured from the row binlog, mirrored through a topic into PostgreSQL by the
JDBC sink: a multi-row transaction, inserts, updates of non-key and key columns (to and from
NULL), deletes, in most of the JDBC type test's types; afterwards PostgreSQL equals MariaDB row for
row and the topic holds each change event exactly once. Then the errors a user meets first.
"""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from sluice.connectors.cdc import MySqlCdcSourceConnector
from sluice.sdk import ConfigException, ConnectException, ReadLimit
from tests.conftest import wait_until
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_postgres import mirror_sink
from tests.integration.test_dead_letters import topic_records

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

MY_TABLE = """
    id INT NOT NULL PRIMARY KEY, i8 TINYINT, u16 SMALLINT UNSIGNED, i32 INT, u32 INT UNSIGNED,
    i64 BIGINT, u64 BIGINT UNSIGNED, d DECIMAL(20,4), f64 DOUBLE, flag BIT(1), yr YEAR,
    vc VARCHAR(40), tx TEXT, e ENUM('red','green','blue'), bl BLOB, dt DATE, tm TIME(6),
    dtm DATETIME(6), tsz TIMESTAMP(6) NULL
"""
COLUMNS = ["id", "i8", "u16", "i32", "u32", "i64", "u64", "d", "f64", "flag", "yr", "vc", "tx"]
COLUMNS += ["e", "bl", "dt", "tm", "dtm", "tsz"]


def _row(i: int) -> tuple:
    return (
        i,
        -128 if i == 1 else i % 100,
        65535,
        -(2**31) + i,
        4294967295,
        -(2**63) + i,
        2**64 - 1,
        Decimal(f"{i}.1234"),
        1e300 / (i + 1),
        i % 2,
        2155 if i == 1 else 2000 + i % 100,
        f"v{i}",
        "🚀 ünïcödé 'q' \"dq\"\n" * (i % 3 + 1),
        ["red", "green", "blue"][i % 3],
        bytes(range(i % 256)) + b"\x00\xff",
        date(9999, 12, 31) if i == 1 else date(2024, 1, i % 28 + 1),
        "23:59:59.999999" if i == 1 else f"{i % 24:02d}:30:00.123456",
        datetime(2024, 5, 1, 10, 0, 0, i),
        datetime(2038, 1, 19, 3, 14, 7, 999999),
    )


def _norm(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (bytes, memoryview, bytearray)):
        b = bytes(value)
        return b[0] if len(b) == 1 and b in (b"\x00", b"\x01") else b
    if isinstance(value, float):
        return float(f"{value:.6e}")
    if isinstance(value, timedelta):
        return (datetime.min + value).time()
    if isinstance(value, time):
        return value
    return value


def _table(d: Db, where: str) -> list[tuple]:
    cols = ", ".join(d.q(c) for c in COLUMNS)
    return [tuple(_norm(v) for v in r) for r in d.rows(f"SELECT {cols} FROM {where} ORDER BY id")]


def _source(my: Db, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "MySqlCdcSourceConnector",
        **my.config(),
        "topic.prefix": "cdc",
        "table.include.list": f"{my.namespace}.items",
        "database.server.id": str(7000 + uuid.uuid4().int % 10_000),
        "value.converter": "AvroConverter",
        "snapshot.mode": "never",
        **extra,
    }


@pytest.fixture
def row_metadata(my: Db) -> None:
    # scripts/servers/mariadb.sh sets it; a server started by an older script may not have it
    my.execute("SET GLOBAL binlog_row_metadata = 'FULL'")


@pytest.mark.spark
def test_mariadb_to_postgresql_mirror_is_exact(my: Db, pg: Db, row_metadata, runner) -> None:
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} ({MY_TABLE})")
    marks = ", ".join(["%s"] * len(COLUMNS))
    my.executemany(f"INSERT INTO {items} VALUES ({marks})", [_row(1)])  # before: not captured
    runner.start("my-cdc", _source(my))
    topic = f"cdc.{my.namespace}.items"
    runner.start(
        "to-pg",
        mirror_sink(pg.config(), topic),
    )
    # Wait for the first (empty) micro-batch: capture starts at the connector's start position.
    wait_until(lambda: runner.positions.load("my-cdc") or _progressed(runner), 120, "started")
    my.execute(f"DELETE FROM {items}")
    my.executemany(f"INSERT INTO {items} VALUES ({marks})", [_row(i) for i in range(2, 52)])
    my.executemany(f"INSERT INTO {items} VALUES ({marks})", [_row(52)])
    my.execute(f"UPDATE {items} SET vc = NULL, d = NULL WHERE id BETWEEN 2 AND 6")
    for i in range(7, 17):
        my.execute(f"UPDATE {items} SET tx = %s, flag = 1 - flag WHERE id = %s", (f"u{i}", i))
    my.execute(f"UPDATE {items} SET id = 1000 WHERE id = 20")
    my.execute(f"UPDATE {items} SET id = id + 2000, vc = 'moved' WHERE id = 21")
    my.execute(f"DELETE FROM {items} WHERE id BETWEEN 30 AND 34")
    my.execute(f"UPDATE {items} SET vc = 'back' WHERE id = 2")
    expected_events = 1 + 50 + 1 + 5 + 10 + 2 * 2 + 5 + 1
    pg_items = pg.table("items")

    def mirrored() -> bool:
        for running in runner.running.values():
            failure = running.failure()
            assert failure is None, failure[0]
        try:
            return _table(pg, pg_items) == _table(my, items)
        except Exception:  # the sink has not created the table yet
            return False

    try:
        wait_until(mirrored, 240, "PostgreSQL equal to MariaDB")
    except AssertionError:
        want, have = _table(my, items), _table(pg, pg_items)
        diff = [(a, b) for a, b in zip(want, have, strict=False) if a != b][:2]
        raise AssertionError(
            f"{len(want)} rows in MariaDB, {len(have)} in PostgreSQL: {diff}"
        ) from None
    records = topic_records(runner, topic)
    assert len(records) == expected_events, len(records)
    keys = [json.loads(r["key"]) for r in records]
    assert {"id": 1000} in keys and {"id": 2021} in keys and {"id": 20} in keys
    assert len(_table(pg, pg_items)) == 51 - 5


def _progressed(runner) -> bool:
    progress = runner.running["my-cdc"].query.lastProgress
    return bool(progress) and progress.get("batchId", -1) >= 0


def test_errors_name_what_is_wrong(my: Db, row_metadata) -> None:
    my.execute(f"CREATE TABLE {my.table('nokey')} (a INT)")
    my.execute(f"CREATE TABLE {my.table('items')} ({MY_TABLE})")

    def start(**extra: str) -> None:
        config = _source(my, **extra)
        connector = MySqlCdcSourceConnector()
        connector.validate(config)
        connector.start(config)

    with pytest.raises(ConfigException, match=r"table\.include\.list.*no table .*missing"):
        start(**{"table.include.list": f"{my.namespace}.missing"})
    with pytest.raises(ConnectException, match=r"nokey has no primary key"):
        start(**{"table.include.list": f"{my.namespace}.nokey"})
    with pytest.raises(ConfigException, match=r"snapshot\.mode.*'always' is not one of"):
        start(**{"snapshot.mode": "always"})
    user = f"norepl_{uuid.uuid4().hex[:8]}"
    my.execute(f"CREATE USER '{user}'@'%%'")
    my.execute(f"GRANT SELECT ON *.* TO '{user}'@'%%'")
    try:
        with pytest.raises(ConnectException, match=r"REPLICATION"):
            start(**{"connection.user": user})
    finally:
        my.execute(f"DROP USER '{user}'@'%%'")
    my.execute("SET GLOBAL binlog_format = 'STATEMENT'")
    try:
        with pytest.raises(ConnectException, match=r"binlog_format is STATEMENT"):
            start()
    finally:
        my.execute("SET GLOBAL binlog_format = 'ROW'")
    # A position whose binlog file was purged fails naming it.
    connector = MySqlCdcSourceConnector()
    connector.start(_source(my))
    task = connector.task_class()
    task.start(connector.task_configs(1)[0])
    (partition,) = task.partitions()
    gone = {"file": "mariadb-bin.000000", "pos": 4}
    with pytest.raises(ConnectException, match=r"binlog mariadb-bin\.000000 .* no longer"):
        list(task.read(partition, gone, {"file": "mariadb-bin.000001", "pos": 4}))


def test_snapshot_hands_over_to_the_binlog_exactly(my: Db, row_metadata) -> None:
    """The MariaDB task driven as the runtime drives it (no Spark: `latest`, `split` into two
    sub-ranges, `read` of each), with writes between planning and reading so they fall inside
    the chunks' watermarks, and before chunks (every change event streams, whatever the
    snapshot's progress): applying the records in order gives the table, no row is read twice,
    every row never written is read once, no change event repeats what a snapshot record of its
    row already held, and every snapshot record carries the types of the JDBC type test (the
    SELECT's values, not the binlog's, for the same schema)."""
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} ({MY_TABLE})")
    marks = ", ".join(["%s"] * len(COLUMNS))
    my.executemany(f"INSERT INTO {items} VALUES ({marks})", [_row(i) for i in range(1, 601)])
    connector = MySqlCdcSourceConnector()
    config = _source(my, **{"snapshot.mode": "initial"})
    connector.validate(config)
    connector.start(config)
    task = connector.task_class()
    task.start(connector.task_configs(2)[0])
    (partition,) = task.partitions()
    target: dict[int, dict] = {}
    reads: list[int] = []
    read_as: dict[int, dict] = {}
    streamed: set[int] = set()
    touched: set[int] = set()
    step = 0

    def write() -> None:
        nonlocal step
        for _ in range(4):
            step += 1
            old = step * 37 % 640 + 1  # sometimes a row not there (any more)
            my.execute(f"UPDATE {items} SET vc = %s WHERE id = %s", (f"w{step}", old))
            my.execute(f"INSERT INTO {items} (id, vc) VALUES (%s, %s)", (10_000 + step, "new"))
            touched.update((old, 10_000 + step))
            if step % 3 == 0:
                gone = step * 53 % 640 + 1
                my.execute(f"DELETE FROM {items} WHERE id = %s", (gone,))
                touched.add(gone)

    def apply(low: Any, high: Any) -> None:
        for record in jdbc_db.task_records(task.read(partition, low, high)):
            value = record.value
            row = value["after"] if value["after"] is not None else value["before"]
            if value["op"] == "r":
                reads.append(row["id"])
            else:
                streamed.add(row["id"])
            if value["op"] != "r" and row["id"] in read_as:
                # a change the snapshot record already held would be applied twice
                assert value["after"] != read_as[row["id"]], value
            if value["op"] == "r":
                read_as[row["id"]] = row
            if value["op"] == "d":
                target.pop(row["id"], None)
            else:
                target[row["id"]] = row

    start, rounds = None, 0
    while start is None or "snapshot" in start:
        rounds += 1
        assert rounds <= 10, start
        write()
        end = task.latest(partition, start, ReadLimit(max_rows=150))
        write()  # committed after planning: inside this range's chunk watermarks
        bounds = [start, *task.split(partition, start, end, 2), end]
        assert len(bounds) == 3 or "snapshot" not in end  # two readers while chunks remain
        for low, high in itertools.pairwise(bounds):
            apply(low, high)
        start = end
    end = task.latest(partition, start, ReadLimit(max_rows=100_000))  # the last writes
    apply(start, end)
    cols = ", ".join(my.q(c) for c in ("id", "vc"))
    assert {i: r["vc"] for i, r in target.items()} == dict(my.rows(f"SELECT {cols} FROM {items}"))
    assert len(reads) == len(set(reads))
    assert set(range(1, 601)) - touched <= set(reads)
    first = target[1]  # read by the snapshot: the SELECT's values as the binlog path has them
    assert first["u64"] == Decimal(2**64 - 1) and first["u32"] == 4294967295
    assert first["i8"] == -128 and first["flag"] is True and first["yr"] == 2155
    assert first["tm"] == time(23, 59, 59, 999999) and first["e"] == "green"
    assert first["dt"] == date(9999, 12, 31) and first["bl"] == b"\x00\x00\xff"
    assert first["dtm"] == datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=UTC)


def test_rows_after_an_add_column_inside_one_range_decode_with_the_new_columns(
    my: Db, row_metadata
) -> None:
    """The binlog reader keeps each table's parsed table map (they are costly to parse, one per
    transaction), never past a change of the table's definition: a range that spans an ADD
    COLUMN the connector's schema already has (made while it was stopped) decodes the rows after
    it with the new column, and the rows before it without. (MariaDB gives the altered table a
    new table id; the reader also drops its maps at every DDL statement, in case one does not.)"""
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} (id INT NOT NULL PRIMARY KEY, vc VARCHAR(20))")
    connector = MySqlCdcSourceConnector()
    config = _source(my)
    connector.validate(config)
    connector.start(config)
    task = connector.task_class()
    task.start(connector.task_configs(1)[0])
    start = task.log_end()
    for i in range(1, 4):
        my.execute(f"INSERT INTO {items} VALUES (%s, %s)", (i, f"before {i}"))
    my.execute(f"ALTER TABLE {items} ADD COLUMN qty INT NOT NULL DEFAULT 7")
    for i in range(4, 7):
        my.execute(f"INSERT INTO {items} VALUES (%s, %s, %s)", (i, f"after {i}", i * 10))
    stream = task._stream(start, rows=True)
    rows = []
    try:
        for event in stream:
            if getattr(event, "table", None) == "items":
                rows.extend(row["values"] for row in event.rows)
    finally:
        stream.close()
    assert rows[:3] == [{"id": i, "vc": f"before {i}"} for i in range(1, 4)]
    assert rows[3:] == [{"id": i, "vc": f"after {i}", "qty": i * 10} for i in range(4, 7)]
