"""The source database away for 20 s in the middle of a CDC mirror, then its sessions ended
server-side as in a restart: the source rides it out (RUNNING, `retrying` naming the server,
on both REST faces) and continues from its position — binlog file + position, the slot's LSN —
with nothing lost or doubled.

The servers are shared by other tests, so they are not stopped: the CDC source reaches its
database through a TCP proxy (`tcp_proxy.TcpProxy`) that is cut for 20 s — open connections
reset, new ones refused, as a stopped server looks to a client — and afterwards the server ends
the proxy's sessions (`KILL` on MariaDB, `pg_terminate_backend` on PostgreSQL) for a few
seconds, as a restarting server does. A writer commits transactions of inserts, updates, key
changes and deletes on the source directly throughout (its commits land in the log while the
source cannot read it); the JDBC sink mirrors the topic into the other database directly. At the
end the mirror equals the source and the topic holds each change event once.

Not in the suite yet (its file name is not `test_*.py`): on the loaded machine it was written
on, its one run did not see the retry note within 60 s (the queries were restarting after Spark's
"Python worker failed to connect back"), so it is unproven; `make crash-cdc` runs it. The
task-level behaviour is in the suite: `tests/integration/test_cdc_outage_task.py`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sluice.rest.app import create_app
from tests.conftest import wait_until
from tests.e2e.cdc_mirror import MirrorWriter, drop_slot, topic_ops
from tests.e2e.outage import await_no_retrying, await_retrying, healthy, ride_out, status_herder
from tests.e2e.tcp_proxy import TcpProxy
from tests.integration import jdbc_db
from tests.integration.jdbc_db import MY_HOST, PG_HOST, Db

pytestmark = [pytest.mark.slow, pytest.mark.spark]
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

OUTAGE_S = 20.0
RESTART_S = 4.0
PREFILL = 300


def _end_sessions(source: Db, proxy: TcpProxy) -> int:
    """End the source server's sessions that came through the proxy, server-side."""
    ports = proxy.upstream_ports()
    if not ports:
        return 0
    if source.dialect == "postgresql":
        rows = source.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE client_addr = '127.0.0.1' AND client_port = ANY(%s)",
            (ports,),
        )
        return len(rows)
    ids = [
        r[0]
        for r in source.rows("SELECT ID, HOST FROM information_schema.PROCESSLIST")
        if str(r[1]).rsplit(":", 1)[-1].isdigit() and int(str(r[1]).rsplit(":", 1)[-1]) in ports
    ]
    for session in ids:
        with contextlib.suppress(Exception):  # it ended meanwhile
            source.execute(f"KILL {int(session)}")
    return len(ids)


@pytest.mark.parametrize("direction", ["mariadb-to-postgresql", "postgresql-to-mariadb"])
def test_the_source_database_away_for_20_s(direction: str, my: Db, pg: Db, runner, tmp_path):
    source, target = (my, pg) if direction.startswith("mariadb") else (pg, my)
    host, port = (MY_HOST if source is my else PG_HOST).split(":")
    proxy = TcpProxy((host, int(port)))
    items = source.table("items")
    name_type = "VARCHAR(200)" if source is my else "TEXT"
    source.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name {name_type} NOT NULL, n INT)")
    source.executemany(
        f"INSERT INTO {items} VALUES (%s, %s, %s)", [(i, f"row{i}", i) for i in range(1, 301)]
    )
    prefix = f"o{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.{source.namespace}.items"
    slot = f"sluice_{prefix}"
    via_proxy = {
        "connection.user": "root",
        "topic.prefix": prefix,
        "table.include.list": f"{source.namespace}.items",
        "value.converter": "AvroConverter",
        "read.max.rows": "100",
        "errors.retry.delay.max.ms": "1000",  # back soon after the outage (default: forever)
    }
    if source is pg:
        via_proxy |= {
            "connector.class": "PostgresCdcSourceConnector",
            "connection.url": f"jdbc:postgresql://127.0.0.1:{proxy.port}/test",
            "slot.name": slot,
            "publication.name": slot,
        }
    else:
        via_proxy |= {
            "connector.class": "MySqlCdcSourceConnector",
            "connection.url": f"jdbc:mysql://127.0.0.1:{proxy.port}/{source.namespace}",
            "database.server.id": str(30_000 + uuid.uuid4().int % 10_000),
        }
    sink = {
        "connector.class": "JdbcSinkConnector",
        "connection.url": target.jdbc_url,
        "connection.user": "root",
        "connect.topicnames": topic,
        "table.name.format": "items",
        "value.converter": "AvroConverter",
        "insert.mode": "upsert",
        "pk.mode": "record_key",
        "delete.enabled": "true",
        "auto.create": "true",
    }
    herder = status_herder(runner, tmp_path)
    rest = TestClient(create_app(herder))
    writer = MirrorWriter(source, set(range(1, PREFILL + 1)), 220, seed=3)

    def mirrored() -> bool:
        healthy(runner)
        try:
            sql = "SELECT id, name, n FROM {} ORDER BY id"
            return target.rows(sql.format(target.table("items"))) == source.rows(sql.format(items))
        except Exception:  # not created yet
            return False

    try:
        herder.put_connector("src", via_proxy)
        herder.put_connector("sink", sink)
        writer.start()
        wait_until(lambda: writer.done >= 30 or writer.error, 120, "writes under way")
        proxy.cut()
        away = time.monotonic()
        notes = await_retrying(rest, ["src"], 3 * OUTAGE_S)
        assert all(f"127.0.0.1:{proxy.port}" in n["error"] for n in notes.values()), notes
        ride_out(runner, OUTAGE_S - (time.monotonic() - away), proxy.restore)
        # a restart of the server: it ends every session it has, again and again for a while
        ended, until = 0, time.monotonic() + RESTART_S
        while time.monotonic() < until:
            ended += _end_sessions(source, proxy)
            healthy(runner, " while the server restarted")
            time.sleep(0.2)
        writer.join(300)
        assert writer.error is None, writer.error
        wait_until(mirrored, 300, "the mirror equal to the source", every=1.0)
        await_no_retrying(rest, ["src", "sink"])
        ops = topic_ops(Path(runner.root), topic)
        assert sum(n for op, n in ops.items() if op != "r") == writer.events, ops
        assert ended > 0  # the restart did end the source's sessions
    finally:
        writer.stopped.set()
        herder.progress.detach(runner.spark)
        runner.close()
        proxy.cut()
        if source is pg:
            drop_slot(pg, slot)
