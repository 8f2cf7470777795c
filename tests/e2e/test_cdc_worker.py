"""CDC through a real worker process (REST, the herder's automatic restarts, status traces).

`ALTER TABLE … ADD COLUMN` upstream while a PostgreSQL → topic → MariaDB mirror runs: the source
restarts itself at each change (RESTARTING, then RUNNING), the registry gets a new value schema
version per change, the topic's records after each change carry it, each change event is in the
topic once, and the mirror ends equal to the source with the new columns.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.e2e.topics import topic_rows
from tests.e2e.worker_process import WorkerProcess
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, PG_HOST, Db
from tests.integration.test_cdc_postgres import (
    mirror_sink,
    slot,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures


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


def _pg_source(pg: Db, slot_name: str, topic_prefix: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "PostgresCdcSourceConnector",
        "connection.url": f"jdbc:postgresql://{PG_HOST}/test",
        "connection.user": "root",
        "topic.prefix": topic_prefix,
        "table.include.list": f"{pg.namespace}.items",
        "slot.name": slot_name,
        "publication.name": slot_name,
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
    worker: WorkerProcess,
    scratch: Path,
    pg: Db,
    my: Db,
    slot: str,  # noqa: F811
) -> None:
    items = pg.table("items")
    pg.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name TEXT NOT NULL)")
    prefix = f"evolve{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.{pg.namespace}.items"
    source, sink = f"{prefix}-src", f"{prefix}-sink"
    _post(worker, source, _pg_source(pg, slot, prefix))
    connection = {
        "connection.url": f"jdbc:mysql://{MY_HOST}/{my.namespace}",
        "connection.user": "root",
    }
    sink_config = mirror_sink(connection, topic, **{"auto.evolve": "true"})
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
    # source reads the table again (ids 1-18, 21, 22: a snapshot record each, but for a row whose
    # change falls inside its chunk's window, which that change then carries); the two changes
    # after the second ALTER stream like every change
    changes = events + 2 + 2

    def ops() -> dict[str, list[int]]:
        # read back through REST: the topic's Avro records decoded with the registry
        body = worker.get(f"/v1/topics/{topic}/records?limit=1000").json()
        out: dict[str, list[int]] = {}
        for r in body["records"]:
            row = r["value"]["after"] or r["value"]["before"]
            out.setdefault(r["value"]["op"], []).append(row["id"])
        return out

    def topic_done() -> bool:
        _running(worker, source, sink)
        seen = ops()
        return sum(len(v) for k, v in seen.items() if k != "r") >= changes and (
            len(seen.get("r", [])) >= 18
        )

    wait_until(topic_done, 240, "the events after both changes in the topic")
    versions = registry.versions(subject)
    assert len(versions) == 3, [v.version for v in versions]  # one per ADD COLUMN
    seen = ops()
    assert sum(len(v) for k, v in seen.items() if k != "r") == changes, seen  # each change once
    reads = seen["r"]
    assert len(reads) == len(set(reads)) and set(reads) <= {*range(1, 19), 21, 22}, reads
    assert {*range(1, 19), 21, 22} - {3, 22} <= set(reads), reads  # 3, 22 changed after ALTER
    records = topic_rows(store, topic)
    # the Avro records name their writer schema: the last ones the newest version
    ids = [int.from_bytes(r["value"][1:5], "big") for r in records if r["value"]]
    assert versions[-1].id in ids and versions[0].id in ids
    assert "qty" in versions[-1].schema and "note" in versions[1].schema
    log = worker.log.read_text()
    # one clear line per change, without Spark's wrapping or a traceback
    lines = [line for line in log.splitlines() if f"schema of {pg.namespace}.items changed" in line]
    assert any("ADD COLUMN note; restarting the source" in line for line in lines), lines
    assert any("ADD COLUMN qty; restarting the source" in line for line in lines), lines
    assert not any("Traceback" in line or "PYTHON_STREAMING" in line for line in lines), lines

    # The sink that ran through both changes picked each new version up (docs/schemas.md), and
    # a second sink, reading the topic from its start into `items2`, replays every version.
    late = f"{prefix}-late"
    _post(worker, late, {**sink_config, "table.name.format": "items2"})
    try:
        wait_until(
            lambda: _mirrored(worker, pg, my, "id, name, note, qty", source, sink),
            180,
            "the running mirror equal to PostgreSQL, new columns included",
        )
        wait_until(
            lambda: _mirrored(worker, pg, my, "id, name, note, qty", source, late, target="items2"),
            180,
            "the replaying mirror equal to PostgreSQL, new columns included",
        )
    finally:
        for name in (*names, late):
            assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def _refused_naming(worker: WorkerProcess, config: dict[str, str], key: str, text: str) -> None:
    """A create of `config` is refused (400) naming `key` and saying `text`."""
    name = f"refused-{uuid.uuid4().hex[:6]}"
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["key"] == key and text in body["message"], body
    assert worker.request("GET", f"/v1/connectors/{name}").status_code == 404  # not stored


def _my_source(my: Db, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "MySqlCdcSourceConnector",
        "connection.url": f"jdbc:mysql://{MY_HOST}/{my.namespace}",
        "connection.user": "root",
        "topic.prefix": prefix,
        "table.include.list": f"{my.namespace}.items",
        "database.server.id": str(7000 + uuid.uuid4().int % 10_000),
        "value.converter": "JsonConverter",
        **extra,
    }


def test_create_refuses_what_cannot_run(
    worker: WorkerProcess,
    pg: Db,
    my: Db,
    slot: str,  # noqa: F811
) -> None:
    """What the servers can tell at create is a 400 naming the key that was typed: an unknown
    table on each database, a user without replication rights on each, a wrong password
    (`database.password` when the Debezium keys are used); a stored position whose binlog is
    gone is found when the connector runs, named in its status."""
    prefix = f"bad{uuid.uuid4().hex[:6]}"
    missing = f"{pg.namespace}.missing"
    _refused_naming(
        worker,
        _pg_source(pg, slot, prefix, **{"table.include.list": missing}),
        "table.include.list",
        f"there is no table {missing}",
    )
    role = f"norepl_{uuid.uuid4().hex[:8]}"
    pg.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        _refused_naming(
            worker,
            _pg_source(pg, slot, prefix, **{"connection.user": role}),
            "connection.user",
            f"user '{role}' has no REPLICATION privilege",
        )
    finally:
        pg.execute(f'DROP ROLE "{role}"')
    my.execute(f"CREATE TABLE {my.table('items')} (id INT PRIMARY KEY, name VARCHAR(10))")
    user = f"u{uuid.uuid4().hex[:8]}"
    my.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY 'right-one'")
    my.execute(f"GRANT ALL ON `{my.namespace}`.* TO '{user}'@'%%'")
    try:
        _refused_naming(
            worker,
            _my_source(my, prefix, **{"connection.user": user, "connection.password": "right-one"}),
            "connection.user",
            "REPLICATION",
        )
        host, port = MY_HOST.split(":")
        debezium = {
            k: v for k, v in _my_source(my, prefix).items() if not k.startswith("connection.")
        }
        debezium |= {
            "database.hostname": host,
            "database.port": port,
            "database.user": user,
            "database.password": "wrong-one",
        }
        _refused_naming(worker, debezium, "database.password", "refused the credentials")
    finally:
        my.execute(f"DROP USER IF EXISTS '{user}'@'%%'")
    _refused_naming(
        worker,
        _my_source(my, prefix, **{"table.include.list": f"{my.namespace}.missing"}),
        "table.include.list",
        f"there is no table {my.namespace}.missing",
    )
    # A position whose binlog file is gone (as after PURGE BINARY LOGS; the shared test
    # server's binlogs stay, other tests read them): set through the offsets API
    name = f"{prefix}-my-purged"
    _post(worker, name, _my_source(my, prefix, **{"snapshot.mode": "never"}))
    my.execute(f"INSERT INTO {my.table('items')} VALUES (1, 'a')")
    offsets_path = f"/v1/connectors/{name}/offsets"
    try:
        wait_until(lambda: worker.get(offsets_path).json()["offsets"], 120, "a stored position")
        assert worker.request("PUT", f"/v1/connectors/{name}/stop").status_code < 300
        wait_until(lambda: worker.state(name) == "STOPPED", 60, f"{name} stopped")
        (entry,) = worker.get(offsets_path).json()["offsets"]
        gone = {"file": entry["offset"]["file"].rsplit(".", 1)[0] + ".000000", "pos": 4}
        body = {"offsets": [{"partition": entry["partition"], "offset": gone}]}
        assert worker.request("PATCH", offsets_path, json=body).status_code == 200
        worker.body(f"/connectors/{name}/resume")
        wait_until(lambda: worker.state(name) == "FAILED", 120, f"{name} FAILED")
        trace = _status(worker, name)["connector"]["trace"]
        first = trace.splitlines()[0]
        assert f"binlog {gone['file']} (position 4) is no longer on" in first, trace[:3000]
        assert "when_needed" in first, first
    finally:
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204
