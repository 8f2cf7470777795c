"""JDBC bad configs through a real worker (REST): at creation, a 400 naming the key; a stored
connector whose database stops matching its config (password changed, column renamed, table
dropped) shows FAILED with a trace naming the key on its next start, while the worker and its
other connectors go on; fixed and restarted, it copies again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, Db

pytestmark = pytest.mark.slow
my = jdbc_db.my  # fixture


@pytest.fixture
def account(my: Db) -> Iterator[tuple[str, str]]:
    """A MariaDB account of this test's own, with the rights to its database."""
    user = f"u{my.namespace[-10:]}"
    my.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY 'right'")
    my.execute(f"GRANT ALL ON `{my.namespace}`.* TO '{user}'@'%%'")
    try:
        yield user, "right"
    finally:
        my.execute(f"DROP USER IF EXISTS '{user}'@'%%'")


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> Any:
    return worker.request("POST", f"/connectors/{name}", content=json.dumps(config))


def _status(worker: WorkerProcess, name: str) -> dict[str, Any]:
    return worker.body(f"/connectors/{name}/status")


def _failed_naming(worker: WorkerProcess, name: str, key: str) -> str:
    """Restart `name`; wait for FAILED; the trace's first line, which must name `key`."""
    assert worker.request("POST", f"/v1/connectors/{name}/restart").status_code == 202
    wait_until(lambda: worker.state(name) == "FAILED", 60, f"{name} FAILED")
    first = _status(worker, name)["connector"]["trace"].splitlines()[0]
    assert key in first, first
    return first


def _topic_count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:
        return 0
    return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def test_bad_jdbc_configs_are_named_and_the_worker_goes_on(
    worker: WorkerProcess, scratch: Path, my: Db, account: tuple[str, str]
) -> None:
    user, password = account
    my.execute(
        f"CREATE TABLE {my.q('items')} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "name VARCHAR(20) NOT NULL)"
    )
    my.executemany(f"INSERT INTO {my.q('items')} (name) VALUES (%s)", [("a",), ("b",), ("c",)])
    topic = f"jdbcE2e{my.namespace[-10:]}"
    good = {
        "connector.class": "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector",
        "connection.url": f"jdbc:mysql://{MY_HOST}/{my.namespace}",
        "connection.user": user,
        "connection.password": password,
        "mode": "incrementing",
        "table.whitelist": "items",
        "incrementing.column.name": "id",
        "connect.topicname": topic,
        "poll.interval.ms": "300",
    }
    # a bystander that must keep running whatever happens to the JDBC connector
    (scratch / "in.txt").write_text("one\ntwo\n")
    bystander = {
        "connector.class": "FileSourceConnector",
        "filename": str(scratch / "in.txt"),
        "connect.topicname": f"{topic}-files",
    }
    assert _post(worker, "jdbcBystander", bystander).status_code == 200

    # at creation: a 400 naming the key, nothing stored
    host = MY_HOST.partition(":")[0]
    cases = [
        (
            {"connection.url": f"jdbc:mysql://{host}:1/{my.namespace}", "connection.attempts": "1"},
            "connection.url",
        ),
        ({"connection.password": "wrong"}, "connection.password"),
        ({"table.whitelist": "nope"}, "table.whitelist"),
        ({"incrementing.column.name": "nope"}, "incrementing.column.name"),
    ]
    for change, key in cases:
        response = _post(worker, "jdbcBad", {**good, **change})
        assert response.status_code == 400, response.text
        assert key in response.json()["message"], response.text
    assert "jdbcBad" not in worker.body("/connectors/list")

    assert _post(worker, "jdbcSrc", good).status_code == 200
    wait_until(lambda: _topic_count(worker, topic) == 3, 120, "3 rows in the topic")
    assert worker.state("jdbcSrc") == "RUNNING"

    # the database changes under a stored connector: its next start fails naming the key
    my.execute(f"ALTER USER '{user}'@'%%' IDENTIFIED BY 'changed'")
    trace = _failed_naming(worker, "jdbcSrc", "connection.password")
    assert "changed" not in trace and password not in trace  # no password in messages
    my.execute(f"ALTER USER '{user}'@'%%' IDENTIFIED BY '{password}'")
    my.execute(f"ALTER TABLE {my.q('items')} RENAME COLUMN id TO ident")
    _failed_naming(worker, "jdbcSrc", "incrementing.column.name")
    my.execute(f"DROP TABLE {my.q('items')}")
    _failed_naming(worker, "jdbcSrc", "table.whitelist")
    assert worker.state("jdbcBystander") == "RUNNING"

    # fixed: restarted, it copies the new rows after the ones it delivered
    my.execute(
        f"CREATE TABLE {my.q('items')} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "name VARCHAR(20) NOT NULL)"
    )
    my.executemany(
        f"INSERT INTO {my.q('items')} (id, name) VALUES (%s, %s)", [(i, "x") for i in range(1, 6)]
    )
    assert worker.request("POST", "/v1/connectors/jdbcSrc/restart").status_code == 202
    wait_until(lambda: _topic_count(worker, topic) == 5, 120, "rows 4 and 5 in the topic")
    assert worker.state("jdbcSrc") == "RUNNING"
    for name in ("jdbcSrc", "jdbcBystander"):  # stop = delete, on RocketMQ Connect's face
        assert worker.request("GET", f"/connectors/{name}/stop").status_code == 200
