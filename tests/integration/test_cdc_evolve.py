"""`ALTER TABLE … ADD COLUMN` under a running CDC connector, on the real servers.

Each database's connector is driven as the runtime drives it (no Spark: `latest` then `read`):
rows before the change come with the old columns; the range stops before the change, and
planning the one that starts there raises `SchemaChanged`, which the runtime's automatic
restarts recognise. The restarted connector's schema has the new columns (optional: one NULL,
one NOT NULL DEFAULT); as a new column has a default (which the existing rows took without an
event) and the stored position lacks it, it first starts a new snapshot of the table, then
streams the changes after the ALTERs and reads the table again with their values; the range
from before the change, replayed under the new schema, still decodes (new columns null). A
change the connector cannot follow fails naming the table and the change. The mirror through a
worker process is `tests/e2e/test_cdc_worker.py`, with kills `tests/e2e/test_cdc_mirror.py`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.connectors.cdc._evolve import SchemaChanged
from sluice.runtime.herder.restarts import is_transient
from sluice.sdk import ConnectException, ReadLimit
from tests.conftest import wait_until
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db
from tests.integration.test_cdc_mysql import _source as my_source
from tests.integration.test_cdc_mysql import row_metadata  # noqa: F401  (fixture)
from tests.integration.test_cdc_postgres import _source as pg_source
from tests.integration.test_cdc_postgres import slot  # noqa: F401  (fixture)

my, pg = jdbc_db.my, jdbc_db.pg  # fixtures
LIMIT = ReadLimit(max_rows=1000)


def _task(connector_class: type, config: dict[str, str]) -> tuple[Any, Any]:
    """A connector started as the runtime starts it, and its (only) task."""
    connector = connector_class()
    connector.validate(config)
    connector.start(config)
    task = connector.task_class()
    task.start(connector.task_configs(1)[0])
    return connector, task


def _fields(connector: Any) -> list[str]:
    ((_, schema),) = connector.value_schemas()
    after = next(f.schema for f in schema.fields if f.name == "after")
    return [f.name for f in after.fields]


def _optional(connector: Any, name: str) -> bool:
    ((_, schema),) = connector.value_schemas()
    after = next(f.schema for f in schema.fields if f.name == "after")
    return next(f.schema for f in after.fields if f.name == name).optional


def _afters(task: Any, partition: Any, start: Any, end: Any) -> list[dict]:
    return [r.value["after"] for r in jdbc_db.task_records(task.read(partition, start, end))]


def _follow(
    connector_class: type, config: dict[str, str], task: Any, at: Any
) -> tuple[Any, Any, Any]:
    """Planning from `at` (a change adding a column with a default) raises the restart
    request; the restarted connector's schema has the new columns, which `at` (planned under
    the old schema) lacks: its first range only starts a new snapshot of the table, which
    waits for the log's position now. The restarted connector and task, and that range's end."""
    (partition,) = task.partitions()
    with pytest.raises(SchemaChanged) as raised:
        task.latest(partition, at, LIMIT)
    assert is_transient(str(raised.value)), raised.value  # the runtime restarts on it
    assert "schema of" in str(raised.value) and "changed" in str(raised.value)
    connector, task = _task(connector_class, config)
    marked = task.latest(partition, at, LIMIT)
    state = marked["snapshot"]
    assert state["upto"] is None and not state["done"] and "since" in state, marked
    assert marked["columns"] == ["id", "name", "note", "qty"]
    assert list(task.read(partition, at, marked)) == []
    return connector, task, marked


def _resumed(task: Any, partition: Any, marked: Any) -> Any:
    """After the restart: the changes after the ALTERs stream (every event always flows), then
    the table is read again under the new columns (the existing rows got the new default
    without an event); the position after."""
    planned: list[Any] = []

    def reached() -> bool:  # the chunk waits until the log reaches `since` (and it is flushed)
        planned.append(task.latest(partition, marked, LIMIT))
        return "since" not in planned[-1]["snapshot"]

    wait_until(reached, 30, "the re-read's chunk")
    second = planned[-1]
    assert second.get("snapshot") == {"upto": 3, "done": True}, second
    records = [
        (r.value["op"], r.value["after"])
        for r in jdbc_db.task_records(task.read(partition, marked, second))
    ]
    assert records[:2] == [  # the events first, in log order, then the chunk in any order
        ("c", {"id": 3, "name": "c", "note": "n3", "qty": 30}),
        ("u", {"id": 1, "name": "a", "note": "n1", "qty": 7}),
    ]
    assert sorted(records[2:], key=lambda r: r[1]["id"]) == [
        ("r", {"id": 1, "name": "a", "note": "n1", "qty": 7}),
        ("r", {"id": 2, "name": "b", "note": None, "qty": 7}),
        ("r", {"id": 3, "name": "c", "note": "n3", "qty": 30}),
    ]
    return second


def _changes_after_start(
    connector_class: type, config: dict[str, str], d: Db, text: str
) -> tuple[Any, Any, Any]:
    """Start capturing `items`, then: two inserts, `ADD COLUMN note … NULL`, `ADD COLUMN qty
    INT NOT NULL DEFAULT 7`, an insert with both, an update of `note`. The task, its partition,
    and the position capture started at."""
    _, task = _task(connector_class, config)
    (partition,) = task.partitions()
    origin = task.latest(partition, None, LIMIT)
    items = d.table("items")
    d.execute(f"INSERT INTO {items} VALUES (1, 'a'), (2, 'b')")
    d.execute(f"ALTER TABLE {items} ADD COLUMN note {text} NULL")
    d.execute(f"ALTER TABLE {items} ADD COLUMN qty INT NOT NULL DEFAULT 7")
    d.execute(f"INSERT INTO {items} VALUES (3, 'c', 'n3', 30)")
    d.execute(f"UPDATE {items} SET note = 'n1' WHERE id = 1")
    return task, partition, origin


def _flushed(pg: Db) -> None:
    """Wait until the WAL written so far is flushed (decoding reads flushed WAL only, and the
    test server commits with synchronous_commit=off)."""
    lsn = pg.scalar("SELECT pg_current_wal_insert_lsn()::text")
    wait_until(
        lambda: pg.scalar("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (lsn,)), 30, "flush"
    )


def test_postgresql_follows_add_column(pg: Db, slot: str) -> None:  # noqa: F811
    items = pg.table("items")
    pg.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name TEXT NOT NULL)")
    config = pg_source(pg, slot, **{"value.converter": "JsonConverter"})
    task, partition, origin = _changes_after_start(PostgresCdcSourceConnector, config, pg, "TEXT")
    _flushed(pg)
    first = task.latest(partition, origin, LIMIT)
    assert first is not None and first != origin
    before = _afters(task, partition, origin, first)  # the range stops before the change
    assert before == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert task.latest(partition, origin, LIMIT) == first  # planned again: the same range
    connector, task, marked = _follow(PostgresCdcSourceConnector, config, task, first)
    assert _fields(connector) == ["id", "name", "note", "qty"]
    assert _optional(connector, "note") and _optional(connector, "qty")
    assert not _optional(connector, "name")
    second = _resumed(task, partition, marked)
    pg.execute(f"UPDATE {items} SET qty = 8 WHERE id = 2")
    _flushed(pg)
    third = task.latest(partition, second, LIMIT)
    assert "snapshot" not in third
    assert _afters(task, partition, second, third) == [
        {"id": 2, "name": "b", "note": None, "qty": 8}
    ]
    # a replay of the range before the change, under the new schema: the old columns
    assert _afters(task, partition, origin, first) == [
        {"id": 1, "name": "a", "note": None, "qty": None},
        {"id": 2, "name": "b", "note": None, "qty": None},
    ]
    # a change it cannot follow: named, with the table
    pg.execute(f"ALTER TABLE {items} ALTER COLUMN qty TYPE SMALLINT")
    pg.execute(f"INSERT INTO {items} VALUES (4, 'd', NULL, 4)")
    _flushed(pg)
    with pytest.raises(ConnectException, match=rf"table {pg.namespace}.items: the type of .*qty"):
        task.latest(partition, third, LIMIT)


def test_mariadb_follows_add_column(my: Db, row_metadata) -> None:  # noqa: F811
    items = my.table("items")
    my.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL)")
    config = my_source(my, **{"value.converter": "JsonConverter"})
    task, partition, origin = _changes_after_start(MySqlCdcSourceConnector, config, my, "TEXT")
    first = task.latest(partition, origin, LIMIT)
    assert _afters(task, partition, origin, first) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
    ]
    connector, task, marked = _follow(MySqlCdcSourceConnector, config, task, first)
    assert _fields(connector) == ["id", "name", "note", "qty"]
    assert _optional(connector, "note") and _optional(connector, "qty")
    second = _resumed(task, partition, marked)
    assert _afters(task, partition, origin, first) == [
        {"id": 1, "name": "a", "note": None, "qty": None},
        {"id": 2, "name": "b", "note": None, "qty": None},
    ]
    # a NOT NULL column without a default cannot be carried by the events before it
    my.execute(f"ALTER TABLE {items} ADD COLUMN req INT NOT NULL")
    with pytest.raises(ConnectException, match=r"column 'req' was added NOT NULL without a def"):
        task.latest(partition, second, LIMIT)
    my.execute(f"ALTER TABLE {items} DROP COLUMN req")
    # the DROP COLUMN is not followed either, also in a restarted connector's backlog …
    connector, task = _task(MySqlCdcSourceConnector, config)
    upto_drop = task.latest(partition, second, LIMIT)  # past the ADD, which it has now
    with pytest.raises(ConnectException, match=r"changed under the connector: .*DROP COLUMN req"):
        task.latest(partition, upto_drop, LIMIT)
    # … so the connector starts again with reset offsets (the table re-copied)
    third = task.latest(partition, None, LIMIT)
    # a change it does not follow: named, with the table and the statement
    my.execute(f"ALTER TABLE {items} MODIFY name VARCHAR(5) NOT NULL")

    def refused() -> bool:
        # the binlog the task reads may not hold the ALTER yet at the first call
        try:
            task.latest(partition, third, LIMIT)
        except ConnectException as exc:
            assert re.search(rf"table {my.namespace}.items changed .*MODIFY", str(exc)), exc
            return True
        return False

    wait_until(refused, 60, "the MODIFY to be read and refused")
