"""PostgreSQL change data capture on real Spark and the real servers.

A PostgreSQL table, captured from a logical replication slot, mirrored through a topic into
MariaDB by the JDBC sink: inserts, a multi-row transaction, updates of non-key and key columns,
deletes and NULLs, in most of the JDBC type test's types; afterwards the MariaDB table equals the
PostgreSQL table row for row, the topic holds each change event exactly once, and the slot was
advanced past what was committed. Then the errors a user meets first, each naming what is wrong.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pytest

from sluice.connectors.cdc import PostgresCdcSourceConnector
from sluice.sdk import ConfigException, ConnectException
from tests.conftest import wait_until
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_dead_letters import topic_records

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

PG_TABLE = """
    id INTEGER PRIMARY KEY, i16 SMALLINT, i64 BIGINT, n NUMERIC(20,4), f32 REAL,
    f64 DOUBLE PRECISION, flag BOOLEAN, tx TEXT, vc VARCHAR(40), bin BYTEA, dt DATE,
    tm TIME(6), ts TIMESTAMP(6), tsz TIMESTAMPTZ(6), js JSONB, u UUID
"""
COLUMNS = ["id", "i16", "i64", "n", "f32", "f64", "flag", "tx", "vc", "bin", "dt", "tm", "ts"]
COLUMNS += ["tsz", "js", "u"]


def _row(i: int) -> tuple:
    return (
        i,
        -32768 + i,
        2**62 + i,
        Decimal(f"{i}.1234"),
        1.5 * i,
        -2.2250738585072014e-308 if i == 1 else 1e300 / (i + 1),
        i % 2 == 0,
        "🚀 ünïcödé 'q' \"dq\"\n" * (i % 3 + 1),
        f"v{i}",
        bytes(range(i % 256)) + b"\x00\xff",
        date(9999, 12, 31) if i == 1 else date(2024, 1, i % 28 + 1),
        time(23, 59, 59, 999999) if i == 1 else time(i % 24, 30, 0, 123456),
        datetime(2024, 5, 1, 10, 0, 0, i),
        datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
        json.dumps({"a": [1, 2.5, "x"], "i": i}),
        str(uuid.UUID(int=i)),
    )


def _insert(pg: Db, rows: list[tuple]) -> None:
    marks = ", ".join(["%s"] * len(COLUMNS))
    pg.executemany(f"INSERT INTO {pg.table('items')} VALUES ({marks})", rows)


def _norm(value: Any) -> Any:
    """One value as both databases hand it back, made comparable."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (bytes, memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, float):
        return round(value, 6) if abs(value) < 1e30 else float(f"{value:.6e}")
    if isinstance(value, (dict, uuid.UUID)):
        return value if isinstance(value, dict) else str(value)
    if isinstance(value, str) and value.startswith("{"):
        return json.loads(value)
    if hasattr(value, "days"):  # MariaDB TIME → timedelta
        return (datetime.min + value).time()
    return value


def _table(d: Db, where: str) -> list[tuple]:
    cols = ", ".join(d.q(c) for c in COLUMNS)
    rows = d.rows(f"SELECT {cols} FROM {where} ORDER BY id")
    return [tuple(_norm(v) for v in r) for r in rows]


@pytest.fixture
def slot(pg: Db) -> Iterator[str]:
    name = f"sluice_{uuid.uuid4().hex[:10]}"
    yield name
    pg.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND NOT active",
        (name,),
    )
    pg.execute(f'DROP PUBLICATION IF EXISTS "{name}"')


def _source(pg: Db, slot: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "PostgresCdcSourceConnector",
        **pg.config(),
        "topic.prefix": "cdc",
        "table.include.list": f"{pg.namespace}.items",
        "slot.name": slot,
        "publication.name": slot,
        "value.converter": "AvroConverter",
        "snapshot.mode": "never",
        **extra,
    }


def mirror_sink(connection: dict[str, str], topic: str, **extra: str) -> dict[str, str]:
    """A JDBC sink applying `topic`'s change events to table `items` (Avro, upsert by the
    record key, deletes applied, the table created), over `connection`'s keys."""
    return {
        "connector.class": "JdbcSinkConnector",
        **connection,
        "connect.topicnames": topic,
        "table.name.format": "items",
        "value.converter": "AvroConverter",
        "insert.mode": "upsert",
        "pk.mode": "record_key",
        "delete.enabled": "true",
        "auto.create": "true",
        **extra,
    }


def _confirmed(pg: Db, slot: str) -> int:
    text = pg.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    )
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@pytest.mark.spark
def test_postgresql_to_mariadb_mirror_is_exact(pg: Db, slot: str, runner, my: Db) -> None:
    pg.execute(f"CREATE TABLE {pg.table('items')} ({PG_TABLE})")
    pg.execute(f"ALTER TABLE {pg.table('items')} REPLICA IDENTITY FULL")
    _insert(pg, [_row(1)])  # before the slot exists: not captured (snapshot.mode=never)
    runner.start("pg-cdc", _source(pg, slot))
    topic = f"cdc.{pg.namespace}.items"
    first = _confirmed(pg, slot)
    runner.start(
        "to-maria",
        mirror_sink(my.config(), topic),
    )
    my_items = my.table("items")
    pg.execute(f"DELETE FROM {pg.table('items')}")  # id 1's delete: captured, a no-op there
    # The workload: one multi-row transaction, single inserts, updates (non-key, key, to and
    # from NULL), deletes; 50 + 1 + 5 + 10 + (2 key changes: 2 events each) + 5 + 1 events.
    _insert(pg, [_row(i) for i in range(2, 52)])
    _insert(pg, [_row(52)])
    items = pg.table("items")
    with pg.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {items} SET vc = NULL, n = NULL WHERE id BETWEEN 2 AND 6")
    for i in range(7, 17):
        pg.execute(f"UPDATE {items} SET tx = %s, flag = NOT flag WHERE id = %s", (f"u{i}", i))
    pg.execute(f"UPDATE {items} SET id = 1000 WHERE id = 20")
    pg.execute(f"UPDATE {items} SET id = id + 2000, vc = 'moved' WHERE id = 21")
    pg.execute(f"DELETE FROM {items} WHERE id BETWEEN 30 AND 34")
    pg.execute(f"UPDATE {items} SET vc = 'back' WHERE id = 2")
    expected_events = 1 + 50 + 1 + 5 + 10 + 2 * 2 + 5 + 1

    def mirrored() -> bool:
        for running in runner.running.values():
            failure = running.failure()
            assert failure is None, failure[0]
        try:
            return _table(my, my_items) == _table(pg, items)
        except Exception:  # the sink has not created the table yet
            return False

    try:
        wait_until(mirrored, 240, "MariaDB equal to PostgreSQL")
    except AssertionError:
        want, have = _table(pg, items), _table(my, my_items)
        diff = [(a, b) for a, b in zip(want, have, strict=False) if a != b][:2]
        raise AssertionError(
            f"{len(want)} rows in PostgreSQL, {len(have)} in MariaDB: {diff}"
        ) from None
    records = topic_records(runner, topic)
    assert len(records) == expected_events, len(records)
    keys = [json.loads(r["key"]) for r in records]
    assert {"id": 1000} in keys and {"id": 2021} in keys and {"id": 20} in keys
    # Spark tells a source that batch N committed when it plans batch N + 1: one more change
    # makes it release what the workload's batches retained, and never more than committed.
    pg.execute(f"UPDATE {items} SET vc = 'last' WHERE id = 3")
    wait_until(lambda: _confirmed(pg, slot) > first, 60, "the slot advanced")
    runner.stop("pg-cdc")  # stores the checkpoint's last committed positions
    (stored,) = runner.positions.load("pg-cdc").values()
    assert first < _confirmed(pg, slot) <= stored["lsn"]
    assert len(_table(my, my_items)) == 51 - 5


def test_errors_name_what_is_wrong(pg: Db, slot: str) -> None:
    pg.execute(f"CREATE TABLE {pg.table('nokey')} (a INT)")
    pg.execute(f"CREATE TABLE {pg.table('items')} ({PG_TABLE})")

    def start(**extra: str) -> None:
        config = _source(pg, slot, **extra)
        connector = PostgresCdcSourceConnector()
        connector.validate(config)
        connector.start(config)

    with pytest.raises(ConfigException, match=r"table.include.list.*no table .*missing"):
        start(**{"table.include.list": f"{pg.namespace}.missing"})
    with pytest.raises(ConnectException, match=r"nokey has no primary key"):
        start(**{"table.include.list": f"{pg.namespace}.nokey"})
    with pytest.raises(ConfigException, match=r"snapshot\.mode.*'always' is not one of"):
        start(**{"snapshot.mode": "always"})
    with pytest.raises(ConfigException, match=r"topic\.prefix"):
        start(**{"topic.prefix": ""})
    pg.execute(f'CREATE PUBLICATION "{slot}" FOR TABLE {pg.table("nokey")}')
    with pytest.raises(ConnectException, match=rf"publication '{slot}' does not publish .*items"):
        start()
    pg.execute(f'DROP PUBLICATION "{slot}"')
    role = f"norepl_{uuid.uuid4().hex[:8]}"
    pg.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        with pytest.raises(ConnectException, match=rf"user '{role}' has no REPLICATION"):
            start(**{"connection.user": role})
    finally:
        pg.execute(f'DROP ROLE "{role}"')
    # The Debezium key family works as well as connection.url.
    config = {k: v for k, v in _source(pg, slot).items() if not k.startswith("connection.")}
    config.update({"database.hostname": "127.0.0.1", "database.user": "root"})
    with pytest.raises(ConfigException, match=r"database\.dbname"):
        PostgresCdcSourceConnector().validate(config)
    # Debezium's topic.delimiter: `_` gives names the RocketMQ bus takes (its broker refuses '.')
    with pytest.raises(ConfigException, match=r"topic\.delimiter"):
        start(**{"topic.delimiter": "/"})
    connector = PostgresCdcSourceConnector()
    connector.start(_source(pg, slot, **{"topic.delimiter": "_"}))
    assert [t["topic"] for t in connector.tables] == [f"cdc_{pg.namespace}_items"]


class _Writer(threading.Thread):
    """Transactions on `snap` until stopped: an update of an existing row (a fresh `n`), an
    insert above the existing ids and, every fifth, a delete; remembers the ids it touched."""

    def __init__(self, pg: Db, rows: int) -> None:
        super().__init__(daemon=True)
        self.pg, self.rows, self.done, self.error = pg, rows, 0, None
        self.touched: set[int] = set()
        self.stopped = threading.Event()

    def run(self) -> None:
        snap = self.pg.table("snap")
        try:
            while not self.stopped.is_set():
                i = self.done
                old, gone = i * 37 % self.rows + 1, i * 53 % self.rows + 1
                with self.pg.engine.begin() as conn:
                    conn.exec_driver_sql(
                        f"UPDATE {snap} SET n = %s, name = name || '.' WHERE id = %s",
                        (100_000 + i, old),
                    )
                    conn.exec_driver_sql(
                        f"INSERT INTO {snap} VALUES (%s, %s, %s)", (10_000 + i, f"new{i}", i)
                    )
                    if i % 5 == 0:
                        conn.exec_driver_sql(f"DELETE FROM {snap} WHERE id = %s", (gone,))
                        self.touched.add(gone)
                self.touched.update((old, 10_000 + i))
                self.done = i + 1
                self.stopped.wait(0.03)
        except Exception as exc:  # reported by the test
            self.error = exc


@pytest.mark.spark
def test_snapshot_then_stream_while_writes_continue(pg: Db, slot: str, runner, my: Db) -> None:
    """1,200 rows snapshotted in chunks (400 rows a micro-batch, each cut for 2 Spark
    partitions) while a writer updates, inserts and deletes across the key range: afterwards
    MariaDB equals PostgreSQL; in the topic every row the writer never touched is there once, as
    a snapshot read (`op='r'`), no key is read twice and no change event is there twice."""
    rows = 1200
    pg.execute(f"CREATE TABLE {pg.table('snap')} (id INT PRIMARY KEY, name TEXT NOT NULL, n INT)")
    my.execute(
        f"CREATE TABLE {my.table('snap')} (id INT PRIMARY KEY, name TEXT NOT NULL, n INT) "
        "CHARSET utf8mb4"
    )
    pg.executemany(
        f"INSERT INTO {pg.table('snap')} VALUES (%s, %s, %s)",
        [(i, f"row{i}", i) for i in range(1, rows + 1)],
    )
    writer = _Writer(pg, rows)
    writer.start()
    try:
        wait_until(lambda: writer.done >= 20, 30, "the writer under way")
        topic = f"cdc.{pg.namespace}.snap"
        json_values = {"value.converter": "JsonConverter"}
        runner.start(
            "pg-snap",
            _source(
                pg,
                slot,
                **json_values,
                **{
                    "table.include.list": f"{pg.namespace}.snap",
                    "snapshot.mode": "initial",
                    "read.max.rows": "400",
                    "max.tasks": "2",
                },
            ),
        )
        # the sink's JSON decoder needs the schema the source registers with its first records
        log = runner.bus.log
        wait_until(
            lambda: log.topic_exists(topic) and topic_records(runner, topic),
            120,
            "the first snapshot records",
        )
        runner.start(
            "snap-to-maria",
            {
                "connector.class": "JdbcSinkConnector",
                **my.config(),
                "connect.topicnames": topic,
                "table.name.format": "snap",
                **json_values,
                "insert.mode": "upsert",
                "pk.mode": "record_key",
                "delete.enabled": "true",
            },
        )

        def snapshot_done() -> bool:
            for running in runner.running.values():
                failure = running.failure()
                assert failure is None, failure[0]
            stored = list(runner.positions.load("pg-snap").values())
            return bool(stored) and "snapshot" not in stored[0]

        wait_until(snapshot_done, 240, "the snapshot done")
        after = writer.done
        wait_until(lambda: writer.done >= after + 20, 60, "writes after the snapshot")
    finally:
        writer.stopped.set()
        writer.join(30)
    assert writer.error is None, writer.error
    cols = "SELECT id, name, n FROM {} ORDER BY id"
    wait_until(
        lambda: my.rows(cols.format(my.table("snap"))) == pg.rows(cols.format(pg.table("snap"))),
        120,
        "MariaDB equal to PostgreSQL",
    )
    events = [json.loads(r["value"])["payload"] for r in topic_records(runner, topic)]
    reads = check_handover(events)
    untouched = set(range(1, rows + 1)) - writer.touched
    assert untouched <= reads, sorted(untouched - reads)[:5]
    assert len(reads) > rows // 2, len(reads)


def check_handover(events: list[dict]) -> set[int]:
    """Change events of a snapshot + stream in topic order (one key's events share a queue, in
    order): no row read twice (`op='r'`), no change event twice and none that the row's
    snapshot record already held (events of a row before its chunk is read are allowed: every
    change event streams). The ids read."""
    read_as: dict[int, dict] = {}
    changes: Counter = Counter()
    for e in events:
        row = e["after"] if e["after"] is not None else e["before"]
        if e["op"] == "r":
            assert row["id"] not in read_as, row
            read_as[row["id"]] = row
            continue
        assert e["after"] is None or e["after"] != read_as.get(row["id"]), e
        changes[(e["op"], json.dumps(row, sort_keys=True))] += 1
    assert not changes or max(changes.values()) == 1, changes.most_common(3)
    return set(read_as)
