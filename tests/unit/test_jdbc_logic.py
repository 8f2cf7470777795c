"""JDBC connectors' pure logic: URLs, settings, type mapping, positions, SQL pieces, retries."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.connectors._sql.connection import parse_connection
from sluice.connectors._sql.dialect import ColumnInfo, Mapped, UnmappableType
from sluice.connectors._sql.dialects.mysql import DIALECT as MYSQL
from sluice.connectors._sql.dialects.mysql import mysql_column
from sluice.connectors._sql.dialects.postgres import DIALECT as POSTGRES
from sluice.connectors._sql.dialects.postgres import pg_column
from sluice.connectors._sql.values import decode, encode, to_arrow
from sluice.connectors.jdbc._config import SinkSettings, SourceSettings, TableName
from sluice.connectors.jdbc.sink import _Op, _runs, _with_retries, _Writer
from sluice.engine.retry import RetryPolicy
from sluice.sdk import ConfigException, ConnectException, FieldType, RetriableException, Schema


# -- connection URLs ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "dialect", "host", "port", "database", "user", "password"),
    [
        (
            "jdbc:mysql://db.example:3306/shop?useSSL=false",
            "mysql",
            "db.example",
            3306,
            "shop",
            "",
            "",
        ),
        ("jdbc:mariadb://h/shop", "mysql", "h", None, "shop", "", ""),
        (
            "jdbc:postgresql://h:5433/app?user=u&password=p%40ss",
            "postgresql",
            "h",
            5433,
            "app",
            "u",
            "p@ss",
        ),
        ("postgresql://u:pw@h/app", "postgresql", "h", None, "app", "u", "pw"),
        ("postgresql+psycopg://h/app", "postgresql", "h", None, "app", "", ""),
        ("mysql+pymysql://u@h:1/x", "mysql", "h", 1, "x", "u", ""),
        ("jdbc:mysql://127.0.0.1:3306", "mysql", "127.0.0.1", 3306, "", "", ""),
    ],
)
def test_urls(url, dialect, host, port, database, user, password) -> None:
    c = parse_connection({"connection.url": url})
    assert (c.dialect, c.host, c.port, c.database, c.user, c.password) == (
        dialect,
        host,
        port,
        database,
        user,
        password,
    )


def test_user_and_password_keys_override_the_url_and_are_hidden() -> None:
    c = parse_connection(
        {
            "connection.url": "jdbc:postgresql://h/app?user=a&password=b&currentSchema=s",
            "connection.user": "me",
            "connection.password": "secret",
        }
    )
    assert (c.user, c.password) == ("me", "secret")
    assert ("options", "-c search_path=s") in c.options
    assert "secret" not in c.describe() and c.describe() == "postgresql://me@h/app"
    url = c.sqlalchemy_url()
    assert url.drivername == "postgresql+psycopg" and url.password == "secret"
    assert "options" not in url.query  # merged with sluice's own session options instead
    my = parse_connection({"connection.url": "jdbc:mysql://h/db"}).sqlalchemy_url()
    assert my.drivername == "mysql+pymysql" and my.query["charset"] == "utf8mb4"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("jdbc:oracle:thin:@h:1521:x", r"unsupported database or driver 'oracle'"),
        ("sqlite:///x.db", r"unsupported database or driver 'sqlite'"),
        ("jdbc:mysql://h1,h2/db", r"several hosts"),
        ("jdbc:mysql:///db", r"no host"),
        ("jdbc:mysql://h:notaport/db", r"cannot parse"),
        ("postgresql://u:topsecret@h:x/db", r"cannot parse 'postgresql://u:\*{8}@h:x/db'"),
    ],
)
def test_bad_urls_are_named_without_passwords(url: str, message: str) -> None:
    with pytest.raises(ConfigException, match=r"connection.url: " + message) as info:
        parse_connection({"connection.url": url})
    assert "topsecret" not in str(info.value)


def test_connection_keys_are_typed() -> None:
    with pytest.raises(ConfigException, match=r"connection.url: required key is missing"):
        parse_connection({})
    with pytest.raises(ConfigException, match=r"connection.attempts: must be at least 1"):
        parse_connection({"connection.url": "jdbc:mysql://h/d", "connection.attempts": "0"})


def test_table_names() -> None:
    assert TableName.parse("db.orders") == TableName("db", "orders")
    assert TableName.parse("orders") == TableName("", "orders")
    assert TableName.parse("s.a.b") == TableName("s", "a.b")  # table names may hold dots
    assert str(TableName("s", "t")) == "s.t"


def test_source_settings() -> None:
    base = {
        "connection.url": "jdbc:mysql://h/d",
        "mode": "Timestamp+Incrementing",
        "timestamp.column.name": "a, b",
        "table.whitelist": "d.x;d.y",
    }
    s = SourceSettings.parse(base)
    assert s.mode == "timestamp+incrementing" and s.timestamp_columns == ("a", "b")
    assert s.whitelist == (TableName("d", "x"), TableName("d", "y"))
    assert s.uses_timestamp and s.uses_incrementing and s.batch_max_rows == 50_000


def test_sink_settings() -> None:
    s = SinkSettings.parse(
        {
            "connection.url": "jdbc:mysql://h/d",
            "insert.mode": "UPSERT",
            "pk.mode": "record_value",
            "pk.fields": "a,b",
        }
    )
    assert (s.insert_mode, s.pk_fields, s.batch_size) == ("upsert", ("a", "b"), 3000)
    assert s.table_for("orders") == TableName("", "orders")
    fmt = SinkSettings.parse(
        {"connection.url": "jdbc:mysql://h/d", "table.name.format": "arch.${topic}_copy"}
    )
    assert fmt.table_for("t") == TableName("arch", "t_copy")


# -- type mapping ---------------------------------------------------------------------------------
def _my(data_type: str, column_type: str, precision=None, scale=None) -> Mapped:
    return MYSQL.map_column(mysql_column("c", data_type, column_type, True, precision, scale, ""))


@pytest.mark.parametrize(
    ("data_type", "column_type", "precision", "scale", "ddl", "conv"),
    [
        ("tinyint", "tinyint(4)", None, None, "tinyint", "plain"),
        ("tinyint", "tinyint(3) unsigned", None, None, "smallint", "plain"),
        ("smallint", "smallint(5) unsigned", None, None, "int", "plain"),
        ("mediumint", "mediumint(8) unsigned", None, None, "int", "plain"),
        ("int", "int(10) unsigned", None, None, "bigint", "plain"),
        ("bigint", "bigint(20) unsigned", None, None, "decimal(20,0)", "uint64"),
        ("decimal", "decimal(38,10)", 38, 10, "decimal(38,10)", "decimal"),
        ("float", "float", None, None, "float", "plain"),
        ("bit", "bit(1)", 1, None, "boolean", "bit1"),
        ("bit", "bit(12)", 12, None, "binary", "plain"),
        ("year", "year(4)", None, None, "smallint", "plain"),
        ("enum", "enum('a','b')", None, None, "string", "plain"),
        ("json", "json", None, None, "string", "plain"),
        ("longblob", "longblob", None, None, "binary", "plain"),
        ("time", "time(6)", None, None, "time(6)", "time"),
        ("datetime", "datetime(6)", None, None, "timestamp", "timestamp"),
    ],
)
def test_mysql_types(data_type, column_type, precision, scale, ddl, conv) -> None:
    mapped = _my(data_type, column_type, precision, scale)
    assert (mapped.schema.to_spark_ddl(), mapped.conv) == (ddl, conv)


@pytest.mark.parametrize(
    ("base", "display", "kind", "ddl", "cast"),
    [
        ("int2", "smallint", "b", "smallint", False),
        ("numeric", "numeric(12,4)", "b", "decimal(12,4)", False),
        ("jsonb", "jsonb", "b", "string", True),
        ("uuid", "uuid", "b", "string", True),
        ("mood", "mood", "e", "string", True),
        ("timestamptz", "timestamp with time zone", "b", "timestamp", False),
        ("bytea", "bytea", "b", "binary", False),
    ],
)
def test_postgres_types(base, display, kind, ddl, cast) -> None:
    mapped = POSTGRES.map_column(pg_column("c", base, display, False, kind, False))
    assert (mapped.schema.to_spark_ddl(), mapped.cast_text) == (ddl, cast)
    assert mapped.schema.optional is False
    assert POSTGRES.select_expr(mapped) == ('"c"::text AS "c"' if cast else '"c"')


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pg_column("c", "numeric", "numeric", True, "b", False), "no declared precision"),
        (pg_column("c", "numeric", "numeric(40,2)", True, "b", False), "wider than the 38"),
        (pg_column("c", "int4", "integer[]", True, "b", False), "no sluice equivalent"),
        (pg_column("c", "int4range", "int4range", True, "r", False), "no sluice equivalent"),
        (mysql_column("c", "geometry", "geometry", True, None, None, ""), "no sluice equivalent"),
    ],
)
def test_unmappable_types(column: ColumnInfo, message: str) -> None:
    dialect = MYSQL if column.type_name == "geometry" else POSTGRES
    with pytest.raises(UnmappableType, match=message):
        dialect.map_column(column)


def test_quoting_doubles_quotes_and_percent() -> None:
    assert POSTGRES.quote('a"b%') == '"a""b%%"'
    assert POSTGRES.quote_raw('a"b%') == '"a""b%"'
    assert MYSQL.quote("c`d") == "`c``d`"
    assert MYSQL.table(TableName("db", "t")) == "`db`.`t`"
    with pytest.raises(ValueError, match="NUL"):
        POSTGRES.quote("a\x00b")


def test_transient_errors_are_recognised() -> None:
    class PgError(Exception):
        def __init__(self, state):
            self.sqlstate = state

    assert POSTGRES.is_transient(PgError("08006")) and POSTGRES.is_transient(PgError("40P01"))
    assert POSTGRES.is_transient(PgError("57P01"))
    assert not POSTGRES.is_transient(PgError("23505"))  # unique violation
    assert MYSQL.is_transient(Exception(2013, "lost")) and MYSQL.is_transient(Exception(1213, "x"))
    assert not MYSQL.is_transient(Exception(1062, "duplicate"))


# -- values and positions -----------------------------------------------------------------------
keys = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(),
    st.decimals(allow_nan=False, allow_infinity=False, places=4),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.binary(),
    st.none(),
)


@given(keys)
def test_position_values_round_trip(value) -> None:
    import json

    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value


def test_encoded_positions_stay_readable() -> None:
    assert encode(Decimal("42")) == 42
    assert encode(Decimal("1.50")) == {"decimal": "1.50"}
    assert encode(b"\x00\xff") == {"bytes": "00ff"}
    assert encode(timedelta(hours=1, milliseconds=5)) == {"time": "01:00:00.005000"}


def _mapped(conv: str, schema: Schema) -> Mapped:
    return Mapped("c", schema, conv)


def test_values_to_arrow() -> None:
    assert to_arrow(
        [b"\x01", b"\x00", None], _mapped("bit1", Schema.of(FieldType.BOOLEAN)), pa.bool_()
    ).to_pylist() == [True, False, None]
    assert to_arrow(
        [2**64 - 1], _mapped("uint64", Schema.decimal(20, 0)), pa.decimal128(20, 0)
    ).to_pylist() == [Decimal(2**64 - 1)]
    us = to_arrow(
        [timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999), time(0, 0, 0, 1), None],
        _mapped("time", Schema.time()),
        pa.time64("us"),
    )
    assert us.type == pa.time64("us")
    assert us.to_pylist() == [time(23, 59, 59, 999_999), time(0, 0, 0, 1), None]
    with pytest.raises(ValueError, match=r"value '0000-00-00' cannot be carried .*not a valid"):
        to_arrow(["0000-00-00"], _mapped("date", Schema.date()), pa.date32())
    with pytest.raises(ValueError, match=r"value Decimal\('1.234'\) cannot be carried"):
        to_arrow([Decimal("1.234")], _mapped("decimal", Schema.decimal(5, 2)), pa.decimal128(5, 2))
    with pytest.raises(ValueError, match=r"value datetime.timedelta\(days=-1.*outside"):
        to_arrow([timedelta(hours=-1)], _mapped("time", Schema.time()), pa.time64("us"))
    with pytest.raises(ValueError, match=r"value datetime.timedelta\(days=1\).*23:59:59.999999"):
        to_arrow([timedelta(hours=24)], _mapped("time", Schema.time()), pa.time64("us"))


# -- sink pieces ----------------------------------------------------------------------------------
def test_auto_create_types() -> None:
    assert POSTGRES.column_type(pa.decimal128(38, 10), pk=False, where="x") == "NUMERIC(38,10)"
    assert POSTGRES.column_type(pa.timestamp("us", tz="UTC"), pk=False, where="x") == (
        "TIMESTAMP(6) WITH TIME ZONE"
    )
    assert MYSQL.column_type(pa.timestamp("us", tz="UTC"), pk=False, where="x") == "DATETIME(6)"
    assert MYSQL.column_type(pa.string(), pk=True, where="x") == "VARCHAR(255)"
    assert MYSQL.column_type(pa.string(), pk=False, where="x") == "LONGTEXT"
    assert MYSQL.column_type(pa.time64("us"), pk=False, where="x") == "TIME(6)"
    assert POSTGRES.column_type(pa.time64("us"), pk=False, where="x") == "TIME(6)"
    with pytest.raises(ConnectException, match=r"t: field 'f': sluice has no column type for list"):
        POSTGRES.column_type(pa.list_(pa.int32()), pk=False, where="t: field 'f'")


def test_insert_mode_runs_keep_record_order() -> None:
    ops = [
        _Op(False, ("a",), (1,), ()),
        _Op(False, ("a",), (2,), ()),
        _Op(True, ("a",), (), (1,)),
        _Op(False, ("a", "b"), (3, 4), ()),
        _Op(False, ("a", "b"), (5, 6), ()),
    ]
    runs = [(d, f, [op.values or op.pk for op in r]) for d, f, r in _runs(ops)]
    assert runs == [
        (False, ("a",), [(1,), (2,)]),
        (True, ("a",), [(1,)]),
        (False, ("a", "b"), [(3, 4), (5, 6)]),
    ]


def test_statements_are_cut_by_rows_and_bytes() -> None:
    settings = SinkSettings.parse({"connection.url": "jdbc:mysql://h/d", "batch.size": "3"})
    writer = _Writer.__new__(_Writer)
    writer.settings = settings
    assert [len(c) for c in writer.chunks([(i,) for i in range(7)])] == [3, 3, 1]
    big = [("x" * (3 << 20),) for _ in range(3)]
    assert [len(c) for c in writer.chunks(big)] == [1, 1, 1]


def test_write_retries_follow_the_settings() -> None:
    calls = []

    def flaky(fail_times: int):
        def work() -> None:
            calls.append(1)
            if len(calls) <= fail_times:
                raise RetriableException("database away")

        return work

    fast = SinkSettings.parse(
        {"connection.url": "jdbc:mysql://h/d", "retry.backoff.ms": "1", "max.retries": "3"}
    )
    _with_retries(fast, flaky(3), "writing")
    assert len(calls) == 4
    calls.clear()
    with pytest.raises(ConnectException, match=r"writing failed after 3 retries: database away"):
        _with_retries(fast, flaky(10), "writing")
    timed = SinkSettings.parse(
        {
            "connection.url": "jdbc:mysql://h/d",
            "errors.retry.timeout": "1000",
            "errors.retry.delay.max.ms": "1",
        }
    )
    calls.clear()
    # errors.retry.* is the engine's: the sink raises the transient failure at once, and the
    # engine's policy (the one that retries `put`) retries the whole flush (issue 19)
    with pytest.raises(RetriableException, match=r"^writing: database away$"):
        _with_retries(timed, flaky(5), "writing")
    assert len(calls) == 1
    calls.clear()
    policy = RetryPolicy(timed.retry_timeout_ms, timed.retry_delay_max_ms)
    assert policy.call(lambda: _with_retries(timed, flaky(5), "writing"), "flush") == 5
    assert len(calls) == 6
    calls.clear()

    def broken() -> None:
        raise ConnectException("bad data")

    with pytest.raises(ConnectException, match=r"^bad data$"):
        _with_retries(timed, broken, "writing")


def test_source_read_retries_then_gives_up() -> None:
    from sluice.connectors.jdbc.source import JdbcSourceTask, TablePlan

    task = JdbcSourceTask.__new__(JdbcSourceTask)
    task.settings = SourceSettings.parse(
        {
            "connection.url": "jdbc:mysql://h/d",
            "mode": "incrementing",
            "connection.attempts": "3",
            "connection.backoff.ms": "1",
        }
    )

    class FakeDb:
        def describe(self) -> str:
            return "mysql://h/d"

        def is_transient(self, exc: BaseException) -> bool:
            return True

    task.db = FakeDb()
    plan = TablePlan({"table": "t"}, "t", "t", None, [], ["id"], ["id"])
    assert task._read_failed(plan, Exception(2013, "lost"), 0, 10) == 1
    with pytest.raises(RetriableException, match=r"reading t: mysql://h/d unavailable after 3"):
        task._read_failed(plan, Exception(2013, "lost"), 2, 10)
    unordered = TablePlan({"table": "t"}, "t", "t", None, [], [], [])
    with pytest.raises(ConnectException, match=r"lost the connection after 5 rows.*primary key"):
        task._read_failed(unordered, Exception(2013, "lost"), 0, 5)
    assert task._read_failed(unordered, Exception(2013, "lost"), 0, 0) == 1  # nothing sent yet


def test_lexicographic_predicates() -> None:
    from sluice.connectors.jdbc.source import JdbcSourceTask

    task = JdbcSourceTask.__new__(JdbcSourceTask)

    class FakeDb:
        dialect = POSTGRES

    task.db = FakeDb()
    sql, params = task._after(["a", "b"], [1, 2])
    assert sql == '("a" >= %s AND (("a" > %s) OR ("a" = %s AND "b" > %s)))'
    assert params == [1, 1, 1, 2]
    sql, params = task._at_most(["a", "b"], [1, 2])
    assert sql == (
        '("a" <= %s AND (("a" < %s) OR ("a" = %s AND "b" < %s) OR ("a" = %s AND "b" = %s)))'
    )
    assert params == [1, 1, 1, 2, 1, 2]
    assert task._after(["a"], [5]) == ('"a" > %s', [5])
    assert task._at_most(["a"], [5]) == ('"a" <= %s', [5])
    assert task._term_sql("\x00coalesce\x00" + '["x", "y"]') == 'COALESCE("x", "y")'


def test_dates_in_positions() -> None:
    assert decode({"date": "0001-01-01"}) == date(1, 1, 1)
    assert decode({"timestamp": "9999-12-31T23:59:59.999999"}) == datetime(
        9999, 12, 31, 23, 59, 59, 999999
    )


def test_columnar_helpers() -> None:
    from sluice.connectors._sql.dialects.postgres import csv_ready as _csv_ready
    from sluice.connectors.jdbc.sink import _last_per_key

    def last(keys: pa.Array, *more: pa.Array) -> list[int] | None:
        data = pa.table([keys, *more], names=[f"k{i}" for i in range(1 + len(more))])
        found = _last_per_key(data, data.column_names)
        return None if found is None else found.to_pylist()

    assert last(pa.array([1, 2, 1, 3, 2])) == [2, 3, 4]  # one integer key: numpy
    assert last(pa.array([5, 5, 5], pa.int8())) == [2]
    assert last(pa.array([-3, 0, 7])) is None  # in key order: no repeat, nothing to take
    assert last(pa.array([7, 0, -3])) is None  # no repeat, any order
    assert last(pa.array([1, None, 1, None])) == [2, 3]  # nulls: Arrow's group-by
    assert last(pa.array(["a", "b", "a"])) == [1, 2]
    assert last(pa.array(["a", "b"])) is None
    assert last(pa.array([1, 1, 2]), pa.array(["x", "y", "x"])) is None  # two key columns
    assert last(pa.array([1, 1, 1]), pa.array(["x", "y", "x"])) == [1, 2]
    assert last(pa.array([[1], [2], [1]])) == [1, 2]  # lists: no hash kernel, Python
    assert last(pa.array([[1], [2]])) is None
    ready = _csv_ready(pa.table({"b": pa.array([b"\x00\xff", None, b""])}))
    assert ready.column(0).to_pylist() == ["\\x00ff", None, "\\x"]
    with pytest.raises(ConnectException, match=r"field 'n': list<item: int64> values cannot"):
        _csv_ready(pa.table({"n": pa.array([[1]])}))


def test_fast_path_times_keep_microseconds_and_leave_other_values_to_the_driver() -> None:
    from sluice.connectors._sql.pages import time_micros as _time_micros

    got = _time_micros(pa.array([0, 1, 86_399_999_999, None], pa.int64()))
    assert got is not None and got.type == pa.time64("us")
    assert got.to_pylist() == [time(0), time(0, 0, 0, 1), time(23, 59, 59, 999_999), None]
    # Outside a day (a MySQL TIME can be negative or reach 838:59:59): the driver's path reads
    # the page again and names the value.
    assert _time_micros(pa.array([-1], pa.int64())) is None
    assert _time_micros(pa.array([86_400_000_000], pa.int64())) is None
