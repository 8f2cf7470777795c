"""JDBC source against the real MariaDB and PostgreSQL servers, driving its tasks directly."""

from __future__ import annotations

import itertools
import json
import threading
from datetime import datetime, time, timedelta

import pyarrow as pa
import pytest

from sluice.sdk import ConfigException, ConnectException, ReadLimit
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db, read_all, source_task

db, my, pg = jdbc_db.db, jdbc_db.my, jdbc_db.pg  # fixtures


def _ids(values: list[dict]) -> list[int]:
    return [v["id"] for v in values]


def _plain_table(d: Db, name: str = "items", rows: int = 0) -> None:
    auto = "SERIAL" if d.dialect == "postgresql" else "INT NOT NULL AUTO_INCREMENT"
    ts = "TIMESTAMP(6)" if d.dialect == "postgresql" else "DATETIME(6)"
    d.execute(
        f"CREATE TABLE {d.q(name)} (id {auto} PRIMARY KEY, name VARCHAR(50) NOT NULL, "
        f"modified {ts} NOT NULL)"
    )
    if rows:
        _insert(d, name, range(1, rows + 1))


def _insert(d: Db, name: str, ids, modified: datetime | None = None) -> None:
    when = modified or datetime(2024, 1, 1)
    d.executemany(
        f"INSERT INTO {d.q(name)} (id, name, modified) VALUES (%s, %s, %s)",
        [(i, f"row {i}", when + timedelta(seconds=i)) for i in ids],
    )


def test_incrementing_reads_bounded_ranges_and_new_rows(db: Db) -> None:
    _plain_table(db, rows=25)
    (task,) = source_task(db.config(mode="incrementing", table__whitelist="items"))
    partition = task.partitions()[0]
    assert partition == {"table": "items"}
    end = task.latest(partition, None, ReadLimit(max_rows=10))
    assert end == {"incrementing": 10}
    positions: dict = {}
    assert _ids(read_all(task, 10, positions)) == list(range(1, 26))
    assert positions == {json.dumps(partition): {"incrementing": 25}}
    _insert(db, "items", range(26, 31))
    assert _ids(read_all(task, 10, positions)) == list(range(26, 31))
    # a replayed range reads the same rows again
    values = [
        v
        for b in task.read(partition, {"incrementing": 20}, {"incrementing": 23})
        for v in b.column("value").to_pylist()
    ]
    assert _ids(values) == [21, 22, 23]


def test_an_idle_table_is_looked_at_every_poll_interval(db: Db) -> None:
    _plain_table(db, rows=2)
    (task,) = source_task(
        db.config(mode="incrementing", table__whitelist="items", poll__interval__ms="600000")
    )
    partition = task.partitions()[0]
    end = task.latest(partition, None, ReadLimit(max_rows=1))
    assert end == {"incrementing": 1}
    assert task.latest(partition, end, ReadLimit()) == {"incrementing": 2}  # a backlog: at once
    idle = {"incrementing": 2}
    assert task.latest(partition, idle, ReadLimit()) == idle
    _insert(db, "items", [3])
    assert task.latest(partition, idle, ReadLimit()) == idle  # not before poll.interval.ms
    task._idle.clear()  # (the interval passed)
    assert task.latest(partition, idle, ReadLimit()) == {"incrementing": 3}


def test_timestamp_mode_picks_up_updated_rows(db: Db) -> None:
    _plain_table(db, rows=5)
    (task,) = source_task(
        db.config(mode="timestamp", table__whitelist="items", timestamp__column__name="modified")
    )
    positions: dict = {}
    assert _ids(read_all(task, 2, positions)) == [1, 2, 3, 4, 5]
    db.execute(
        f"UPDATE {db.q('items')} SET name = 'changed', modified = %s WHERE id = 2",
        (datetime(2024, 6, 1),),
    )
    again = read_all(task, None, positions)
    assert [(v["id"], v["name"]) for v in again] == [(2, "changed")]
    offset = next(iter(positions.values()))
    assert offset == {"timestamp": "2024-06-01T00:00:00.000000"}


def test_timestamp_incrementing_splits_ties_on_the_id(db: Db) -> None:
    _plain_table(db)
    same = datetime(2024, 2, 2, 12, 0, 0, 123456)
    db.executemany(
        f"INSERT INTO {db.q('items')} (id, name, modified) VALUES (%s, %s, %s)",
        [(i, f"r{i}", same) for i in range(1, 8)],
    )
    (task,) = source_task(
        db.config(
            mode="timestamp+incrementing",
            table__whitelist="items",
            timestamp__column__name="modified",
            incrementing__column__name="id",
        )
    )
    partition = task.partitions()[0]
    end = task.latest(partition, None, ReadLimit(max_rows=3))
    assert end == {"timestamp": "2024-02-02T12:00:00.123456", "incrementing": 3}
    positions: dict = {}
    assert _ids(read_all(task, 3, positions)) == list(range(1, 8))
    db.execute(f"UPDATE {db.q('items')} SET modified = %s WHERE id = 4", (datetime(2025, 1, 1),))
    assert _ids(read_all(task, 3, positions)) == [4]


def test_timestamp_delay_and_initial(db: Db) -> None:
    _plain_table(db)
    now = db.scalar(
        "SELECT (now() AT TIME ZONE 'UTC')"
        if db.dialect == "postgresql"
        else "SELECT UTC_TIMESTAMP(6)"
    )
    db.executemany(
        f"INSERT INTO {db.q('items')} (id, name, modified) VALUES (%s, %s, %s)",
        [
            (1, "old", datetime(2000, 1, 1)),
            (2, "recent", now - timedelta(minutes=5)),
            (3, "too fresh", now + timedelta(minutes=5)),
        ],
    )
    start_ms = int((now - timedelta(hours=1)).timestamp() * 1000)
    (task,) = source_task(
        db.config(
            mode="timestamp",
            table__whitelist="items",
            timestamp__column__name="modified",
            timestamp__initial=str(start_ms),
            timestamp__delay__interval__ms="60000",
        )
    )
    # before the initial time: skipped; newer than now - delay: not yet
    assert _ids(read_all(task)) == [2]
    # -1 = from now on: nothing old is copied
    (task,) = source_task(
        db.config(
            mode="timestamp",
            table__whitelist="items",
            timestamp__column__name="modified",
            timestamp__initial="-1",
        )
    )
    assert read_all(task) == []


def test_bulk_reloads_every_poll_interval(db: Db) -> None:
    _plain_table(db, rows=7)
    (task,) = source_task(db.config(mode="bulk", table__whitelist="items", poll__interval__ms="0"))
    partition = task.partitions()[0]
    first = task.latest(partition, None, ReadLimit(max_rows=3))
    assert first["load"] == 1 and first["after"] == [3] and first["done"] is False
    values = []
    start, end = None, first
    while True:
        values += [
            v for b in task.read(partition, start, end) for v in b.column("value").to_pylist()
        ]
        if end["done"]:
            break
        start, end = end, task.latest(partition, end, ReadLimit(max_rows=3))
    assert _ids(values) == list(range(1, 8)) and end["load"] == 1
    db.execute(f"DELETE FROM {db.q('items')} WHERE id > 4")
    second = task.latest(partition, end, ReadLimit())
    assert second["load"] == 2 and second["done"] is True
    assert _ids(
        [v for b in task.read(partition, end, second) for v in b.column("value").to_pylist()]
    ) == [1, 2, 3, 4]
    # within poll.interval.ms no new load starts
    (slow,) = source_task(
        db.config(mode="bulk", table__whitelist="items", poll__interval__ms="600000")
    )
    assert slow.latest(partition, second, ReadLimit()) == second


def test_bulk_without_primary_key_reads_the_whole_table(db: Db) -> None:
    db.execute(f"CREATE TABLE {db.q('heap')} (v INT)")
    db.executemany(f"INSERT INTO {db.q('heap')} (v) VALUES (%s)", [(i,) for i in range(10)])
    (task,) = source_task(
        db.config(mode="bulk", table__whitelist="heap", poll__interval__ms="600000")
    )
    assert sorted(v["v"] for v in read_all(task, 3)) == list(range(10))


def test_query_mode_with_incrementing(db: Db) -> None:
    _plain_table(db, rows=6)
    db.execute(f"UPDATE {db.q('items')} SET name = %s WHERE id IN (2, 5)", ("a%b",))
    query = f"SELECT id, name FROM {db.q('items')} WHERE name LIKE 'a%%b' OR id = 6;"
    (task,) = source_task(
        db.config(
            mode="incrementing",
            query=query.replace("%%", "%"),
            incrementing__column__name="id",
            connect__topicname="picked",
        )
    )
    assert task.partitions() == [{"query": "query"}]
    assert [(v["id"], v["name"]) for v in read_all(task, 1)] == [
        (2, "a%b"),
        (5, "a%b"),
        (6, "row 6"),
    ]
    assert task.tables[0].topic == "picked"


def test_a_query_whose_columns_change_asks_for_a_restart(db: Db) -> None:
    from sluice.sdk import RestartRequested

    _plain_table(db, rows=3)
    (task,) = source_task(
        db.config(
            mode="incrementing",
            query=f"SELECT * FROM {db.q('items')}",
            incrementing__column__name="id",
            connect__topicname="all",
        )
    )
    positions: dict = {}
    assert _ids(read_all(task, 10, positions)) == [1, 2, 3]  # unchanged columns: no restart
    db.execute(f"ALTER TABLE {db.q('items')} ADD COLUMN extra INT")
    _insert(db, "items", [4])
    (position,) = positions.values()
    with pytest.raises(
        RestartRequested,
        match=r"the query changed its columns while running "
        r"\(added: extra\)",
    ):
        task.latest({"query": "query"}, position, ReadLimit())


def test_tables_spread_over_tasks_with_their_topics(db: Db) -> None:
    for name in ("t1", "t2", "t3", "other"):
        _plain_table(db, name, rows=3)
    tasks = source_task(
        db.config(mode="incrementing", table__blacklist="other", topic__prefix="db-"),
        max_tasks=2,
    )
    assert [t.partitions() for t in tasks] == [
        [{"table": "t1"}, {"table": "t3"}],
        [{"table": "t2"}],
    ]
    batch = next(iter(tasks[1].read({"table": "t2"}, None, {"incrementing": 3})))
    assert set(batch.column("topic").to_pylist()) == {"db-t2"}
    # a whitelist names tables as db.table (MariaDB) / schema.table (PostgreSQL)
    (task,) = source_task(
        db.config(
            mode="incrementing", table__whitelist=f"{db.namespace}.t3", connect__topicname="one"
        )
    )
    assert task.partitions() == [{"table": f"{db.namespace}.t3"}]
    assert _ids(read_all(task)) == [1, 2, 3]


def test_split_cuts_a_large_first_load_into_ordered_ranges(db: Db) -> None:
    _plain_table(db)
    rows = 3 * 20_000 + 17
    _insert(db, "items", range(1, rows + 1))
    (task,) = source_task(db.config(mode="incrementing", table__whitelist="items"))
    partition = task.partitions()[0]
    end = task.latest(partition, None, ReadLimit(max_rows=1_000_000))
    cuts = task.split(partition, None, end, 8)
    assert len(cuts) == 2  # three pieces of at least 20,000 rows
    bounds = [None, *cuts, end]
    ids = []
    for lo, hi in itertools.pairwise(bounds):
        ids += [
            v["id"] for b in task.read(partition, lo, hi) for v in b.column("value").to_pylist()
        ]
    assert ids == list(range(1, rows + 1))
    assert task.split(partition, {"incrementing": rows - 100}, end, 4) == []  # too small


def test_incrementing_ranges_over_ids_with_gaps(db: Db) -> None:
    """Incrementing ranges are spans of ids (no scan of max.rows rows to find their end): at
    most `max_rows` ids, fewer rows where ids have gaps, and a gap is crossed at once."""
    _plain_table(db)
    ids = [*range(1, 11), *range(100, 111), 5000]
    _insert(db, "items", ids)
    (task,) = source_task(db.config(mode="incrementing", table__whitelist="items"))
    partition = task.partitions()[0]
    ends, start = [], None
    while (end := task.latest(partition, start, ReadLimit(max_rows=4))) != start:
        ends.append(end["incrementing"])
        start = end
    assert ends == [4, 8, 10, 103, 107, 110, 5000]
    positions: dict = {}
    assert _ids(read_all(task, 4, positions)) == ids
    # a split of a range with a gap: pieces are spans of ids, read in order, each row once
    _insert(db, "items", range(20_001, 70_001))
    end = task.latest(partition, {"incrementing": 5000}, ReadLimit(max_rows=1_000_000))
    assert end == {"incrementing": 70_000}
    cuts = task.split(partition, {"incrementing": 5000}, end, 3)
    assert [c["incrementing"] for c in cuts] == [45_000]  # two spans of 25,000 ids (≥ 20,000)
    got = []
    for lo, hi in itertools.pairwise([{"incrementing": 5000}, *cuts, end]):
        got += [
            v["id"] for b in task.read(partition, lo, hi) for v in b.column("value").to_pylist()
        ]
    assert got == list(range(20_001, 70_001))


def test_read_continues_after_its_sessions_are_killed(db: Db) -> None:
    db.execute(f"CREATE TABLE {db.q('wide')} (id INT PRIMARY KEY, payload VARCHAR(500) NOT NULL)")
    rows = 20_000
    db.executemany(
        f"INSERT INTO {db.q('wide')} (id, payload) VALUES (%s, %s)",
        [(i, f"{i:08d}" + "x" * 400) for i in range(1, rows + 1)],
    )
    (task,) = source_task(
        db.config(
            mode="incrementing",
            table__whitelist="wide",
            incrementing__column__name="id",
            batch__max__rows="100",
            connection__backoff__ms="10",
        )
    )
    partition = task.partitions()[0]
    reader = iter(task.read(partition, None, {"incrementing": rows}))
    try:
        ids = [v["id"] for v in next(reader).column("value").to_pylist()]
        assert _kill_readers(db) >= 1
        for batch in reader:
            ids += [v["id"] for v in batch.column("value").to_pylist()]
    finally:
        reader.close()  # an abandoned streaming read would block dropping the database
    assert ids == list(range(1, rows + 1))  # nothing lost, nothing repeated


def _kill_readers(db: Db) -> int:
    """Kill the connector's sessions that read this test's table (pooled between pages)."""
    if db.dialect == "postgresql":
        return len(
            db.rows(
                # pooled sessions end with the pool's ROLLBACK: kill every sluice session
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'sluice' AND pid <> pg_backend_pid()"
            )
        )
    ids = db.rows(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
        (db.namespace,),
    )
    for (pid,) in ids:
        db.execute(f"KILL {int(pid)}")
    return len(ids)


def test_latest_waits_while_the_database_is_unreachable(db: Db) -> None:
    _plain_table(db, rows=3)
    (task,) = source_task(
        db.config(mode="incrementing", table__whitelist="items", connection__backoff__ms="10")
    )
    partition = task.partitions()[0]
    from sluice.connectors._sql.connection import parse_connection
    from sluice.connectors._sql.db import Database

    away = db.config(
        connection__url=db.jdbc_url.replace(":5432", ":1").replace(":3306", ":1"),
        connection__attempts="1",
    )
    task.db = Database(parse_connection(away))
    start = {"incrementing": 1}
    assert task.latest(partition, start, ReadLimit()) == start  # no data, no failure
    assert task.split(partition, None, {"incrementing": 3}, 4) == []
    with pytest.raises(ConnectException, match=r"reading items: .* unavailable after 3 attempt"):
        list(task.read(partition, None, {"incrementing": 3}))


def test_a_dropped_table_fails_the_read_naming_it(db: Db) -> None:
    _plain_table(db, rows=3)
    (task,) = source_task(db.config(mode="incrementing", table__whitelist="items"))
    db.execute(f"DROP TABLE {db.q('items')}")
    with pytest.raises(ConnectException, match=r"reading items: .*items"):
        task.latest(task.partitions()[0], None, ReadLimit())


def test_bad_configs_name_the_key(db: Db) -> None:
    _plain_table(db, rows=1)
    base = db.config(mode="incrementing", table__whitelist="items")
    cases = [
        (
            dict(
                base,
                **{
                    "connection.url": base["connection.url"]
                    .replace(":5432", ":1")
                    .replace(":3306", ":1"),
                    "connection.attempts": "1",
                },
            ),
            r"connection.url: cannot connect to [a-z]+://root@127.0.0.1:1/[a-z_0-9]+: "
            r".*(refused|Can't connect)",
        ),
        (
            dict(base, **{"table.whitelist": "nope"}),
            r"table.whitelist: table 'nope' does not exist in ",
        ),
        (
            dict(base, **{"incrementing.column.name": "nope"}),
            r"incrementing.column.name: table 'items' has no column 'nope' "
            r"\(columns: id, name, modified\)",
        ),
        (
            dict(base, **{"incrementing.column.name": "name"}),
            r"incrementing.column.name: table 'items': column 'name' is .*, not an integer",
        ),
        (dict(base, mode="timestamp"), r"timestamp.column.name: required key is missing"),
        (
            dict(base, **{"mode": "timestamp", "timestamp.column.name": "name"}),
            r"timestamp.column.name: table 'items': column 'name' is .*, not a timestamp",
        ),
        (dict(base, mode="sometimes"), r"mode: must be one of bulk, incrementing, timestamp"),
        ({k: v for k, v in base.items() if k != "mode"}, r"mode: required key is missing"),
        (dict(base, query="SELECT 1"), r"query: cannot be combined with table.whitelist"),
        (dict(base, **{"table.blacklist": "x"}), r"table.blacklist: cannot be combined"),
        (
            dict(base, **{"connection.url": "jdbc:oracle:thin:@h:1521:x"}),
            r"connection.url: unsupported database or driver 'oracle'",
        ),
        (dict(base, **{"timestamp.initial": "-5"}), r"timestamp.initial: must be -1"),
        (
            dict(
                {k: v for k, v in base.items() if k != "table.whitelist"},
                query="SELECT nonsense FROM nowhere",
                **{"connect.topicname": "q"},
            ),
            r"query: the query fails: ",
        ),
        (
            dict({k: v for k, v in base.items() if k != "table.whitelist"}, query="SELECT 1 AS id"),
            r"connect.topicname: required key is missing \(a query needs a topic\)",
        ),
    ]
    for config, message in cases:
        with pytest.raises(ConfigException, match=message):
            source_task(config)


def test_wrong_password_and_unknown_database_are_named(my: Db) -> None:
    _plain_table(my, rows=1)
    config = my.config(mode="incrementing", table__whitelist="items", connection__password="wrong")
    with pytest.raises(
        ConfigException,
        match=r"connection.password: .* refused the credentials: Access denied for user 'root'",
    ):
        source_task(config)
    config = my.config(
        mode="incrementing",
        table__whitelist="items",
        connection__url=my.jdbc_url.replace(my.namespace, "no_such_db"),
    )
    with pytest.raises(
        ConfigException,
        match=r"connection.url: .*the database does not exist: Unknown database 'no_such_db'",
    ):
        source_task(config)


def test_unknown_role_is_named(pg: Db) -> None:
    _plain_table(pg, rows=1)
    config = pg.config(
        mode="incrementing", table__whitelist="items", connection__user="nobody_here"
    )
    with pytest.raises(
        ConfigException, match=r'connection.user: .* refused the user: .*"nobody_here"'
    ):
        source_task(config)


def test_nullable_cursor_columns_are_refused_unless_allowed(db: Db) -> None:
    db.execute(
        f"CREATE TABLE {db.q('loose')} (id INT, changed "
        f"{'TIMESTAMP' if db.dialect == 'postgresql' else 'DATETIME'})"
    )
    config = db.config(
        mode="incrementing", table__whitelist="loose", incrementing__column__name="id"
    )
    with pytest.raises(
        ConfigException, match=r"incrementing.column.name: table 'loose': column 'id' is nullable"
    ):
        source_task(config)
    (task,) = source_task(dict(config, **{"validate.non.null": "false"}))
    assert task.partitions() == [{"table": "loose"}]
    with pytest.raises(
        ConfigException,
        match=r"incrementing.column.name: required key is missing: table 'loose' has no "
        r"single auto-increment",
    ):
        source_task(db.config(mode="incrementing", table__whitelist="loose"))


def test_tables_of_different_shapes_each_have_their_schema(db: Db) -> None:
    from sluice.connectors.jdbc import JdbcSourceConnector

    _plain_table(db, "a", rows=3)
    db.execute(f"CREATE TABLE {db.q('b')} (id INT PRIMARY KEY, other INT)")
    db.executemany(f"INSERT INTO {db.q('b')} VALUES (%s, %s)", [(1, 10), (2, None)])
    # `c` is `a` but for NULL-ability: it shares a's shape, with `name` optional in both
    db.execute(
        f"CREATE TABLE {db.q('c')} (id INT PRIMARY KEY, name VARCHAR(50), modified "
        f"{'TIMESTAMP(6)' if db.dialect == 'postgresql' else 'DATETIME(6)'} NOT NULL)"
    )
    config = db.config(mode="bulk", table__whitelist="a,b,c", topic__prefix="t-")
    connector = JdbcSourceConnector()
    connector.start(config)
    schemas = {p["table"]: s for p, s in connector.value_schemas()}
    assert [f.name for f in schemas["b"].fields] == ["id", "other"]
    assert schemas["a"] == schemas["c"]
    assert [f.schema.optional for f in schemas["a"].fields] == [False, True, False]
    (task,) = source_task(config)
    values = {}
    for partition in task.partitions():
        end = task.latest(partition, None, ReadLimit())
        batches = list(task.read(partition, None, end)) if end is not None else []
        values[partition["table"]] = [v for b in batches for v in b.column("value").to_pylist()]
        for batch in batches:
            assert batch.column("topic")[0].as_py() == f"t-{partition['table']}"
            assert batch.column("value").type == schemas[partition["table"]].to_arrow()
    assert values["b"] == [{"id": 1, "other": 10}, {"id": 2, "other": None}]
    assert [v["id"] for v in values["a"]] == [1, 2, 3] and values["c"] == []


def test_tables_of_one_shape_keep_one_schema(db: Db) -> None:
    from sluice.connectors.jdbc import JdbcSourceConnector

    _plain_table(db, "a")
    _plain_table(db, "b")
    connector = JdbcSourceConnector()
    connector.start(db.config(mode="bulk", table__whitelist="a,b"))
    assert connector.value_schemas() == []
    assert [f.name for f in connector.value_schema().fields] == ["id", "name", "modified"]


def test_differently_shaped_tables_cannot_share_a_topic(db: Db) -> None:
    _plain_table(db, "a")
    db.execute(f"CREATE TABLE {db.q('b')} (id INT PRIMARY KEY, other INT)")
    with pytest.raises(
        ConfigException,
        match=r"connect.topicname: tables a and b have different columns but would both go to "
        r"topic 'one'",
    ):
        source_task(db.config(mode="bulk", table__whitelist="a,b", connect__topicname="one"))


@pytest.mark.parametrize(
    ("dialect", "ddl", "message"),
    [
        ("mysql", "g GEOMETRY", r"column 'g' has type geometry, which sluice cannot carry"),
        (
            "mysql",
            "d DECIMAL(65,30)",
            r"column 'd' has type decimal\(65,30\).*wider than the 38 digits",
        ),
        ("postgresql", "i INTERVAL", r"column 'i' has type interval, which sluice cannot carry"),
        ("postgresql", "n NUMERIC", r"column 'n' has type numeric, .*no declared precision"),
        ("postgresql", "a INTEGER[]", r"column 'a' has type integer\[\]"),
        ("postgresql", "t TIMETZ", r"column 't' has type time with time zone"),
    ],
)
def test_unmappable_types_are_named_at_start(request, dialect: str, ddl: str, message: str) -> None:
    d = request.getfixturevalue("pg" if dialect == "postgresql" else "my")
    d.execute(f"CREATE TABLE {d.q('odd')} (id INT PRIMARY KEY, {ddl})")
    with pytest.raises(ConfigException, match=r"table.whitelist: table 'odd': " + message):
        source_task(d.config(mode="bulk", table__whitelist="odd"))


OUTSIDE_A_DAY = r"cannot be carried as time64\[us\]: is outside 00:00:00 to 23:59:59\.999999"


@pytest.mark.parametrize(
    ("dialect", "ddl", "value", "message"),
    [
        # MariaDB's TIME is an interval (-838:59:59 to 838:59:59): a day's worth is carried
        ("mysql", "TIME", "25:00:00", r"value datetime.timedelta\(days=1, seconds=3600\) "),
        ("mysql", "TIME(6)", "24:00:00", r"value datetime.timedelta\(days=1\) "),
        (
            "mysql",
            "TIME(6)",
            "-00:00:00.000001",
            r"value datetime.timedelta\(days=-1, seconds=86399, microseconds=999999\) ",
        ),
    ],
)
def test_values_that_cannot_be_carried_fail_the_read(request, dialect, ddl, value, message) -> None:
    d = request.getfixturevalue("pg" if dialect == "postgresql" else "my")
    d.execute(f"CREATE TABLE {d.q('odd')} (id INT PRIMARY KEY, t {ddl})")
    d.execute(f"INSERT INTO {d.q('odd')} VALUES (1, %s)", (value,))
    (task,) = source_task(
        d.config(mode="incrementing", table__whitelist="odd", incrementing__column__name="id")
    )
    with pytest.raises(ConnectException, match=r"odd: column 't': " + message + OUTSIDE_A_DAY):
        read_all(task)


@pytest.mark.parametrize(
    ("ddl", "value", "message"),
    [
        ("TIMESTAMP", "infinity", r"timestamp too large \(after year 10K\): 'infinity'"),
        ("TIMESTAMPTZ", "-infinity", r"timestamp too small \(before year 1\): '-infinity'"),
        ("TIMESTAMP", "0044-03-15 BC", r"timestamp too small \(before year 1\): '0044-03-15"),
    ],
)
def test_postgres_timestamps_beyond_years_1_to_9999_fail_the_read(
    pg: Db, ddl: str, value: str, message: str
) -> None:
    """The COPY path cannot parse them and hands the page to the driver, which names them."""
    pg.execute(f"CREATE TABLE {pg.q('odd')} (id INT PRIMARY KEY, t {ddl})")
    pg.execute(f"INSERT INTO {pg.q('odd')} VALUES (1, '2024-01-01'), (2, %s)", (value,))
    (task,) = source_task(
        pg.config(mode="incrementing", table__whitelist="odd", incrementing__column__name="id")
    )
    with pytest.raises(ConnectException, match=r"reading odd: " + message):
        read_all(task)


TIMES = ["00:00:00", "00:00:00.000001", "12:34:56.000001", "23:59:59.999999", None]


@pytest.mark.parametrize(
    ("dialect", "ddl"),
    [("postgresql", "TIME"), ("postgresql", "TIME(6)"), ("mysql", "TIME(6)")],
)
def test_times_are_read_to_the_microsecond_on_every_path(
    request, monkeypatch, dialect: str, ddl: str
) -> None:
    """PostgreSQL's plain TIME has microseconds; so has MariaDB's TIME(6). The fast paths (COPY,
    GROUP_CONCAT) and the driver's path read the same values."""
    from sluice.connectors._sql.dialects import mysql as my_dialect
    from sluice.connectors._sql.dialects import postgres as pg_dialect

    d = request.getfixturevalue("pg" if dialect == "postgresql" else "my")
    d.execute(f"CREATE TABLE {d.q('times')} (id INT PRIMARY KEY, t {ddl})")
    d.executemany(f"INSERT INTO {d.q('times')} VALUES (%s, %s)", list(enumerate(TIMES)))
    config = d.config(
        mode="incrementing", table__whitelist="times", incrementing__column__name="id"
    )
    expected = [time(0), time(0, 0, 0, 1), time(12, 34, 56, 1), time(23, 59, 59, 999_999), None]
    page = pg_dialect.CopyPage if dialect == "postgresql" else my_dialect.CsvPage
    real = page.fetch
    fast_pages: list[bool] = []

    def fetch(*a, **k):  # type: ignore[no-untyped-def]
        got = real(*a, **k)
        fast_pages.append(got is not None)
        return got

    monkeypatch.setattr(page, "fetch", fetch)
    (task,) = source_task(config)
    assert [v["t"] for v in read_all(task)] == expected
    assert fast_pages and all(fast_pages)  # not read again through the driver
    monkeypatch.setattr(page, "fetch", lambda *a, **k: None)
    (task,) = source_task(config)
    assert [v["t"] for v in read_all(task)] == expected


def test_concurrent_latest_and_read_share_the_engine(db: Db) -> None:
    _plain_table(db, rows=200)
    (task,) = source_task(db.config(mode="incrementing", table__whitelist="items"))
    partition = task.partitions()[0]
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                end = task.latest(partition, None, ReadLimit(max_rows=50))
                assert sum(b.num_rows for b in task.read(partition, None, end)) == 50
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_postgres_copy_path_equals_the_driver_path(pg: Db, monkeypatch) -> None:
    pg.execute(f"CREATE TYPE {pg.q('mood')} AS ENUM ('sad', 'ok')")
    pg.execute(
        f"CREATE TABLE {pg.q('all')} (id INT PRIMARY KEY, i16 SMALLINT, i64 BIGINT, "
        "d NUMERIC(38,10), r REAL, f DOUBLE PRECISION, b BOOLEAN, c CHAR(3), v VARCHAR(20), "
        "t TEXT, e mood, j JSON, jb JSONB, u UUID, ba BYTEA, dt DATE, tm TIME, "
        "ts TIMESTAMP(6), tz TIMESTAMPTZ(6))"
    )
    rows = [
        (
            1,
            -32768,
            2**63 - 1,
            "-1234567890123456789012345678.0123456789",
            1.5,
            1e-300,
            True,
            "ab",
            'quote " comma , nl \n',
            "",
            "ok",
            '{"a": [1, "x"]}',
            '{"b": null}',
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            b"\x00\x01\xff",
            "0001-01-01",
            "23:59:59.999999",
            "9999-12-31 23:59:59.999999",
            "1970-01-01 00:00:00+00",
        ),
        (2, *([None] * 18)),
        (
            3,
            0,
            0,
            "0",
            float("inf"),
            float("nan"),
            False,
            "",
            "NULL",
            "null",
            "sad",
            "1",
            "[]",
            "00000000-0000-0000-0000-000000000000",
            b"",
            "2024-02-29",
            "00:00:00",
            "2024-03-10 02:30:00",
            "2024-03-31 01:00:00+00",
        ),
    ]
    marks = ", ".join(["%s"] * 19)
    pg.executemany(f"INSERT INTO {pg.q('all')} VALUES ({marks})", rows)
    config = pg.config(mode="incrementing", table__whitelist="all", incrementing__column__name="id")
    (task,) = source_task(config)
    fast = read_all(task)
    from sluice.connectors._sql.dialects import postgres as pg_dialect

    monkeypatch.setattr(pg_dialect.CopyPage, "fetch", lambda *a, **k: None)
    (task,) = source_task(config)
    driver = read_all(task)
    import math

    def same(a: dict, b: dict) -> bool:
        return all(
            (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            or x == y
            for x, y in zip(a.values(), b.values(), strict=True)
        )

    assert len(fast) == len(driver) == 3
    assert all(same(a, b) for a, b in zip(fast, driver, strict=True)), (fast, driver)
    assert fast[0]["v"] == 'quote " comma , nl \n' and fast[2]["v"] == "NULL"  # not a null
    assert fast[0]["ba"] == b"\x00\x01\xff" and fast[0]["t"] == "" and fast[2]["t"] == "null"
    assert fast[0]["tm"] == time(23, 59, 59, 999_999)
    assert fast[1] == {"id": 2, **dict.fromkeys(list(fast[1])[1:])}


def test_mysql_csv_page_path_equals_the_driver_path(my: Db, monkeypatch) -> None:
    my.execute(
        f"CREATE TABLE {my.q('all')} (id INT PRIMARY KEY, i8 TINYINT, u8 TINYINT UNSIGNED, "
        "i16 SMALLINT, i24 MEDIUMINT, u32 INT UNSIGNED, i64 BIGINT, u64 BIGINT UNSIGNED, "
        "d DECIMAL(38,10), r FLOAT, f DOUBLE, b1 BIT(1), b12 BIT(12), c CHAR(3), "
        "v VARCHAR(40), t TEXT, e ENUM('sad','ok'), s SET('a','b'), j JSON, u UUID, "
        "bi BINARY(3), vb VARBINARY(8), bl BLOB, dt DATE, tm TIME(6), y YEAR, "
        "dtm DATETIME(6), ts TIMESTAMP(6) NULL) CHARSET utf8mb4"
    )
    rows = [
        (
            1, -128, 255, -32768, -8388608, 4294967295, -(2**63), 2**64 - 1,
            "-1234567890123456789012345678.0123456789", 1.1754944e-38, 2.2250738585072014e-308,
            1, 0xFFF, "ab", 'quote " comma , nl \n tab \t 🚀 \\ ', "", "ok", "a,b",
            '{"a": [1, "x"]}', "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", b"\x00\x01\xff",
            b"\x00", b"\n\x00\"'", "0001-01-01", "23:59:59.999999", 1901,
            "9999-12-31 23:59:59.999999", "1970-01-01 00:00:01",
        ),
        (2, *([None] * 27)),
        (
            3, 0, 0, 0, 0, 0, 0, 0, "0", 3.4028234e38, -1e300, 0, 0, "", "NULL", "null", "sad",
            "", "[]", "00000000-0000-0000-0000-000000000000", b"abc", b"", b"",
            "2024-02-29", "00:00:00", 2155, "2024-03-31 02:30:00", "2038-01-19 03:14:07.5",
        ),
    ]  # fmt: skip
    marks = ", ".join(["%s"] * 28)
    for row in rows:
        my.execute(f"INSERT INTO {my.q('all')} VALUES ({marks})", row)
    config = my.config(mode="incrementing", table__whitelist="all", incrementing__column__name="id")
    (task,) = source_task(config)
    fast = read_all(task, max_rows=2)
    from sluice.connectors._sql.dialects import mysql as my_dialect

    pages: list[bool] = []
    real = my_dialect.CsvPage.fetch

    def fetch(*a, **k):  # type: ignore[no-untyped-def]
        page = real(*a, **k)
        pages.append(page is not None)
        return page

    monkeypatch.setattr(my_dialect.CsvPage, "fetch", fetch)
    (task,) = source_task(config)
    assert read_all(task, max_rows=2) == fast and pages == [True, True]  # both pages: fast path
    monkeypatch.setattr(my_dialect.CsvPage, "fetch", lambda *a, **k: None)
    (task,) = source_task(config)
    driver = read_all(task)
    assert len(fast) == 3 and fast == driver, (fast, driver)
    assert fast[0]["v"] == 'quote " comma , nl \n tab \t 🚀 \\ ' and fast[2]["v"] == "NULL"
    assert fast[0]["b12"] == b"\x0f\xff" and fast[0]["bl"] == b"\n\x00\"'"
    # FLOAT exactly (the text protocol alone would give 6 digits: 1.17549e-38, 3.40282e+38)
    as_float32 = pa.array([1.1754944e-38, 3.4028234e38], pa.float32()).to_pylist()
    assert [fast[0]["r"], fast[2]["r"]] == as_float32
    assert fast[2]["t"] == "null" and fast[2]["vb"] == b""
    assert fast[0]["tm"] == time(23, 59, 59, 999_999)


def test_mysql_pages_too_big_for_one_value_are_read_in_fewer_rows(my: Db, monkeypatch) -> None:
    _plain_table(my, rows=50)
    my.execute(f"ALTER TABLE {my.q('items')} MODIFY name LONGTEXT NOT NULL")
    my.execute(f"UPDATE {my.q('items')} SET name = REPEAT('x', 10000)")
    from sluice.connectors._sql.dialects import mysql as my_dialect

    monkeypatch.setattr(my_dialect.CsvPage, "max_bytes", 100_000)
    pages: list[tuple[int, bool]] = []  # (LIMIT, fitted)
    real = my_dialect.CsvPage.fetch

    def fetch(self, conn, tail, params):  # type: ignore[no-untyped-def]
        page = real(self, conn, tail, params)
        pages.append((int(tail.rsplit(" LIMIT ", 1)[1]), page is not None))
        return page

    monkeypatch.setattr(my_dialect.CsvPage, "fetch", fetch)
    (task,) = source_task(my.config(mode="incrementing", table__whitelist="items"))
    values = read_all(task)
    assert _ids(values) == list(range(1, 51)) and {len(v["name"]) for v in values} == {10000}
    # 10,000 rows of ~10 kB do not fit in one 100 kB value, nor 2,500 … 40: a quarter each time,
    # down to 9; then pages of ~5 rows, half the largest value, all on the fast path
    assert pages[:6] == [
        (10000, False),
        (2500, False),
        (625, False),
        (156, False),
        (39, False),
        (9, True),
    ]
    assert all(fitted and size <= 5 for size, fitted in pages[6:]), pages


def test_a_mysql_row_too_big_for_one_value_takes_the_driver_path(my: Db, monkeypatch) -> None:
    _plain_table(my, rows=3)
    my.execute(f"ALTER TABLE {my.q('items')} MODIFY name LONGTEXT NOT NULL")
    my.execute(f"UPDATE {my.q('items')} SET name = REPEAT('y', 20000) WHERE id = 2")
    from sluice.connectors._sql.dialects import mysql as my_dialect

    monkeypatch.setattr(my_dialect.CsvPage, "max_bytes", 10_000)
    tries: list[bool] = []
    real = my_dialect.CsvPage.fetch

    def fetch(self, *a, **k):  # type: ignore[no-untyped-def]
        page = real(self, *a, **k)
        tries.append(page is not None)
        return page

    monkeypatch.setattr(my_dialect.CsvPage, "fetch", fetch)
    (task,) = source_task(my.config(mode="incrementing", table__whitelist="items"))
    values = read_all(task)
    assert [len(v["name"]) for v in values] == [5, 20000, 5]
    # pages shrink until row 1 fits alone; row 2 alone does not: the driver from then on
    assert tries.count(True) == 1 and tries[-1] is False, tries


def test_validate_tries_once_while_start_retries(db: Db, caplog) -> None:
    from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSourceConnector

    dead = db.jdbc_url.replace(":5432", ":1").replace(":3306", ":1")
    source = db.config(mode="incrementing", table__whitelist="items", connection__url=dead)
    # a backoff no test run would sit through: validate must not wait for it
    source.update({"connection.attempts": "3", "connection.backoff.ms": "3600000"})
    sink = db.config(connection__url=dead)
    sink.update({"connection.attempts": "3", "connection.backoff.ms": "3600000"})
    for connector, config in ((JdbcSourceConnector(), source), (JdbcSinkConnector(), sink)):
        with pytest.raises(ConfigException, match=r"connection.url: cannot connect to .*:1/"):
            connector.validate(config)
    assert "attempt 1 of" not in caplog.text
    source["connection.backoff.ms"] = "1"
    with caplog.at_level("WARNING"), pytest.raises(ConfigException, match=r"after 3 attempts"):
        JdbcSourceConnector().start(source)
    assert "attempt 2 of 3" in caplog.text
