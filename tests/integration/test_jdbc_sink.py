"""JDBC sink against the real MariaDB and PostgreSQL servers, driving its task directly."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from decimal import Decimal

import pyarrow as pa
import pytest

from sluice.sdk import BatchId, ConfigException, ConnectException, ConnectRecord
from sluice.testing import sink_frame
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db, sink_task

db, my, pg = jdbc_db.db, jdbc_db.my, jdbc_db.pg  # fixtures

PEOPLE = pa.struct(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("score", pa.decimal128(10, 2)),
    ]
)


def _people(rows: list[tuple]) -> pa.Array:
    return pa.array([{"id": i, "name": n, "score": s} for i, n, s in rows], PEOPLE)


def _write(d: Db, values: pa.Array, topic: str = "people", key=None, **config: str) -> dict:
    task = sink_task(d.config(**config))
    task.put_batch(sink_frame(values, topic, key=key))
    return task.flush(BatchId("run", 1))


def _table(d: Db, name: str = "people") -> None:
    d.execute(
        f"CREATE TABLE {d.q(name)} (id INT PRIMARY KEY, name VARCHAR(50), score DECIMAL(10,2))"
    )


def _content(d: Db, name: str = "people") -> list[tuple]:
    return d.rows(f"SELECT * FROM {d.q(name)} ORDER BY 1")


def test_insert_upsert_update(db: Db) -> None:
    _table(db)
    rows = [(1, "ann", Decimal("1.50")), (2, "bob", None), (3, "cy 🚀", Decimal("-3.25"))]
    result = _write(db, _people(rows))
    assert result["rows"] == 3 and result["tables"] == ["people"]
    assert _content(db) == rows
    upsert = dict(insert__mode="upsert", pk__mode="record_value", pk__fields="id")
    # a replayed micro-batch changes nothing
    for _ in range(2):
        _write(db, _people([(2, "bob", Decimal("2.00")), (4, "dee", None)]), **upsert)
    assert _content(db) == [rows[0], (2, "bob", Decimal("2.00")), rows[2], (4, "dee", None)]
    _write(
        db,
        _people([(3, "cy", Decimal("9.99")), (99, "nobody", None)]),
        insert__mode="update",
        pk__mode="record_value",
        pk__fields="id",
    )
    assert _content(db)[2] == (3, "cy", Decimal("9.99")) and len(_content(db)) == 4


def test_later_records_win_within_a_batch(db: Db) -> None:
    _table(db)
    values = _people([(1, "a", None), (2, "b", None), (1, "a2", None), (1, "a3", Decimal("1"))])
    _write(db, values, insert__mode="upsert", pk__mode="record_value", pk__fields="id")
    assert _content(db) == [(1, "a3", Decimal("1.00")), (2, "b", None)]


def test_insert_mode_keeps_duplicates_an_error(db: Db) -> None:
    _table(db)
    with pytest.raises(ConnectException, match=r"writing to table 'people' \(record of topic "):
        _write(db, _people([(1, "a", None), (1, "again", None)]))
    assert _content(db) == []  # the whole micro-batch was rolled back


def test_tombstones_delete_by_record_key(db: Db) -> None:
    _table(db)
    _write(db, _people([(i, f"p{i}", None) for i in range(1, 6)]))
    keyed = dict(
        insert__mode="upsert", pk__mode="record_key", pk__fields="id", delete__enabled="true"
    )
    # primitive keys (JSON text of a number is a string key here: use a struct key instead)
    key_type = pa.struct([pa.field("id", pa.int32())])
    values = pa.array([None, {"id": 3, "name": "back", "score": None}, None], PEOPLE)
    keys = pa.array([{"id": 2}, {"id": 3}, {"id": 4}], key_type)
    task = sink_task(db.config(**keyed))
    task.put_batch(sink_frame(values, "people", key=keys))
    task.flush(BatchId("run", 2))
    assert [r[:2] for r in _content(db)] == [(1, "p1"), (3, "back"), (5, "p5")]
    # a text key with pk.fields naming its column
    task = sink_task(db.config(**keyed))
    task.put(
        [
            ConnectRecord(value=None, key="5", topic="people"),
            ConnectRecord(value={"name": "one"}, key="1", topic="people"),
        ]
    )
    task.flush(BatchId("run", 3))
    assert [r[:2] for r in _content(db)] == [(1, "one"), (3, "back")]


def test_a_tombstone_without_delete_enabled_is_an_error(db: Db) -> None:
    _table(db)
    with pytest.raises(
        ConnectException,
        match=r"record of topic 'people' queue 0 offset 1: the record has a null value "
        r"\(a tombstone\) but delete.enabled=false",
    ):
        _write(db, pa.array([{"id": 1, "name": "x", "score": None}, None], PEOPLE))


def test_auto_create_gives_every_type_its_column(db: Db) -> None:
    fields = [
        ("id", pa.int64(), False),
        ("i8", pa.int8(), True),
        ("i16", pa.int16(), True),
        ("i32", pa.int32(), True),
        ("f32", pa.float32(), True),
        ("f64", pa.float64(), True),
        ("ok", pa.bool_(), True),
        ("txt", pa.string(), True),
        ("raw", pa.binary(), True),
        ("dec", pa.decimal128(38, 10), True),
        ("day", pa.date32(), True),
        ("at", pa.time64("us"), True),
        ("ts", pa.timestamp("us", tz="UTC"), True),
    ]
    type_ = pa.struct([pa.field(n, t, nullable=nul) for n, t, nul in fields])
    row = {
        "id": 2**63 - 1,
        "i8": -128,
        "i16": -32768,
        "i32": -(2**31),
        "f32": 1.5,
        "f64": -2.5e300,
        "ok": True,
        "txt": "ünï 🚀 \t\n\\ '\"",
        "raw": bytes(range(256)),
        "dec": Decimal("-9999999999999999999999999999.9999999999"),
        "day": date(1, 1, 1),
        "at": time(23, 59, 59, 999_999),
        "ts": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    }
    empty = dict.fromkeys(row)
    empty["id"] = 1
    _write(
        db,
        pa.array([row, empty], type_),
        topic="made",
        insert__mode="upsert",
        pk__mode="record_value",
        pk__fields="id",
        auto__create="true",
    )
    got = _content(db, "made")
    assert got[0] == (1, *([None] * 12))
    expected = dict(row)
    if db.dialect == "mysql":
        expected["ok"] = 1  # BOOLEAN is TINYINT(1)
        expected["ts"] = row["ts"].replace(tzinfo=None)  # DATETIME(6)
        expected["at"] = datetime.combine(date.min, row["at"]) - datetime.min  # PyMySQL: timedelta
    assert dict(zip(row, got[1], strict=True)) == expected
    nullable = db.rows(
        "SELECT column_name, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'made' ORDER BY ordinal_position",
        (db.namespace,),
    )
    assert nullable[0] == ("id", "NO") and {n for _, n in nullable[1:]} == {"YES"}
    precision = db.rows(
        "SELECT data_type, datetime_precision FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'made' AND column_name = 'at'",
        (db.namespace,),
    )
    assert precision == [("time without time zone" if db.dialect == "postgresql" else "time", 6)]


SINK_TIMES = [time(0), time(0, 0, 0, 1), time(12, 34, 56, 1), time(23, 59, 59, 999_999), None]


def test_times_are_written_to_the_microsecond(db: Db) -> None:
    """Insert (PostgreSQL COPY, MySQL multi-row INSERT), upsert over existing rows (a staging
    table / ON DUPLICATE KEY UPDATE) and per-record `put` all write every digit."""
    column = "TIME" if db.dialect == "postgresql" else "TIME(6)"  # PostgreSQL's TIME has µs
    db.execute(f"CREATE TABLE {db.q('clock')} (id INT PRIMARY KEY, t {column})")
    type_ = pa.struct([pa.field("id", pa.int32(), nullable=False), pa.field("t", pa.time64("us"))])

    def read() -> list:
        got = [t for _, t in _content(db, "clock")]
        if db.dialect == "mysql":  # PyMySQL reads TIME as a timedelta
            got = [None if t is None else (datetime.min + t).time() for t in got]
        return got

    _write(db, pa.array([{"id": i, "t": t} for i, t in enumerate(SINK_TIMES)], type_), "clock")
    assert read() == SINK_TIMES
    upsert = dict(insert__mode="upsert", pk__mode="record_value", pk__fields="id")
    backwards = list(reversed(SINK_TIMES))
    _write(
        db, pa.array([{"id": i, "t": t} for i, t in enumerate(backwards)], type_), "clock", **upsert
    )
    assert read() == backwards
    task = sink_task(db.config(**upsert))
    task.put([ConnectRecord(value={"id": 0, "t": time(1, 2, 3, 4)}, topic="clock")])
    task.flush(BatchId("run", 4))
    assert read()[0] == time(1, 2, 3, 4)


def test_auto_evolve_adds_nullable_columns(db: Db) -> None:
    _table(db)
    wider = pa.struct([*PEOPLE, pa.field("email", pa.string()), pa.field("age", pa.int16())])
    values = pa.array([{"id": 1, "name": "a", "score": None, "email": "a@x", "age": 7}], wider)
    with pytest.raises(
        ConnectException,
        match=r"table 'people' has no column\(s\) \['email', 'age'\].*set auto.evolve=true",
    ):
        _write(db, values)
    _write(db, values, auto__evolve="true")
    assert _content(db) == [(1, "a", None, "a@x", 7)]


def test_a_missing_table_is_named(db: Db) -> None:
    with pytest.raises(
        ConnectException, match=r"table 'nowhere' does not exist in .*create it, or set auto.create"
    ):
        _write(db, _people([(1, "a", None)]), topic="nowhere")


def test_fields_whitelist_and_table_name_format(db: Db) -> None:
    _table(db, "archive_people")
    _write(
        db,
        _people([(1, "a", Decimal("5")), (2, "b", Decimal("6"))]),
        table__name__format=f"{db.namespace}.archive_${{topic}}",
        fields__whitelist="name",
        pk__mode="record_value",
        pk__fields="id",
        insert__mode="upsert",
    )
    assert _content(db, "archive_people") == [(1, "a", None), (2, "b", None)]


HOSTILE = ['a"b', "c`d", "select", "100%", "名前", "sp ace", "x:y", "--", "e'f"]


def test_hostile_table_and_column_names_cannot_inject(db: Db) -> None:
    victim = "victim"
    db.execute(f"CREATE TABLE {db.q(victim)} (id INT)")
    topic = 'we"ird`; DROP TABLE victim; -- %s'
    type_ = pa.struct(
        [pa.field("id", pa.int32(), nullable=False)] + [pa.field(n, pa.string()) for n in HOSTILE]
    )

    def values(ids: range, text: str) -> pa.Array:
        return pa.array([{"id": i, **{n: f"{text} {n} {i}" for n in HOSTILE}} for i in ids], type_)

    keyed = dict(pk__mode="record_value", pk__fields="id", auto__create="true")
    _write(db, values(range(3), "one"), topic=topic, insert__mode="upsert", **keyed)
    _write(db, values(range(1, 4), "two"), topic=topic, insert__mode="upsert", **keyed)
    _write(db, values(range(0, 1), "three"), topic=topic, insert__mode="update", **keyed)
    got = _content(db, topic)
    assert [r[0] for r in got] == [0, 1, 2, 3]
    assert got[0][1:] == tuple(f"three {n} 0" for n in HOSTILE)
    assert got[3][1:] == tuple(f"two {n} 3" for n in HOSTILE)
    assert db.rows(f"SELECT COUNT(*) FROM {db.q(victim)}") == [(0,)]  # still there
    # the names arrived verbatim, as columns of a table with that very name
    columns = db.rows(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s ORDER BY ordinal_position",
        (db.namespace, topic),
    )
    assert [c[0] for c in columns] == ["id", *HOSTILE]
    # deletes by hostile key column
    task = sink_task(
        db.config(
            insert__mode="upsert",
            pk__mode="record_key",
            pk__fields="id",
            delete__enabled="true",
        )
    )
    key = pa.array([{"id": 2}], pa.struct([pa.field("id", pa.int32())]))
    task.put_batch(sink_frame(pa.nulls(1, type_), topic, key=key))
    task.flush(BatchId("run", 9))
    assert [r[0] for r in _content(db, topic)] == [0, 1, 3]


def test_json_values_without_a_schema(db: Db) -> None:
    _table(db)
    task = sink_task(db.config(insert__mode="upsert", pk__mode="record_value", pk__fields="id"))
    task.put_batch(
        sink_frame(
            pa.array(
                [
                    json.dumps({"id": 1, "name": "a", "score": 1.25}),
                    json.dumps({"id": 2, "name": "b"}),  # other fields: a statement of its own
                ]
            ),
            "people",
        )
    )
    task.flush(BatchId("run", 1))
    assert _content(db) == [(1, "a", Decimal("1.25")), (2, "b", None)]
    task = sink_task(db.config())
    with pytest.raises(
        ConnectException, match=r"record of topic 'people' queue 0 offset 0: the value is not JSON"
    ):
        task.put_batch(sink_frame(pa.array(["{not json"]), "people"))
    task = sink_task(db.config(auto__create="true"))
    task.put_batch(sink_frame(pa.array([json.dumps({"id": 5})]), "fresh"))
    with pytest.raises(ConnectException, match=r"cannot create column 'id' without a type"):
        task.flush(BatchId("run", 3))


def test_statements_respect_batch_size(db: Db) -> None:
    _table(db)
    rows = [(i, f"n{i}", None) for i in range(1, 8)]
    upsert = dict(insert__mode="upsert", pk__mode="record_value", pk__fields="id", batch__size="2")
    _write(db, _people(rows), **upsert)
    _write(
        db, _people([(i, "u", None) for i in range(1, 8)]), **dict(upsert, insert__mode="update")
    )
    assert _content(db) == [(i, "u", None) for i in range(1, 8)]


def test_one_transaction_for_all_tables_of_a_batch(db: Db) -> None:
    _table(db, "a")
    db.execute(
        f"CREATE TABLE {db.q('b')} "
        "(id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, score DECIMAL(10,2))"
    )
    task = sink_task(db.config())
    task.put_batch(sink_frame(_people([(1, "fine", None)]), "a"))
    task.put_batch(sink_frame(_people([(1, None, None)]), "b"))  # NOT NULL violation
    with pytest.raises(ConnectException, match=r"writing to table 'b'"):
        task.flush(BatchId("run", 1))
    assert _content(db, "a") == []  # rolled back with b


def test_upsert_into_a_table_without_a_key_is_explained(db: Db) -> None:
    db.execute(f"CREATE TABLE {db.q('loose')} (id INT, name VARCHAR(50), score DECIMAL(10,2))")
    with pytest.raises(
        ConnectException,
        match=r"table 'loose' has no primary key or unique index on exactly \(id\): an upsert",
    ):
        _write(
            db,
            _people([(1, "a", None)]),
            topic="loose",
            insert__mode="upsert",
            pk__mode="record_value",
            pk__fields="id",
        )


def test_an_unreachable_database_is_retried_then_reported(db: Db) -> None:
    dead = db.jdbc_url.replace(":5432", ":1").replace(":3306", ":1")
    from sluice.connectors.jdbc import JdbcSinkTask
    from sluice.engine import parse_settings
    from sluice.sdk import SinkTaskContext

    for extra, message in [
        (  # errors.retry.* is the engine's, around flush as around put (issue 19)
            {"errors.retry.timeout": "700"},
            r"flush failed after \d retries in \d+ ms \(errors.retry.timeout=700\): "
            r"writing 1 records: ",
        ),
        (
            {"max.retries": "2", "retry.backoff.ms": "10"},
            r"writing 1 records .*failed after 2 retries: ",
        ),
    ]:
        task = JdbcSinkTask()
        task.context = SinkTaskContext(batch_id=BatchId("run", 1))
        task.start(
            db.config(connection__url=dead, **{k.replace(".", "__"): v for k, v in extra.items()})
        )
        task.put_batch(sink_frame(_people([(1, "a", None)]), "people"))
        policy = parse_settings({"connector.class": "x", **extra}, "source").retry
        with pytest.raises(ConnectException, match=message):
            policy.call(lambda t=task: t.flush(BatchId("run", 1)), "flush")


def test_bad_sink_configs_name_the_key(db: Db) -> None:
    cases = [
        (dict(insert__mode="merge"), r"insert.mode: must be one of insert, upsert, update"),
        (dict(insert__mode="upsert"), r"pk.mode: insert.mode=upsert needs a primary key"),
        (dict(pk__mode="somehow"), r"pk.mode: must be one of none, record_key, record_value"),
        (
            dict(delete__enabled="true", pk__mode="record_value"),
            r"delete.enabled: needs pk.mode=record_key",
        ),
        (dict(batch__size="0"), r"batch.size: must be at least 1"),
        (
            dict(
                connection__url=db.jdbc_url.replace(":5432", ":1").replace(":3306", ":1"),
                connection__attempts="1",
            ),
            r"connection.url: cannot connect to ",
        ),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigException, match=message):
            sink_task(db.config(**extra))


def test_wrong_password_is_named(my: Db) -> None:
    with pytest.raises(ConfigException, match=r"connection.password: .*Access denied"):
        sink_task(my.config(connection__password="nope"))


def test_records_and_batches_for_one_table_in_one_micro_batch(db: Db) -> None:
    db.execute(
        f"CREATE TABLE {db.q('people')} (id INT PRIMARY KEY, name VARCHAR(50), "
        "score DECIMAL(10,2), __v INT)"
    )
    task = sink_task(db.config(insert__mode="upsert", pk__mode="record_value", pk__fields="id"))
    type_ = pa.struct([*PEOPLE, pa.field("__v", pa.int32())])
    task.put_batch(
        sink_frame(pa.array([{"id": 1, "name": "a", "score": None, "__v": 1}], type_), "people")
    )
    task.put([ConnectRecord(value={"id": 2, "name": "b", "__v": 2}, topic="people")])
    task.put_batch(
        sink_frame(pa.array([{"id": 1, "name": "a2", "score": None, "__v": 3}], type_), "people")
    )
    task.flush(BatchId("run", 1))
    assert _content(db) == [(1, "a2", None, 3), (2, "b", None, 2)]


def test_integer_record_keys_delete_in_arrow(db: Db) -> None:
    _table(db)
    _write(db, _people([(i, f"p{i}", None) for i in range(1, 5)]))
    task = sink_task(
        db.config(
            insert__mode="upsert", pk__mode="record_key", pk__fields="id", delete__enabled="true"
        )
    )
    values = pa.array([None, {"id": 0, "name": "four", "score": Decimal("4")}], PEOPLE)
    task.put_batch(sink_frame(values, "people", key=pa.array([2, 4], pa.int64())))
    task.flush(BatchId("run", 2))
    assert _content(db) == [(1, "p1", None), (3, "p3", None), (4, "four", Decimal("4.00"))]


UPSERT = dict(insert__mode="upsert", pk__mode="record_value", pk__fields="id")


def test_upserted_keys_in_an_empty_range_are_copied_straight_in(pg: Db) -> None:
    _table(pg)
    first = _write(pg, _people([(i, f"n{i}", None) for i in range(1, 6)]), **UPSERT)
    assert first["appended"] == 5  # an empty table: nothing can conflict
    overlap = _write(pg, _people([(4, "four", None), (6, "six", None)]), **UPSERT)
    assert overlap["appended"] == 0  # 4 exists: staged upsert
    later = [(10, "ten", Decimal("1.00")), (12, "twelve", None)]
    assert _write(pg, _people(later), **UPSERT)["appended"] == 2
    assert _write(pg, _people(later), **UPSERT)["appended"] == 0  # a replay changes nothing
    expected = [(i, f"n{i}", None) for i in range(1, 4)] + [(4, "four", None), (5, "n5", None)]
    assert _content(pg) == [*expected, (6, "six", None), *later]
    # the per-record path (JSON values) takes the same decision
    task = sink_task(pg.config(**UPSERT))
    task.put_batch(sink_frame(pa.array([json.dumps({"id": 20, "name": "j"})]), "people"))
    assert task.flush(BatchId("run", 2))["appended"] == 1
    task = sink_task(pg.config(**UPSERT))
    task.put_batch(sink_frame(pa.array([json.dumps({"id": 20, "name": "k"})]), "people"))
    assert task.flush(BatchId("run", 3))["appended"] == 0
    assert _content(pg)[-1] == (20, "k", None)


def test_a_conflict_the_probe_missed_falls_back_to_the_upsert(
    pg: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.connectors._sql.dialects import postgres as pg_dialect

    _table(pg)
    pg.execute("INSERT INTO people VALUES (2, 'old', NULL)")
    # as if row 2 had been committed between the probe and the COPY: the probe looks elsewhere
    monkeypatch.setattr(pg_dialect, "_integer_span", lambda rows: (1000, 1000))
    result = _write(pg, _people([(1, "one", None), (2, "new", None)]), **UPSERT)
    assert result["appended"] == 0 and result["rows"] == 2
    assert _content(pg) == [(1, "one", None), (2, "new", None)]


def test_another_unique_index_still_fails_the_upsert_naming_the_table(pg: Db) -> None:
    pg.execute("CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(50) UNIQUE, score NUMERIC)")
    pg.execute("INSERT INTO people VALUES (1, 'ann', NULL)")
    with pytest.raises(ConnectException, match=r"writing to table 'people'.*people_name_key"):
        _write(pg, _people([(2, "ann", None)]), **UPSERT)
    assert _content(pg) == [(1, "ann", None)]


def test_instants_reach_postgresql_exactly_whatever_their_arrow_zone(pg: Db) -> None:
    # the COPY path writes zoned timestamps as zone-less UTC text plus "+00" (see _csv_ready)
    pg.execute("CREATE TABLE times (id INT PRIMARY KEY, at TIMESTAMPTZ, wall TIMESTAMP)")
    instants = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
        datetime(2024, 3, 31, 0, 59, 59, 999999, tzinfo=UTC),  # Paris: just before DST starts
        datetime(2024, 3, 31, 1, 0, tzinfo=UTC),  # and when it starts
        None,
    ]
    for zone in ("UTC", "Europe/Paris"):
        type_ = pa.struct(
            [
                pa.field("id", pa.int32(), nullable=False),
                pa.field("at", pa.timestamp("us", tz=zone)),
                pa.field("wall", pa.timestamp("ms", tz=zone)),
            ]
        )
        rows = [
            {"id": i, "at": v, "wall": v and v.replace(microsecond=v.microsecond // 1000 * 1000)}
            for i, v in enumerate(instants)
        ]
        pg.execute("DELETE FROM times")
        _write(pg, pa.array(rows, type_), topic="times", **UPSERT)
        got = pg.rows("SELECT id, at, wall FROM times ORDER BY id")
        assert [(i, at) for i, at, _ in got] == list(enumerate(instants)), zone
        walls = [None if w is None else w.replace(tzinfo=UTC) for _, _, w in got]
        assert walls == [r["wall"] for r in rows], zone


@pytest.fixture
def early_on_every_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.connectors.jdbc import sink as sink_module

    monkeypatch.setattr(sink_module._EarlyWrites, "min_rows", 1)


def test_batches_are_written_as_they_arrive_with_the_effect_of_one_write(
    pg: Db, early_on_every_piece: None
) -> None:
    _table(pg)
    _write(pg, _people([(1, "one", None), (5, "five", None)]))
    task = sink_task(
        pg.config(
            insert__mode="upsert", pk__mode="record_key", pk__fields="id", delete__enabled="true"
        )
    )
    pieces = [
        ([2, 3, 4], [(0, "two", None), (0, "three", None), (0, "four", None)]),
        ([3, 5, 1], [(0, "three again", None), None, (0, "one again", None)]),  # 5 deleted
        ([4, 6, 3], [None, (0, "six", Decimal("6")), (0, "three at last", None)]),
    ]
    first = 0
    for keys, rows in pieces:
        values = pa.array(
            [None if r is None else dict(zip(PEOPLE.names, r, strict=True)) for r in rows],
            PEOPLE,
        )
        task.put_batch(sink_frame(values, "people", key=pa.array(keys, pa.int64()), first=first))
        first += len(keys)
    assert _content(pg) == [(1, "one", None), (5, "five", None)]  # nothing before flush
    result = task.flush(BatchId("run", 1))
    assert result["early"] is True
    assert _content(pg) == [
        (1, "one again", None),
        (2, "two", None),
        (3, "three at last", None),
        (6, "six", Decimal("6.00")),
    ]


def test_writing_early_steps_aside_for_a_new_column(pg: Db, early_on_every_piece: None) -> None:
    _table(pg)
    task = sink_task(pg.config(auto__evolve="true", **UPSERT))
    task.put_batch(sink_frame(_people([(1, "one", None)]), "people"))
    wider = pa.struct([*PEOPLE, pa.field("city", pa.string())])
    row = {"id": 2, "name": "two", "score": None, "city": "Kyiv"}
    task.put_batch(sink_frame(pa.array([row], wider), "people", first=1))
    result = task.flush(BatchId("run", 1))
    assert result["early"] is False
    assert _content(pg) == [(1, "one", None, None), (2, "two", None, "Kyiv")]


def test_writing_early_steps_aside_on_an_error_and_flush_names_it(
    pg: Db, early_on_every_piece: None
) -> None:
    _table(pg)
    pg.execute("INSERT INTO people VALUES (2, 'old', NULL)")
    task = sink_task(pg.config(insert__mode="insert"))
    task.put_batch(sink_frame(_people([(1, "one", None)]), "people"))
    task.put_batch(sink_frame(_people([(2, "two", None)]), "people", first=1))
    with pytest.raises(ConnectException, match=r"writing to table 'people'.*people_pkey"):
        task.flush(BatchId("run", 1))
    assert _content(pg) == [(2, "old", None)]  # row 1, written early, was rolled back


def test_a_task_stopped_before_flush_leaves_nothing_behind(
    pg: Db, early_on_every_piece: None
) -> None:
    _table(pg)
    task = sink_task(pg.config(insert__mode="insert"))
    task.put_batch(sink_frame(_people([(1, "one", None), (2, "two", None)]), "people"))
    task.stop()
    assert _content(pg) == []
    # rolled back, not left open: the same keys are free at once (an open transaction would
    # hold them, and this insert would wait for it; lock_timeout turns that into an error)
    pg.execute("SET lock_timeout = '2s'; INSERT INTO people VALUES (1, 'x', NULL), (2, 'y', NULL)")
    assert _write(pg, _people([(3, "three", None)]), insert__mode="insert")["early"] is True
