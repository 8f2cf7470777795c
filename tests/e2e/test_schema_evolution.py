"""Schema evolution across a running mirror (issue 18 item 5), through a real worker process:
MariaDB → JdbcSourceConnector → Avro topic → JdbcSinkConnector → PostgreSQL.

* `ALTER TABLE orders ADD COLUMN updated … NOT NULL DEFAULT …` upstream while both run: the source
  notices, restarts by itself and registers version 2 (the column is an optional field, so it is
  BACKWARD compatible); the sink, never restarted, decodes with version 2 from its next
  micro-batch and adds the column (`auto.evolve`); every row written after the ALTER has it.
* A new sink replaying the whole topic from offset 0 reads version-1 records into version 2.
* A narrowed column type, and a new column required without a default, are refused at the
  source, naming the topic, the field and why; nothing of them reaches the target.
* The same with `JsonConverter` (PostgreSQL → JSON topic → PostgreSQL): its sink decodes in
  Spark SQL, whose column types are fixed when the query starts, so it restarts by itself at the
  micro-batch that meets the new version, and then adds the column.
* A sink created before the source of its topic waits, RUNNING with the reason, and starts by
  itself once the source registered the topic's schema.
* Kafka Connect's "one JDBC sink for all topics + RegexRouter" over tables of different schemas
  mirrors each into the table its routed topic names; a transform that changes the records of
  such a sink is refused at create, naming `transforms`.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, Db

pytestmark = pytest.mark.slow
my = jdbc_db.my  # fixtures
pg = jdbc_db.pg

T1 = datetime(2026, 1, 2, 3, 4, 5, 123456)


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _avro_source(my: Db, **keys: str) -> dict[str, str]:
    """A JDBC source of `my`'s tables, incrementing on `id`, writing Avro (plus `keys`)."""
    return {
        "connector.class": "JdbcSourceConnector",
        "connection.url": f"jdbc:mysql://{MY_HOST}/{my.namespace}",
        "connection.user": "root",
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "value.converter": "AvroConverter",
        "poll.interval.ms": "200",
        **keys,
    }


def _trace(worker: WorkerProcess, name: str) -> str:
    return worker.body(f"/connectors/{name}/status")["connector"]["trace"] or ""


def _rows(pg: Db, table: str) -> list[tuple[Any, ...]]:
    columns = [r[0] for r in pg.rows(_COLUMNS, (pg.namespace, table))]
    if not columns:
        return []
    select = ", ".join(pg.q(c) for c in columns if c in ("id", "qty", "updated"))
    return pg.rows(f"SELECT {select} FROM {pg.table(table)} ORDER BY id")


def _topic_count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:  # not made yet
        return 0
    queues = response.json()["queues"]
    return sum(q["max_offset"] - q["min_offset"] for q in queues)


_COLUMNS = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
    "AND table_name = %s ORDER BY ordinal_position"
)


def test_a_running_mirror_follows_add_column_and_refuses_incompatible_changes(
    worker: WorkerProcess, my: Db, pg: Db
) -> None:
    my.execute(
        f"CREATE TABLE {my.q('orders')} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "qty BIGINT NOT NULL)"
    )
    my.executemany(f"INSERT INTO {my.q('orders')} (qty) VALUES (%s)", [(1,), (2,), (3,)])
    topic = f"evolve{my.namespace[-10:]}"
    source, sink = f"{topic}Src", f"{topic}Sink"
    _post(
        worker,
        source,
        _avro_source(my, **{"table.whitelist": "orders", "connect.topicname": topic}),
    )
    target = {
        "connector.class": "JdbcSinkConnector",
        **pg.config(),
        "connect.topicnames": topic,
        "value.converter": "AvroConverter",
        "insert.mode": "upsert",
        "pk.mode": "record_value",
        "pk.fields": "id",
        "auto.create": "true",
        "auto.evolve": "true",
        "table.name.format": "orders_copy",
    }
    _post(worker, sink, target)
    wait_until(lambda: len(_rows(pg, "orders_copy")) == 3, 120, "3 rows in the target")

    # -- ADD COLUMN … NOT NULL DEFAULT while both run ------------------------------------------
    my.execute(
        f"ALTER TABLE {my.q('orders')} ADD COLUMN updated DATETIME(6) NOT NULL "
        "DEFAULT CURRENT_TIMESTAMP(6)"
    )
    my.executemany(
        f"INSERT INTO {my.q('orders')} (qty, updated) VALUES (%s, %s)",
        [(4, T1), (5, T1), (6, T1)],
    )
    wait_until(lambda: len(_rows(pg, "orders_copy")) == 6, 120, "6 rows in the target")
    rows = _rows(pg, "orders_copy")
    assert "updated" in [r[0] for r in pg.rows(_COLUMNS, (pg.namespace, "orders_copy"))]
    assert [r[:2] for r in rows] == [(i, i) for i in range(1, 7)]
    # no row written after the ALTER misses the new column
    assert [r[2].replace(tzinfo=None) for r in rows[3:]] == [T1] * 3
    log = worker.log.read_text()
    # it restarted by itself, logging the task's own words…
    assert f"connector {source}: " in log
    assert "changed its columns while running (added: updated)" in log
    assert "(requested restart 1 in a row" in log
    assert f"sink {sink}: topic" not in log  # …the sink never needed to: it took version 2
    assert _topic_count(worker, topic) == 6  # the source's restart repeated no record
    assert worker.state(sink) == "RUNNING"

    # -- a new sink replays the whole topic (versions 1 and 2) ---------------------------------
    _post(worker, f"{sink}Replay", {**target, "table.name.format": "orders_replay"})
    wait_until(lambda: len(_rows(pg, "orders_replay")) == 6, 120, "the replay's 6 rows")
    replay = _rows(pg, "orders_replay")
    assert [r[2] for r in replay[:3]] == [None] * 3  # version-1 records: the field's null
    assert [r[2].replace(tzinfo=None) for r in replay[3:]] == [T1] * 3
    assert worker.state(f"{sink}Replay") == "RUNNING"

    # -- an incompatible change is refused at the source, naming the field ---------------------
    my.execute(f"ALTER TABLE {my.q('orders')} MODIFY qty INT NOT NULL")
    my.execute(f"INSERT INTO {my.q('orders')} (qty, updated) VALUES (7, %s)", (T1,))
    wait_until(
        lambda: "not BACKWARD compatible" in _trace(worker, source), 120, "the source refusing"
    )
    assert worker.state(source) == "FAILED"
    trace = _trace(worker, source)
    assert f"topic '{topic}' (value schema)" in trace, trace
    assert "not BACKWARD compatible" in trace, trace
    assert "field `qty` changed type from int64 to int32" in trace, trace
    assert len(_rows(pg, "orders_copy")) == 6  # nothing of the refused version arrived
    # … and so is a new field made required without a default (restarted by hand this time)
    my.execute(f"ALTER TABLE {my.q('orders')} MODIFY qty BIGINT NOT NULL")
    my.execute(f"ALTER TABLE {my.q('orders')} ADD COLUMN x INT NOT NULL")
    assert worker.request("POST", f"/v1/connectors/{source}/restart").status_code == 202
    wait_until(
        lambda: "new field `x` is required and has no default" in _trace(worker, source),
        120,
        "the source refusing the required field",
    )
    assert worker.state(source) == "FAILED"
    assert len(_rows(pg, "orders_copy")) == 6
    assert _topic_count(worker, topic) == 6  # nothing of a refused version was published
    assert worker.state(sink) == "RUNNING"
    for name in (source, sink, f"{sink}Replay"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_a_json_sink_on_the_jvm_path_restarts_by_itself_for_a_new_version(
    worker: WorkerProcess, pg: Db
) -> None:
    pg.execute(f"CREATE TABLE {pg.table('items')} (id SERIAL PRIMARY KEY, qty BIGINT NOT NULL)")
    pg.executemany(f"INSERT INTO {pg.table('items')} (qty) VALUES (%s)", [(1,), (2,)])
    topic = f"evolveJson{pg.namespace[-10:]}"
    source, sink = f"{topic}Src", f"{topic}Sink"
    json_values = {"value.converter": "JsonConverter", "value.converter.schemas.enable": "true"}
    _post(
        worker,
        source,
        {
            "connector.class": "JdbcSourceConnector",
            **pg.config(),
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": "items",
            "connect.topicname": topic,
            "poll.interval.ms": "200",
            **json_values,
        },
    )
    _post(
        worker,
        sink,
        {
            "connector.class": "JdbcSinkConnector",
            **pg.config(),
            "connect.topicnames": topic,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "id",
            "auto.create": "true",
            "auto.evolve": "true",
            "table.name.format": "items_copy",
            **json_values,
        },
    )
    wait_until(lambda: len(_rows(pg, "items_copy")) == 2, 120, "2 rows in the target")
    pg.execute(
        f"ALTER TABLE {pg.table('items')} ADD COLUMN updated TIMESTAMP NOT NULL DEFAULT now()"
    )
    when = datetime(2026, 1, 2, 3, 4, 5, 123000)  # JSON carries milliseconds
    pg.executemany(
        f"INSERT INTO {pg.table('items')} (qty, updated) VALUES (%s, %s)", [(3, when), (4, when)]
    )
    wait_until(lambda: len(_rows(pg, "items_copy")) == 4, 120, "4 rows in the target")
    rows = _rows(pg, "items_copy")
    assert [r[:2] for r in rows] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert [r[2].replace(tzinfo=None) for r in rows[2:]] == [when, when]
    log = worker.log.read_text()
    assert f"sink {sink}: topic {topic} value schema has a new schema version" in log
    wait_until(lambda: worker.state(sink) == "RUNNING", 60, "the sink RUNNING")
    for name in (source, sink):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def _status(worker: WorkerProcess, name: str) -> dict[str, Any]:
    return worker.body(f"/connectors/{name}/status")


def test_a_sink_created_before_its_source_waits_running_then_starts(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    """A JSON sink created before the source of its topic: its decoder needs the topic's schema,
    which the source registers with its first micro-batch. The sink is RUNNING with the reason
    as its trace (not FAILED, as it was), and starts by itself once the source runs."""
    json_values = {"value.converter": "JsonConverter", "key.converter": "StringConverter"}
    out = tmp_path / "early.txt"
    sink = {
        "connector.class": "FileSinkConnector",
        "filename": str(out),
        "connect.topicnames": "earlyTopic",
        **json_values,
    }
    _post(worker, "early-sink", sink)
    wait_until(
        lambda: (
            "needs the value schema" in (_status(worker, "early-sink")["connector"]["trace"] or "")
        ),
        60,
        "the sink's waiting note",
    )
    waiting = _status(worker, "early-sink")
    assert waiting["connector"]["state"] == "RUNNING", waiting
    assert "the sink waits, and starts once the source connector" in waiting["connector"]["trace"]

    lines = tmp_path / "early-in.txt"
    lines.write_text("one\ntwo\n")  # strings, JSON-encoded by the source's converter
    source = {
        "connector.class": "FileSourceConnector",
        "filename": str(lines),
        "connect.topicname": "earlyTopic",
        **json_values,
    }
    try:
        _post(worker, "early-source", source)
        wait_until(
            lambda: out.exists() and out.read_text().splitlines() == ["one", "two"],
            120,
            "the waiting sink to start and write the source's records",
        )
        started = _status(worker, "early-sink")
        assert started["connector"]["state"] == "RUNNING"
        assert not started["connector"]["trace"], started
        assert [t["state"] for t in started["tasks"]] == ["RUNNING"]
    finally:
        for name in ("early-sink", "early-source"):
            worker.request("DELETE", f"/v1/connectors/{name}")


def test_one_jdbc_sink_for_all_topics_routes_them_with_regex_router(
    worker: WorkerProcess, my: Db, pg: Db
) -> None:
    """Kafka Connect's "one JDBC sink for all topics + RegexRouter": two MariaDB tables of
    different schemas, each in its own topic, mirrored into PostgreSQL tables named by the
    routed topic. The router touches only the topic, so it runs on the fused path (a table of
    topic names); a transform that changes the records is refused at create, naming
    `transforms` and the way out, instead of a 201 and FAILED."""
    my.execute(f"CREATE TABLE {my.q('people')} (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL)")
    my.execute(f"CREATE TABLE {my.q('items')} (id INT PRIMARY KEY, price BIGINT NOT NULL)")
    my.executemany(f"INSERT INTO {my.q('people')} VALUES (%s, %s)", [(1, "ada"), (2, "bo")])
    my.executemany(f"INSERT INTO {my.q('items')} VALUES (%s, %s)", [(1, 10), (2, 20), (3, 30)])
    prefix = f"fan{my.namespace[-8:]}-"
    source, sink, stamped = f"{prefix}src", f"{prefix}sink", f"{prefix}stamped"
    try:
        _post(
            worker,
            source,
            _avro_source(my, **{"table.whitelist": "people,items", "topic.prefix": prefix}),
        )
        wait_until(
            lambda: (
                _topic_count(worker, prefix + "people") == 2
                and _topic_count(worker, prefix + "items") == 3
            ),
            120,
            "both tables' rows in their topics (their schemas registered)",
        )
        target = {
            "connector.class": "JdbcSinkConnector",
            **pg.config(),
            "connect.topicnames": f"{prefix}people,{prefix}items",
            "value.converter": "AvroConverter",
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "id",
            "auto.create": "true",
            "table.name.format": "${topic}",
            "transforms": "route",
            "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": f"{prefix}(.*)",
            "transforms.route.replacement": "$1_copy",
        }
        _post(worker, sink, target)
        wait_until(
            lambda: len(_rows(pg, "people_copy")) == 2 and len(_rows(pg, "items_copy")) == 3,
            120,
            "both tables mirrored under their routed names",
        )
        assert pg.rows(f"SELECT id, name FROM {pg.table('people_copy')} ORDER BY id") == [
            (1, "ada"),
            (2, "bo"),
        ]
        assert pg.rows(f"SELECT id, price FROM {pg.table('items_copy')} ORDER BY id") == [
            (1, 10),
            (2, 20),
            (3, 30),
        ]
        assert worker.state(sink) == "RUNNING"

        stamp = {
            "transforms": "route,stamp",
            "transforms.stamp.type": "InsertField$Value",
            "transforms.stamp.static.field": "origin",
            "transforms.stamp.static.value": "mariadb",
        }
        response = worker.request(
            "POST", f"/connectors/{stamped}", content=json.dumps({**target, **stamp})
        )
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["key"] == "transforms", body
        assert "a sink can only route records (RegexRouter" in body["message"], body
        assert "when its topics have different schemas" in body["message"], body
        assert "one sink connector per topic" in body["errors"][0]["suggestion"], body
        assert worker.get(f"/connectors/{stamped}/status").status_code == 404
    finally:
        for name in (source, sink, stamped):
            worker.request("DELETE", f"/v1/connectors/{name}")
