"""Table → topic → table on real Spark and the real servers: MariaDB ⇄ PostgreSQL, value for value.

Records cross the topic with `AvroConverter` (its Timestamp keeps microseconds); one test uses the
default `StringConverter` (JSON text), which the sink reads as schemaless JSON.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db

pytestmark = pytest.mark.spark
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

AVRO = {"value.converter": "AvroConverter"}
WEIRD = 'we"ird col; -- %s'


def _keys(extra: dict[str, str]) -> dict[str, str]:
    return {k.replace("__", "."): v for k, v in extra.items()}


def _source(d: Db, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "JdbcSourceConnector",
        **d.config(),
        "poll.interval.ms": "300",  # look at idle tables often: tests wait for new rows
        **_keys(extra),
    }


def _sink(d: Db, topic: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "JdbcSinkConnector",
        **d.config(),
        "connect.topicnames": topic,
        "insert.mode": "upsert",
        "pk.mode": "record_value",
        "pk.fields": "id",
        **_keys(extra),
    }


def _healthy(runner) -> None:
    for running in runner.running.values():
        failure = running.failure()
        assert failure is None, failure[0]


def _wait_rows(runner, d: Db, table: str, count: int, timeout: float = 180) -> None:
    def done() -> bool:
        _healthy(runner)
        try:
            return d.scalar(f"SELECT COUNT(*) FROM {d.q(table)}") >= count
        except Exception:  # the sink may not have created it yet
            return False

    wait_until(done, timeout, f"{count} rows in {table}")


# -- MariaDB → PostgreSQL -------------------------------------------------------------------------
MY_TYPES = f"""
    id INT NOT NULL PRIMARY KEY,
    i8 TINYINT, u8 TINYINT UNSIGNED, i16 SMALLINT, u16 SMALLINT UNSIGNED, i24 MEDIUMINT,
    i32 INT, u32 INT UNSIGNED, i64 BIGINT, u64 BIGINT UNSIGNED,
    d38 DECIMAL(38,10), d0 DECIMAL(38,0), f32 FLOAT, f64 DOUBLE, flag BIT(1), yr YEAR,
    c CHAR(8), vc VARCHAR(200), tx TEXT, e ENUM('red','green','blue'), js JSON,
    bn BINARY(4), vb VARBINARY(16), bl BLOB,
    dt DATE, tm TIME(6), dtm DATETIME(6), tsz TIMESTAMP(6) NULL,
    `{WEIRD.replace("%", "%%")}` VARCHAR(20)
"""
PG_TARGET = f"""
    id INTEGER PRIMARY KEY,
    i8 SMALLINT, u8 SMALLINT, i16 SMALLINT, u16 INTEGER, i24 INTEGER,
    i32 INTEGER, u32 BIGINT, i64 BIGINT, u64 NUMERIC(20,0),
    d38 NUMERIC(38,10), d0 NUMERIC(38,0), f32 REAL, f64 DOUBLE PRECISION, flag BOOLEAN,
    yr SMALLINT, c CHAR(8), vc VARCHAR(200), tx TEXT, e TEXT, js JSONB,
    bn BYTEA, vb BYTEA, bl BYTEA,
    dt DATE, tm TIME(6), dtm TIMESTAMP(6), tsz TIMESTAMPTZ(6),
    "{WEIRD.replace('"', '""').replace("%", "%%")}" VARCHAR(20)
"""
LONG_TEXT = "line 1\nline 2\ttab 'single' \"double\" back\\slash 🚀 " + "ü" * 3000
MY_ROWS = [
    (
        1,
        127,
        255,
        32767,
        65535,
        8388607,
        2147483647,
        4294967295,
        2**63 - 1,
        2**64 - 1,
        Decimal("9999999999999999999999999999.9999999999"),
        Decimal("9" * 38),
        3.5,
        1.7976931348623157e308,
        b"\x01",
        2155,
        "abcdefgh",
        "🚀 emoji ünïcödé 日本語 𝄞",
        LONG_TEXT,
        "blue",
        '{"a": [1, 2.5, "x"], "b": null}',
        b"\x00\x01\x02\x03",
        b"\xff",
        bytes(range(256)) * 4,
        date(9999, 12, 31),
        "23:59:59.999",
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(2038, 1, 19, 3, 14, 7, 999999),
        "ok",
    ),
    (
        2,
        -128,
        0,
        -32768,
        0,
        -8388608,
        -(2**31),
        0,
        -(2**63),
        0,
        Decimal("-9999999999999999999999999999.9999999999"),
        Decimal("-" + "9" * 38),
        -1.25,
        -2.2250738585072014e-308,
        b"\x00",
        1901,
        "",
        "",
        "",
        "red",
        "[]",
        b"\x00\x00\x00\x00",
        b"",
        b"",
        date(1, 1, 1),
        "00:00:00",
        datetime(1, 1, 1),
        datetime(1970, 1, 1, 0, 0, 1),
        "",
    ),
    # DST edges (no zone applies: sessions are UTC on both sides), a leap day
    (
        3,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        Decimal("0.0000000001"),
        Decimal(0),
        0.1,
        0.1,
        b"\x01",
        2024,
        "x",
        "é",
        "é",
        "green",
        '{"emoji": "🚀", "n": 1e3}',
        b"abcd",
        b"\x00",
        b"\x00",
        date(2024, 2, 29),
        "02:30:00.001",
        datetime(2024, 3, 10, 2, 30),
        datetime(2024, 3, 31, 1, 0, 0),
        "two",
    ),
    (4, *([None] * 28)),
    (
        5,
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        Decimal("1.5"),
        Decimal(1),
        1.0,
        1.0,
        b"\x00",
        2000,
        "a",
        "b",
        "c",
        "red",
        "{}",
        b"zzzz",
        b"z",
        b"z",
        date(2024, 11, 3),
        "01:30:00.500",
        datetime(2024, 11, 3, 1, 30, 0, 500000),
        datetime(2024, 10, 27, 0, 59, 59, 999999),
        "x",
    ),
    # times to the microsecond, at the edges of a day
    (6, *([None] * 24), "23:59:59.999999", None, None, None),
    (7, *([None] * 24), "00:00:00.000001", None, None, None),
    (8, *([None] * 24), "12:34:56.000001", None, None, None),
]
MICRO_TIMES = [time(23, 59, 59, 999_999), time(0, 0, 0, 1), time(12, 34, 56, 1)]


def _as_naive(v: Any) -> Any:
    return v.replace(tzinfo=None) if isinstance(v, datetime) and v.tzinfo else v


def _as_time(v: Any) -> Any:
    if isinstance(v, timedelta):
        return (datetime.min + v).time()
    return v


def _norm(column: str, v: Any, dialect: str) -> Any:
    """One value, read back from either server, in a form both sides share."""
    if v is None:
        return None
    if column == "c":
        return v.rstrip(" ")  # CHAR pads on PostgreSQL, strips on MariaDB
    if column in ("js", "jb"):
        # psycopg parses json/jsonb itself; MariaDB's JSON is text
        return json.loads(v) if dialect == "mysql" else v
    if column == "flag":
        return bool(v[0]) if isinstance(v, bytes) else bool(v)
    if column == "u64":
        return int(v)
    if isinstance(v, memoryview):
        return bytes(v)
    return _as_time(_as_naive(v))


def _columns(d: Db, table: str) -> list[str]:
    return [
        r[0]
        for r in d.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (d.namespace, table),
        )
    ]


def _normalised(d: Db, table: str) -> list[dict]:
    names = _columns(d, table)
    return [
        {n: _norm(n, v, d.dialect) for n, v in zip(names, row, strict=True)}
        for row in d.rows(f"SELECT * FROM {d.q(table)} ORDER BY id")
    ]


def test_mariadb_to_postgresql_value_for_value(runner, my: Db, pg: Db) -> None:
    my.execute(f"CREATE TABLE {my.q('types')} ({MY_TYPES}) CHARSET utf8mb4")
    marks = ", ".join(["%s"] * 29)
    my.executemany(f"INSERT INTO {my.q('types')} VALUES ({marks})", MY_ROWS)
    pg.execute(f"CREATE TABLE {pg.q('types')} ({PG_TARGET})")
    runner.start(
        "from-maria",
        _source(
            my,
            mode="incrementing",
            table__whitelist="types",
            incrementing__column__name="id",
            **{"connect.topicname": "types", **AVRO},
        ),
    )
    runner.start("to-pg", _sink(pg, "types", **AVRO))
    _wait_rows(runner, pg, "types", len(MY_ROWS))
    source, target = _normalised(my, "types"), _normalised(pg, "types")
    assert [r["id"] for r in target] == [1, 2, 3, 4, 5, 6, 7, 8]
    for s, t in zip(source, target, strict=True):
        assert s == t
    assert target[0]["tx"] == LONG_TEXT and target[0][WEIRD] == "ok"
    assert [r["tm"] for r in target[5:]] == MICRO_TIMES
    assert target[2]["dtm"] == datetime(2024, 3, 10, 2, 30)  # not shifted by any DST rule


# -- PostgreSQL → MariaDB -------------------------------------------------------------------------
PG_TYPES = f"""
    id INTEGER PRIMARY KEY, i16 SMALLINT, i32 INTEGER, i64 BIGINT, d38 NUMERIC(38,10),
    d5 NUMERIC(5,2), f32 REAL, f64 DOUBLE PRECISION, flag BOOLEAN, c CHAR(8), vc VARCHAR(200),
    tx TEXT, e mood, js JSON, jb JSONB, u UUID, ba BYTEA, dt DATE, tm TIME,
    ts TIMESTAMP(6), tsz TIMESTAMPTZ(6), "{WEIRD.replace('"', '""').replace("%", "%%")}" TEXT
"""
MY_TARGET = f"""
    id INT PRIMARY KEY, i16 SMALLINT, i32 INT, i64 BIGINT, d38 DECIMAL(38,10), d5 DECIMAL(5,2),
    f32 FLOAT, f64 DOUBLE, flag BOOLEAN, c CHAR(8), vc VARCHAR(200), tx LONGTEXT,
    e ENUM('sad','ok','happy'), js JSON, jb JSON, u CHAR(36), ba LONGBLOB, dt DATE, tm TIME(6),
    ts DATETIME(6), tsz DATETIME(6), `{WEIRD.replace("%", "%%")}` TEXT
"""
PG_ROWS = [
    (
        1,
        32767,
        2147483647,
        2**63 - 1,
        Decimal("9999999999999999999999999999.9999999999"),
        Decimal("999.99"),
        1.5,
        1.7976931348623157e308,
        True,
        "abcdefgh",
        "🚀 ünï 日本語 𝄞",
        LONG_TEXT,
        "happy",
        '{"b": 1,  "a": [1, 2]}',
        '{"k": {"nested": true}}',
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        bytes(range(256)),
        date(9999, 12, 31),
        time(23, 59, 59, 999000),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        "ok",
    ),
    (
        2,
        -32768,
        -(2**31),
        -(2**63),
        Decimal("-9999999999999999999999999999.9999999999"),
        Decimal("-999.99"),
        -0.25,
        -2.2250738585072014e-308,
        False,
        "",
        "",
        "",
        "sad",
        "[]",
        "null",
        "00000000-0000-0000-0000-000000000000",
        b"",
        date(1, 1, 1),
        time(0, 0),
        datetime(1, 1, 1),
        datetime(1, 1, 1),
        "",
    ),
    (
        3,
        0,
        0,
        0,
        Decimal("0.0000000001"),
        Decimal("0.01"),
        0.001,
        0.1,
        True,
        "x",
        "é",
        "é",
        "ok",
        '"just a string"',
        "1e3",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        b"\x00",
        date(2024, 2, 29),
        time(2, 30, 0, 1000),
        datetime(2024, 3, 10, 2, 30),
        datetime(2024, 3, 31, 1, 0),
        "%s",
    ),
    (4, *([None] * 21)),
    # PostgreSQL's plain TIME has microseconds
    (5, *([None] * 17), MICRO_TIMES[0], None, None, None),
    (6, *([None] * 17), MICRO_TIMES[1], None, None, None),
    (7, *([None] * 17), MICRO_TIMES[2], None, None, None),
]


def test_postgresql_to_mariadb_value_for_value(runner, my: Db, pg: Db) -> None:
    pg.execute(f"CREATE TYPE {pg.q('mood')} AS ENUM ('sad', 'ok', 'happy')")
    pg.execute(f"CREATE TABLE {pg.q('types')} ({PG_TYPES})")
    marks = ", ".join(["%s"] * 22)
    rows = [
        tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in r) for r in PG_ROWS
    ]
    pg.executemany(f"INSERT INTO {pg.q('types')} VALUES ({marks})", rows)
    my.execute(f"CREATE TABLE {my.q('types')} ({MY_TARGET}) CHARSET utf8mb4 COLLATE utf8mb4_bin")
    runner.start(
        "from-pg",
        _source(
            pg,
            mode="incrementing",
            table__whitelist="types",
            incrementing__column__name="id",
            **{"topic.prefix": "pg-", **AVRO},
        ),
    )
    # topics named by topic.prefix get their schema registered with their first micro-batch
    wait_until(
        lambda: _healthy(runner) or runner.committed_positions("from-pg"), 120, "a first batch"
    )
    runner.start("to-maria", _sink(my, "pg-types", **{"table.name.format": "types", **AVRO}))
    _wait_rows(runner, my, "types", len(PG_ROWS))
    source, target = _normalised(pg, "types"), _normalised(my, "types")
    for s, t in zip(source, target, strict=True):
        s["u"] = s["u"] and str(s["u"])
        assert s == t
    assert [r["id"] for r in target] == [1, 2, 3, 4, 5, 6, 7]
    assert target[0]["tm"] == time(23, 59, 59, 999000)
    assert [r["tm"] for r in target[4:]] == MICRO_TIMES


# -- a database of differently shaped tables ------------------------------------------------------
def test_a_database_of_different_tables_through_one_source_and_one_sink(
    runner, my: Db, pg: Db
) -> None:
    """The motivating use case: MariaDB tables of different shapes, one source (a topic per
    table, each with its own schema), one sink writing every topic into its own PostgreSQL table
    (`auto.create`), value for value, following new rows while running."""
    my.execute(
        f"CREATE TABLE {my.q('customers')} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "name VARCHAR(100) NOT NULL, email VARCHAR(200), born DATE) CHARSET utf8mb4"
    )
    my.execute(
        f"CREATE TABLE {my.q('orders')} (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL, "
        "total DECIMAL(12,2), placed DATETIME(6) NOT NULL, note TEXT) CHARSET utf8mb4"
    )
    weird = WEIRD.replace("%", "%%")
    my.execute(
        f"CREATE TABLE {my.q('blobs')} (id INT NOT NULL PRIMARY KEY, payload BLOB, "
        f"flag BOOLEAN, `{weird}` VARCHAR(20))"
    )
    my.executemany(
        f"INSERT INTO {my.q('customers')} (id, name, email, born) VALUES (%s, %s, %s, %s)",
        [
            (i, f"cüstomer {i} 🚀", None if i % 3 else f"c{i}@x.org", date(1990, 1, i))
            for i in range(1, 21)
        ],
    )
    my.executemany(
        f"INSERT INTO {my.q('orders')} VALUES (%s, %s, %s, %s, %s)",
        [
            (i, i % 20 + 1, Decimal(f"{i}.{i % 100:02d}"), datetime(2024, 3, 31, 1, 0, 0, i), None)
            for i in range(1, 31)
        ],
    )
    my.executemany(
        f"INSERT INTO {my.q('blobs')} VALUES (%s, %s, %s, %s)",
        [(1, bytes(range(256)), True, "ok"), (2, b"", False, None), (3, None, None, "%s")],
    )
    tables = ("customers", "orders", "blobs")
    # the sink first: it takes each topic's schema when the topic's first records arrive
    runner.start("to-pg", _sink(pg, ",".join(tables), auto__create="true", **AVRO))
    runner.start(
        "from-maria",
        _source(
            my,
            mode="incrementing",
            table__whitelist="customers,orders,blobs",
            incrementing__column__name="id",
            **AVRO,
        ),
    )
    for table, count in zip(tables, (20, 30, 3), strict=True):
        _wait_rows(runner, pg, table, count)
    # new rows while running, in two of the tables
    my.executemany(
        f"INSERT INTO {my.q('customers')} (name) VALUES (%s)", [("late one",), ("late two",)]
    )
    my.execute(
        f"INSERT INTO {my.q('orders')} VALUES (%s, %s, %s, %s, %s)",
        (31, 1, Decimal("-0.01"), datetime(9999, 12, 31, 23, 59, 59, 999999), "last"),
    )
    _wait_rows(runner, pg, "customers", 22)
    _wait_rows(runner, pg, "orders", 31)
    for table in tables:
        assert _normalised(pg, table) == _normalised(my, table), table


# -- following changes -----------------------------------------------------------------------------
def _items(d: Db, name: str = "items") -> None:
    auto = "SERIAL" if d.dialect == "postgresql" else "INT NOT NULL AUTO_INCREMENT"
    ts = "TIMESTAMP(6)" if d.dialect == "postgresql" else "DATETIME(6)"
    d.execute(
        f"CREATE TABLE {d.q(name)} (id {auto} PRIMARY KEY, name VARCHAR(50) NOT NULL, "
        f"modified {ts} NOT NULL)"
    )


def _add(d: Db, ids, name: str = "items", label: str = "row") -> None:
    d.executemany(
        f"INSERT INTO {d.q(name)} (id, name, modified) VALUES (%s, %s, %s)",
        [(i, f"{label} {i}", datetime(2024, 1, 1) + timedelta(seconds=i)) for i in ids],
    )


def _pairs(d: Db, table: str = "items") -> list[tuple]:
    return d.rows(f"SELECT id, name FROM {d.q(table)} ORDER BY id")


def test_incrementing_and_timestamp_modes_follow_the_source(runner, my: Db, pg: Db) -> None:
    _items(my, "inc")
    _items(my, "ts")
    _add(my, range(1, 101), "inc")
    _add(my, range(1, 101), "ts")
    runner.start(
        "inc",
        _source(
            my,
            mode="incrementing",
            table__whitelist="inc",
            **{"topic.prefix": "m-", "read.max.rows": "30", **AVRO},
        ),
    )
    runner.start(
        "ts",
        _source(
            my,
            mode="timestamp+incrementing",
            table__whitelist="ts",
            timestamp__column__name="modified",
            incrementing__column__name="id",
            **{"topic.prefix": "m-", **AVRO},
        ),
    )
    wait_until(
        lambda: (
            _healthy(runner)
            or (runner.committed_positions("inc") and runner.committed_positions("ts"))
        ),
        120,
        "first batches (they register the topics' schemas)",
    )
    runner.start(
        "sink",
        _sink(pg, "m-inc,m-ts", auto__create="true", **{"table.name.format": "${topic}", **AVRO}),
    )
    _wait_rows(runner, pg, "m-inc", 100)
    _wait_rows(runner, pg, "m-ts", 100)
    # new rows reach both; an update reaches only the timestamp mode (by design)
    _add(my, range(101, 121), "inc", "new")
    _add(my, range(101, 121), "ts", "new")
    for table in ("inc", "ts"):
        # the database's own clock: timestamp modes read rows older than its "now"
        my.execute(
            f"UPDATE {my.q(table)} SET name = 'changed', modified = UTC_TIMESTAMP(6) WHERE id = 7"
        )
    changed = my.scalar(f"SELECT modified FROM {my.q('ts')} WHERE id = 7")
    _wait_rows(runner, pg, "m-inc", 120)
    wait_until(lambda: _healthy(runner) or (7, "changed") in _pairs(pg, "m-ts"), 120, "update")
    _wait_rows(runner, pg, "m-ts", 120)
    assert _pairs(pg, "m-ts") == _pairs(my, "ts")
    assert (7, "row 7") in _pairs(pg, "m-inc") and len(_pairs(pg, "m-inc")) == 120
    positions = runner.committed_positions("ts")
    assert list(positions.values()) == [
        {"timestamp": changed.isoformat(timespec="microseconds"), "incrementing": 7}
    ]


def test_bulk_reloads_the_table(runner, pg: Db, my: Db) -> None:
    _items(pg)
    _add(pg, range(1, 11))
    runner.start(
        "bulk",
        _source(
            pg,
            mode="bulk",
            table__whitelist="items",
            **{"poll.interval.ms": "500", "connect.topicname": "bulk", **AVRO},
        ),
    )
    runner.start(
        "sink", _sink(my, "bulk", auto__create="true", **{"table.name.format": "copy", **AVRO})
    )
    _wait_rows(runner, my, "copy", 10)
    pg.execute(f"UPDATE {pg.q('items')} SET name = 'reloaded' WHERE id IN (3, 4)")
    _add(pg, range(11, 13))
    wait_until(
        lambda: _healthy(runner) or _pairs(my, "copy") == _pairs(pg), 120, "the next full load"
    )


def test_default_string_converter_carries_json(runner, my: Db, pg: Db) -> None:
    _items(my)
    _add(my, range(1, 51))
    runner.start(
        "src",
        _source(
            my, mode="incrementing", table__whitelist="items", **{"connect.topicname": "plain"}
        ),
    )
    pg.execute(f"CREATE TABLE {pg.q('plain')} (id INT PRIMARY KEY, name TEXT, modified TEXT)")
    runner.start("dst", _sink(pg, "plain"))
    _wait_rows(runner, pg, "plain", 50)
    assert _pairs(pg, "plain") == _pairs(my)


# -- errors ---------------------------------------------------------------------------------------
def test_bad_configs_fail_the_start_and_the_runner_keeps_going(runner, my: Db, pg: Db) -> None:
    _items(my)
    _add(my, range(1, 6))
    runner.start(
        "good",
        _source(
            my,
            mode="incrementing",
            table__whitelist="items",
            **{"connect.topicname": "good", **AVRO},
        ),
    )
    runner.start("good-sink", _sink(pg, "good", auto__create="true", **AVRO))
    dead = my.jdbc_url.replace(":3306", ":1")
    cases = [
        (
            _source(
                my,
                mode="incrementing",
                table__whitelist="items",
                **{"connection.url": dead, "connection.attempts": "1"},
            ),
            r"connection.url: cannot connect to mysql://root@127.0.0.1:1/",
        ),
        (
            _source(
                my,
                mode="incrementing",
                table__whitelist="items",
                **{"connection.password": "wrong"},
            ),
            r"connection.password: .*Access denied for user 'root'",
        ),
        (
            _source(my, mode="incrementing", table__whitelist="nope"),
            r"table.whitelist: table 'nope' does not exist",
        ),
        (
            _source(
                my,
                mode="incrementing",
                table__whitelist="items",
                **{"incrementing.column.name": "nope"},
            ),
            r"incrementing.column.name: table 'items' has no column 'nope'",
        ),
        (
            _sink(
                pg,
                "t",
                **{
                    "connection.url": pg.jdbc_url.replace(":5432", ":1"),
                    "connection.attempts": "1",
                },
            ),
            r"connection.url: cannot connect to postgresql://root@127.0.0.1:1/test",
        ),
    ]
    for i, (config, message) in enumerate(cases):
        with pytest.raises(ConfigException, match=message):
            runner.start(f"bad{i}", config)
        assert f"bad{i}" not in runner.running
    _wait_rows(runner, pg, "good", 5)
    # a failure while running lands in the connector's failure, naming the table
    my.execute(f"DROP TABLE {my.q('items')}")
    query = runner.running["good"].query
    wait_until(lambda: query.exception() is not None, 120, "the source to fail")
    cause, _trace = runner.running["good"].failure()
    assert "reading items" in cause and "doesn't exist" in cause
    assert runner.running["good-sink"].failure() is None


def test_max_tasks_splits_the_first_load(runner, pg: Db, my: Db) -> None:
    _items(pg)
    _add(pg, range(1, 60_001))
    runner.start(
        "split",
        _source(
            pg,
            mode="incrementing",
            table__whitelist="items",
            **{"connect.topicname": "split", "max.tasks": "3", **AVRO},
        ),
    )
    runner.start(
        "sink", _sink(my, "split", auto__create="true", **{"table.name.format": "copy", **AVRO})
    )
    _wait_rows(runner, my, "copy", 60_000)
    assert my.rows(f"SELECT COUNT(*), MIN(id), MAX(id) FROM {my.q('copy')}") == [
        (60_000, 1, 60_000)
    ]
