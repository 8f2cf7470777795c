"""CDC through a real worker process (REST, the herder's automatic restarts, status traces).

`ALTER TABLE … ADD COLUMN` upstream while a PostgreSQL → topic → MariaDB mirror runs: the source
restarts itself at each change (RESTARTING, then RUNNING), the registry gets a new value schema
version per change, the topic's records after each change carry it, each change event is in the
topic once, and the mirror ends equal to the source with the new columns.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.e2e.topics import topic_rows
from tests.e2e.worker_process import WorkerProcess
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, PG_HOST, Db

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures


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


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _status(worker: WorkerProcess, name: str) -> dict[str, Any]:
    return worker.body(f"/connectors/{name}/status")


def _running(worker: WorkerProcess, *names: str) -> None:
    """No connector of `names` FAILED (its trace otherwise)."""
    for name in names:
        status = _status(worker, name)
        assert status["connector"]["state"] != "FAILED", status["connector"]["trace"][:2000]


def _pg_source(pg: Db, slot: str, topic_prefix: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "PostgresCdcSourceConnector",
        "connection.url": f"jdbc:postgresql://{PG_HOST}/test",
        "connection.user": "root",
        "topic.prefix": topic_prefix,
        "table.include.list": f"{pg.namespace}.items",
        "slot.name": slot,
        "publication.name": slot,
        "value.converter": "AvroConverter",
        "snapshot.mode": "never",
        **extra,
    }


def _rows(d: Db, table: str, columns: str) -> list[tuple]:
    return d.rows(f"SELECT {columns} FROM {table} ORDER BY id")


def _mirrored(
    worker: WorkerProcess, pg: Db, my: Db, columns: str, *names: str, target: str = "items"
) -> bool:
    _running(worker, *names)
    try:
        return _rows(my, my.table(target), columns) == _rows(pg, pg.table("items"), columns)
    except Exception:  # the sink has not created or evolved the table yet
        return False


def test_add_column_while_mirroring(
    worker: WorkerProcess, scratch: Path, pg: Db, my: Db, slot: str
) -> None:
    items = pg.table("items")
    pg.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name TEXT NOT NULL)")
    prefix = f"evolve{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.{pg.namespace}.items"
    source, sink = f"{prefix}-src", f"{prefix}-sink"
    _post(worker, source, _pg_source(pg, slot, prefix))
    sink_config = {
        "connector.class": "JdbcSinkConnector",
        "connection.url": f"jdbc:mysql://{MY_HOST}/{my.namespace}",
        "connection.user": "root",
        "connect.topicnames": topic,
        "table.name.format": "items",
        "value.converter": "AvroConverter",
        "insert.mode": "upsert",
        "pk.mode": "record_key",
        "delete.enabled": "true",
        "auto.create": "true",
        "auto.evolve": "true",
    }
    _post(worker, sink, sink_config)
    wait_until(lambda: worker.state(source) == "RUNNING", 120, "the source running")
    pg.executemany(f"INSERT INTO {items} VALUES (%s, %s)", [(i, f"n{i}") for i in range(1, 21)])
    pg.execute(f"UPDATE {items} SET name = 'changed' WHERE id <= 5")
    pg.execute(f"DELETE FROM {items} WHERE id > 18")
    events = 20 + 5 + 2
    store = worker.tmp / "store"
    wait_until(lambda: len(topic_rows(store, topic)) == events, 120, "the first events")
    names = (source, sink)
    wait_until(lambda: _mirrored(worker, pg, my, "id, name", *names), 120, "the first mirror")
    pg.execute(f"ALTER TABLE {items} ADD COLUMN note TEXT NULL")
    pg.execute(f"INSERT INTO {items} VALUES (21, 'n21', 'new')")
    pg.execute(f"UPDATE {items} SET note = 'noted' WHERE id = 2")
    registry = SqliteSchemaRegistry(str(store / "schemas.sqlite"))
    subject = f"{topic}-value"
    # the source restarted at the change and registered the new columns (else the next change
    # would be in the same restart's description, and make one version with the first)
    wait_until(lambda: len(registry.versions(subject)) == 2, 120, "a second schema version")
    pg.execute(f"ALTER TABLE {items} ADD COLUMN qty INT NOT NULL DEFAULT 7")
    pg.execute(f"INSERT INTO {items} VALUES (22, 'n22', NULL, 22)")
    pg.execute(f"UPDATE {items} SET qty = 3 WHERE id = 3")
    # the second change gave the existing rows a value (the default) without change events: the
    # source reads the table again (20 snapshot records, ids 1-18, 21, 22; the two changes after
    # the second ALTER are in them, or streamed instead when they fall after the chunk's read)
    events += 2 + 20

    def topic_done() -> bool:
        _running(worker, source, sink)
        return len(topic_rows(store, topic)) >= events

    wait_until(topic_done, 240, "the events after both changes in the topic")
    versions = registry.versions(subject)
    assert len(versions) == 3, [v.version for v in versions]  # one per ADD COLUMN
    records = topic_rows(store, topic)
    assert len(records) == events, len(records)  # each change event once, each row read once
    # the Avro records name their writer schema: the last ones the newest version
    ids = [int.from_bytes(r["value"][1:5], "big") for r in records if r["value"]]
    assert versions[-1].id in ids and versions[0].id in ids
    assert "qty" in versions[-1].schema and "note" in versions[1].schema
    log = worker.log.read_text()
    assert "schema changed, restart to follow it" in log

    # A running sink picks a new schema version up at its next micro-batch once the runtime's
    # schema evolution (issue 18 item 5, another branch) is in; until then a sink started after
    # the changes sees them: a second one, reading the topic from its start into `items2`.
    late = f"{prefix}-late"
    _post(worker, late, {**sink_config, "table.name.format": "items2"})
    try:
        wait_until(
            lambda: _mirrored(worker, pg, my, "id, name, note, qty", source, late, target="items2"),
            180,
            "MariaDB equal to PostgreSQL, new columns included",
        )
    finally:
        for name in (*names, late):
            worker.request("DELETE", f"/connectors/{name}")
