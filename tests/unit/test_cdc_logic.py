"""Pure logic of change data capture: pgoutput decoding, text values, the envelope, the sink's
unwrapping of change events."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from sluice.connectors.cdc._envelope import envelope_schema, key_text
from sluice.connectors.cdc._pgoutput import (
    PG_EPOCH_US,
    UNCHANGED,
    commit_end,
    lsn_int,
    lsn_text,
    transactions,
)
from sluice.connectors.cdc.postgres import parse_value
from sluice.connectors.jdbc.sink import _unwrap_change_events
from sluice.sdk import ConfigException, ConnectException, FieldType, Schema


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _tuple(*cols: object) -> bytes:
    out = struct.pack(">h", len(cols))
    for c in cols:
        if c is None:
            out += b"n"
        elif c is UNCHANGED:
            out += b"u"
        else:
            raw = str(c).encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def _relation(rel: int) -> bytes:
    cols = struct.pack(">h", 2)
    cols += struct.pack(">B", 1) + _s("id") + struct.pack(">Ii", 23, -1)
    cols += struct.pack(">B", 0) + _s("v") + struct.pack(">Ii", 25, -1)
    return b"R" + struct.pack(">I", rel) + _s("public") + _s("t") + b"f" + cols


def _begin(xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", 100, 5_000_000, xid)


def _commit(end: int) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, end - 8, end, 6_000_000)


def test_pgoutput_messages_become_transactions() -> None:
    messages = [
        _begin(7),
        _relation(16384),
        b"I" + struct.pack(">I", 16384) + b"N" + _tuple("1", "a"),
        b"U" + struct.pack(">I", 16384) + b"K" + _tuple("1", None) + b"N" + _tuple("2", UNCHANGED),
        b"D" + struct.pack(">I", 16384) + b"O" + _tuple("2", "b"),
        _commit(0x1_0000_0040),
        _begin(8),
        b"T" + struct.pack(">IBI", 1, 0, 16384),
        _commit(0x1_0000_0080),
    ]
    first, second = list(transactions(messages))
    assert (first.xid, first.end_lsn, first.commit_us) == (
        7,
        0x1_0000_0040,
        6_000_000 + PG_EPOCH_US,
    )
    insert, update, delete = first.changes
    assert (insert.op, insert.before, insert.after) == ("c", None, {"id": "1", "v": "a"})
    assert update.op == "u" and update.key_only and update.before == {"id": "1", "v": None}
    assert update.after == {"id": "2", "v": UNCHANGED}
    assert (delete.op, delete.key_only, delete.before) == ("d", False, {"id": "2", "v": "b"})
    assert [r.name for r in second.truncated] == ["t"] and not second.changes
    assert commit_end(messages[5]) == 0x1_0000_0040
    assert lsn_text(0x1_0000_0040) == "1/40" and lsn_int("1/40") == 0x1_0000_0040


def test_text_values_parse_as_their_schema() -> None:
    assert parse_value("12.5000", Schema.decimal(10, 4), "w") == Decimal("12.5000")
    assert parse_value("9999-12-31", Schema.date(), "w") == date(9999, 12, 31)
    assert parse_value("23:59:59.999999", Schema.time(), "w") == time(23, 59, 59, 999999)
    assert parse_value("2024-05-01 10:00:00.000001", Schema.timestamp(), "w") == datetime(
        2024, 5, 1, 10, 0, 0, 1, tzinfo=UTC
    )
    assert parse_value("2038-01-19 03:14:07+00", Schema.timestamp(), "w") == datetime(
        2038, 1, 19, 3, 14, 7, tzinfo=UTC
    )
    assert parse_value("t", Schema.of(FieldType.BOOLEAN), "w") is True
    assert parse_value("\\x00ff", Schema.bytes_(), "w") == b"\x00\xff"
    assert parse_value("-5", Schema.of(FieldType.INT16), "w") == -5
    with pytest.raises(ConnectException, match=r"table t, column 'n': value 'NaN'"):
        parse_value("NaN", Schema.decimal(10, 2), "table t, column 'n'")
    with pytest.raises(ConnectException, match="'infinity' cannot be carried"):
        parse_value("infinity", Schema.date(), "w")


def test_envelope_and_key() -> None:
    columns = [("id", Schema.of(FieldType.INT32, optional=False)), ("v", Schema.string())]
    schema = envelope_schema("cdc.public.t", columns)
    assert [f.name for f in schema.fields] == ["before", "after", "source", "op", "ts_ms"]
    before = schema.fields[0].schema
    assert all(f.schema.optional for f in before.fields)  # a key-only old row fits
    assert not schema.fields[1].schema.fields[0].schema.optional
    assert key_text({"id": 5, "v": "x"}, ["id"]) == '{"id":5}'
    assert key_text({"a": Decimal("1.5"), "b": "k"}, ["b", "a"]) == (
        '{"b":"k","a":{"decimal":"1.5"}}'
    )


def test_the_jdbc_sink_unwraps_change_events() -> None:
    row = pa.struct([("id", pa.int32()), ("v", pa.string())])
    value = pa.array(
        [
            {"before": None, "after": {"id": 1, "v": "a"}, "source": {}, "op": "c"},
            {"before": {"id": 1, "v": "a"}, "after": None, "source": {}, "op": "d"},
        ],
        pa.struct(
            [
                ("before", row),
                ("after", row),
                ("source", pa.struct([("x", pa.int8())])),
                ("op", pa.string()),
            ]
        ),
    )
    batch = pa.RecordBatch.from_arrays(
        [pa.array(['{"id":1}', '{"id":1}']), value], names=["key", "value"]
    )
    out = _unwrap_change_events(batch)
    assert out.column("value").to_pylist() == [{"id": 1, "v": "a"}, None]
    plain = pa.RecordBatch.from_arrays(
        [pa.array([{"id": 1}], pa.struct([("id", pa.int8())]))], names=["value"]
    )
    assert _unwrap_change_events(plain) is plain


class _Dialect:
    def quote(self, name: str) -> str:
        return f'"{name}"'

    def table(self, table: object) -> str:
        return f'"{table}"'


class _Db:
    dialect = _Dialect()


def test_snapshot_progress_and_the_chunk_column() -> None:
    from sluice.connectors.cdc._snapshot import chunk_column, progress, started

    assert progress(None, False) is None  # snapshot.mode=never: nothing to read
    assert progress(None, True) == {"upto": None, "done": False}
    assert progress({"lsn": 5}, True) is None  # a connector that finished (or never began)
    assert not started({"upto": None, "done": False})  # fresh: no chunk read yet
    assert not started({"upto": None, "done": False, "since": {"lsn": 9}})  # waiting for 9
    assert started({"upto": 10, "done": False}) and started({"upto": None, "done": True})
    ints = [("id", Schema.of(FieldType.INT64)), ("k", Schema.string())]
    assert chunk_column(["id", "k"], ints) == "id"
    assert chunk_column(["k", "id"], ints) is None  # not an integer: the table is one chunk


def test_snapshot_chunk_queries_cover_each_key_once() -> None:
    from sluice.connectors.cdc._snapshot import check_mode, chunk_query

    db = _Db()

    def query(first: dict | None, last: dict | None, column: str | None = "id"):
        start = None if first is None else {"lsn": 1, "snapshot": first}
        end = {"lsn": 2} if last is None else {"lsn": 2, "snapshot": last}
        return chunk_query(db, "t", column, start, end)

    assert query(None, {"upto": 400, "done": False}) == (
        ' FROM "t" WHERE "id" <= %s',
        (400,),
    )
    assert query({"upto": 400, "done": False}, {"upto": 800, "done": False}) == (
        ' FROM "t" WHERE "id" > %s AND "id" <= %s',
        (400, 800),
    )
    # the last chunk has no upper bound: rows inserted above the planned maximum are read too
    assert query({"upto": 800, "done": False}, {"upto": 900, "done": True}) == (
        ' FROM "t" WHERE "id" > %s',
        (800,),
    )
    assert query({"upto": 900, "done": True}, None) is None  # done: nothing more to read
    assert query({"upto": 5, "done": False}, {"upto": 5, "done": False}) is None
    # a range that (re)starts a snapshot, or one whose re-read waits for the log, reads no chunk
    assert query({"upto": 5, "done": False}, {"upto": None, "done": False}) is None
    waiting = {"upto": None, "done": False, "since": {"lsn": 9}}
    assert query(None, waiting) is None and query(waiting, waiting) is None
    assert query(waiting, {"upto": 400, "done": False}) == (
        ' FROM "t" WHERE "id" <= %s',
        (400,),
    )
    assert query(None, {"upto": None, "done": True}, column=None) == (' FROM "t"', ())
    with pytest.raises(ConfigException, match=r"snapshot\.mode.*'full' is not one of"):
        check_mode("full")


class _Result:
    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows

    def scalar(self) -> object:
        return self.rows[0][0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return self.rows

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None


class _Conn:
    """Answers a server's settings queries from a table of SQL prefix → rows."""

    def __init__(self, answers: dict[str, list[tuple]]) -> None:
        self.answers = answers

    def exec_driver_sql(self, sql: str, params: object = None) -> _Result:
        for prefix, rows in self.answers.items():
            if sql.startswith(prefix):
                return _Result(rows)
        raise AssertionError(f"unexpected query {sql}")


class _Server:
    def describe(self) -> str:
        return "db at 127.0.0.1"


def test_server_settings_without_a_log_fail_naming_the_setting() -> None:
    # Turning these off needs a server restart, so their checks are tested on the answers: a
    # ConfigException (a 400 at create) naming the key that names the server.
    from sluice.connectors.cdc import mysql, postgres
    from sluice.connectors.cdc._config import TypedKeys

    values = {"table.include.list": [], "table.exclude.list": []}
    debezium = TypedKeys.of({"database.hostname": "db"})
    with pytest.raises(ConfigException, match=r"^database\.hostname: .*wal_level is 'replica'"):
        postgres._check(_Server(), _Conn({"SHOW wal_level": [("replica",)]}), values, debezium)
    settings = [("log_bin", "OFF"), ("binlog_format", "ROW"), ("binlog_row_image", "FULL")]
    with pytest.raises(ConfigException, match=r"^connection\.url: .*log_bin \(the binary log"):
        mysql._setup(_Server(), _Conn({"SHOW GLOBAL VARIABLES": settings}), values, TypedKeys())
    statement = [("log_bin", "ON"), ("binlog_format", "STATEMENT"), ("binlog_row_image", "FULL")]
    with pytest.raises(ConfigException, match=r"binlog_format is STATEMENT.*binlog_format=ROW"):
        mysql._setup(_Server(), _Conn({"SHOW GLOBAL VARIABLES": statement}), values, debezium)


def test_connection_errors_name_the_keys_that_were_typed() -> None:
    from sluice.connectors.cdc._config import TypedKeys

    refused = ConfigException(
        "connection.password",
        "mysql://db:3306/shop refused the credentials: Access denied",
        suggestion="check connection.user and connection.password",
    )
    typed = TypedKeys.of({"database.hostname": "db", "database.password": "x"}).retyped(refused)
    assert typed.key == "database.password"
    assert str(typed) == (
        "database.password: mysql://db:3306/shop refused the credentials: Access denied "
        "(check database.user and database.password)"
    )
    assert TypedKeys.of({"connection.url": "jdbc:mysql://db/shop"}).retyped(refused) is refused


def test_ddl_statements_are_classified() -> None:
    from sluice.connectors.cdc._evolve import ddl_kind

    table = "shop.items"
    assert ddl_kind("ALTER TABLE items ADD COLUMN c INT NULL", "shop", table) == "add"
    assert ddl_kind("alter table `shop`.`items` add (a int, b text), add index (a)", None, table)
    assert ddl_kind("ALTER TABLE items ADD c INT DEFAULT 1", "other", table) is None
    assert ddl_kind("ALTER TABLE items ADD INDEX i (c)", "shop", table) is None
    assert ddl_kind("ALTER TABLE items ALTER COLUMN c SET DEFAULT 3", "shop", table) is None
    for other in (
        "ALTER TABLE items MODIFY c BIGINT",
        "ALTER TABLE items ADD c INT, DROP COLUMN d",
        "ALTER TABLE items ADD PRIMARY KEY (c)",
        "ALTER TABLE items CHANGE c d INT",
        "TRUNCATE items",
        "DROP TABLE shop.items",
    ):
        assert ddl_kind(other, "shop", table) == "other", other
    assert ddl_kind("ALTER TABLE orders ADD c INT", "shop", table) is None


def test_a_logged_row_shape_is_decoded_followed_or_refused() -> None:
    from sluice.connectors.cdc._evolve import verdict

    cols = [("id", Schema.of(FieldType.INT32, optional=False)), ("n", Schema.string())]
    types = {"id": (23, -1), "n": (25, -1)}
    assert verdict("t", cols, ["id"], ["id", "n"], types, types) is None
    assert verdict("t", cols, ["id"], ["id"]) is None  # an older row: n is optional (null)
    assert verdict("t", cols, ["id"], ["id", "n", "x"]) == "ADD COLUMN x"
    required = [("id", cols[0][1]), ("n", Schema.string(optional=False))]
    assert verdict("t", required, ["id"], ["id"]) == "DROP COLUMN n"
    with pytest.raises(ConnectException, match=r"table t: key column\(s\) \['id'\] were dropped"):
        verdict("t", cols, ["id"], ["n", "id2"])
    with pytest.raises(ConnectException, match=r"table t: the type of column\(s\) \['n'\]"):
        verdict("t", cols, ["id"], ["id", "n"], types, {**types, "n": (1043, 24)})


def test_a_cdc_task_missing_a_hook_cannot_be_made() -> None:
    from sluice.connectors.cdc._base import CdcTask
    from sluice.connectors.cdc.mysql import MySqlCdcSourceTask

    class Partial(MySqlCdcSourceTask):
        touched_keys = CdcTask.touched_keys  # back to the abstract hook

    with pytest.raises(TypeError, match="touched_keys"):
        Partial()
    MySqlCdcSourceTask()  # every hook filled in


def _items_table(name: str, topic: str, key: tuple[str, FieldType], text: str) -> Any:
    """A captured table as a task knows it: an integer key column and one text column."""
    from sluice.connectors.cdc._base import CdcTable

    return CdcTable(
        {
            "table": name,
            "topic": topic,
            "pk": [key[0]],
            "columns": [
                [key[0], Schema.of(key[1], optional=False).to_json()],
                [text, Schema.string().to_json()],
            ],
        }
    )


def test_the_shared_table_checks_name_the_columns_and_keys_change_into_delete_and_create() -> None:
    from sluice.connectors.cdc.mysql import MySqlCdcSourceTask

    table = _items_table("shop.items", "p.shop.items", ("id", FieldType.INT32), "note")
    assert (table.space, table.short) == ("shop", "items")
    with pytest.raises(
        ConnectException, match=r"here: table shop.items now has column\(s\) \['x'\]"
    ):
        table.check_columns(["id", "x"], "here")
    with pytest.raises(ConnectException, match=r"table shop.items has no column\(s\) \['id'\]"):
        table.check_columns(["note"], "here")
    table.check_columns(["note"], "here", partial=True)  # a key-only image may lack columns
    task = MySqlCdcSourceTask()
    at = ({"db": "shop"}, datetime(2024, 1, 1, tzinfo=UTC), 5)
    moved = list(task.change_records(table, "u", {"id": 1}, {"id": 2}, at))
    assert [(r.value["op"], r.key) for r in moved] == [("d", '{"id":1}'), ("c", '{"id":2}')]
    same = list(task.change_records(table, "u", {"id": 1, "note": "a"}, {"id": 1, "note": "b"}, at))
    assert [(r.value["op"], r.key, r.topic) for r in same] == [("u", '{"id":1}', "p.shop.items")]


@pytest.mark.parametrize(
    ("query", "ddl"),
    [
        (b"BEGIN", False),
        ("COMMIT", False),
        (b" commit ", False),
        (b"XA START X'01',X'',1", False),
        (b"ALTER TABLE t ADD COLUMN qty INT", True),
        ("CREATE TABLE t (id INT)", True),
        (b"TRUNCATE t", True),
    ],
)
def test_a_binlog_query_event_is_ddl_unless_it_is_a_transactions_step(
    query: bytes | str, ddl: bool
) -> None:
    from types import SimpleNamespace

    from sluice.connectors.cdc.mysql import _is_ddl

    assert _is_ddl(SimpleNamespace(query=query)) is ddl


@pytest.mark.parametrize("touched", [set(), {'{"id":3}', '{"id":7}', '{"id":99}'}])
def test_the_snapshot_batch_drops_rows_changed_inside_the_window(touched: set[str]) -> None:
    from sluice.connectors.cdc._snapshot import snapshot_batch

    table = _items_table("s.t", "p.s.t", ("id", FieldType.INT64), "name")
    after_type = table.envelope_type.field("after").type
    rows = [{"id": i, "name": f"n{i}"} for i in range(1, 9)]
    source = {"connector": "postgresql", "name": "p", "db": "s", "table": "t", "lsn": 5}
    batch = snapshot_batch(table, pa.array(rows, after_type), touched, source, 1234)
    kept = [r for r in rows if key_text(r, ["id"]) not in touched]
    assert batch.column("key").to_pylist() == [key_text(r, ["id"]) for r in kept]
    assert batch.column("topic").to_pylist() == ["p.s.t"] * len(kept)
    values = batch.column("value").to_pylist()
    assert [v["after"] for v in values] == kept
    assert {(v["op"], v["ts_ms"], v["before"] is None) for v in values} == {("r", 1234, True)}
    assert {v["source"]["lsn"] for v in values} == {5}
    assert batch.column("value").type == table.envelope_type


def test_key_texts_are_the_row_keys_for_every_kind_of_key() -> None:
    from sluice.connectors.cdc._envelope import key_texts

    rows = [
        {
            "k": 'q"ü\\🚀',
            "n": -(2**63),
            "d": Decimal("1.50"),
            "t": datetime(2024, 1, 2, tzinfo=UTC),
        },
        {"k": "", "n": 7, "d": Decimal("12"), "t": datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)},
    ]
    type_ = pa.struct(
        [
            ("k", pa.string()),
            ("n", pa.int64()),
            ("d", pa.decimal128(10, 2)),
            ("t", pa.timestamp("us", tz="UTC")),
        ]
    )
    for pk in (["n"], ["k"], ["k", "n"], ["d", "t", "n"]):
        got = key_texts(pa.array(rows, type_), pk).to_pylist()
        # the Arrow decimal reads back as Decimal('12.00'): compare with the row it holds
        assert got == [key_text(r, pk) for r in pa.array(rows, type_).to_pylist()], pk
