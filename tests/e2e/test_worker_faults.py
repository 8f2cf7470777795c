"""Faults under one real standalone worker process (shared by the module; the last test kills
its JVM):

* its stores unwritable for ~20 s (`RLIMIT_FSIZE` of one byte on the worker's process: every
  file write it makes fails, SQLite's too, as on a full disk; Spark's processes write on) while a
  file pipeline runs, and the sink's query dies in that window (a trip wire): its status says
  RESTARTING at once, though the store still holds RUNNING, and RUNNING again only when a new
  query runs (a start needs no write: it may come back before the store does); the source goes
  on copying; once the store takes writes it holds RUNNING and the copy is exact;
* a JDBC sink whose PostgreSQL is away (a tcp_proxy cut) longer than its
  `errors.retry.timeout` shows RESTARTING (never FAILED) and comes back by itself when the
  server does, every row once;
* a transform chain longer than `MAX_TRANSFORMS` is refused at create, naming `transforms`;
* kill -9 of the worker's JVM: the worker exits non-zero, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.engine.transforms import MAX_TRANSFORMS
from tests.conftest import wait_until
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.topics import topic_count, topic_rows
from tests.e2e.trip_sink import PLUGIN
from tests.e2e.worker_process import WorkerProcess
from tests.integration import jdbc_db
from tests.integration.jdbc_db import PG_HOST, Db

pytestmark = pytest.mark.slow
pg = jdbc_db.pg  # fixture

OUTAGE_S = 20.0


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "plugins").mkdir()
    (tmp / "plugins" / "tripping_sink.py").write_text(PLUGIN)
    process = WorkerProcess(tmp, plugin_dir=tmp / "plugins")
    process.start()
    yield process
    assert process.proc is not None
    if process.proc.poll() is None:
        process.terminate()
    else:  # the JVM test killed it: its JVM's group must not outlive it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.proc.pid, signal.SIGKILL)


def _feed(path: Path, first: int, last: int) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(f"line {n:05d}\n" for n in range(first, last))


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _stored_state(store: Path, name: str) -> str | None:
    """The connector's state as the status store holds it (read beside the worker)."""
    with contextlib.closing(sqlite3.connect(store / "statuses.sqlite", timeout=30)) as db:
        row = db.execute(
            "SELECT state FROM statuses WHERE connector = ? AND task = -1", (name,)
        ).fetchone()
    return row[0] if row else None


@contextlib.contextmanager
def _unwritable(pid: int) -> Iterator[None]:
    """No file write of process `pid` succeeds meanwhile (its other processes are not hit)."""
    soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, hard))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))


def test_a_store_outage_keeps_the_status_true_and_restarts_the_query_that_died(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    assert worker.proc is not None and worker.plugin_dir is not None
    store = worker.tmp / "store"
    src, out, trip = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "trip"
    _feed(src, 0, 300)
    _post(
        worker,
        "outageSrc",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "outageTopic",
        },
    )
    _post(
        worker,
        "outageSink",
        {
            "connector.class": "TrippingFileSink",
            "filename": str(out),
            "connect.topicnames": "outageTopic",
            "trip.file": str(trip),
        },
    )
    wait_until(lambda: out.exists() and out.read_bytes() == src.read_bytes(), 300, "the copy")

    cut = time.monotonic()
    with _unwritable(worker.proc.pid):
        trip.touch()
        _feed(src, 300, 500)
        wait_until(lambda: trip.with_name("trip.tripped").exists(), 120, "the sink's query to die")
        # the worker cannot write its status store, yet its answer is the truth at once
        wait_until(lambda: worker.state("outageSink") == "RESTARTING", 120, "RESTARTING")
        assert _stored_state(store, "outageSink") == "RUNNING", "the store took a write"

        def source_went_on() -> bool:
            # the other query goes on (Spark's processes write the topic and the positions),
            # unless Spark failed it meanwhile (a loaded machine): then it must not say RUNNING
            return topic_count(store, "outageTopic") == 500 or (
                worker.state("outageSrc") == "RESTARTING"
            )

        wait_until(source_went_on, 120, "the source to copy on")

        def outage_over() -> bool:
            # restarted meanwhile (a start needs no write) it says RUNNING, else RESTARTING
            assert worker.state("outageSink") in ("RESTARTING", "RUNNING")
            return time.monotonic() - cut >= OUTAGE_S

        wait_until(outage_over, OUTAGE_S + 30, "the end of the outage", every=0.5)
        if worker.state("outageSink") == "RUNNING":  # then it runs: the copy catches up
            wait_until(lambda: out.read_bytes() == src.read_bytes(), 300, "the copy (cut)")

    wait_until(lambda: worker.state("outageSink") == "RUNNING", 300, "the sink restarted")
    # the batch that tripped failed: its lines (fed in the outage) came with a new query
    wait_until(lambda: out.read_bytes() == src.read_bytes(), 300, "the copy to catch up")
    assert _stored_state(store, "outageSink") == "RUNNING"
    wait_until(lambda: worker.state("outageSrc") == "RUNNING", 300, "the source RUNNING")
    values = [row["value"] for row in topic_rows(store, "outageTopic")]
    assert len(values) == 500 and len(set(values)) == 500  # each line once in the topic
    for name in ("outageSrc", "outageSink"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code < 300


def test_a_jdbc_sink_comes_back_by_itself_after_an_outage_longer_than_its_retries(
    worker: WorkerProcess, tmp_path: Path, pg: Db
) -> None:
    pg.execute(f"CREATE TABLE {pg.table('orders')} (id INT PRIMARY KEY, name TEXT NOT NULL)")
    host, port = PG_HOST.rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))
    src = tmp_path / "orders.json"

    def feed(first: int, last: int) -> None:
        with open(src, "a", encoding="utf-8") as f:
            f.writelines(
                json.dumps({"id": n, "name": f"order {n}"}) + "\n" for n in range(first, last)
            )

    def rows() -> list[tuple]:
        return pg.rows(f"SELECT id, name FROM {pg.table('orders')} ORDER BY id")

    feed(0, 100)
    _post(
        worker,
        "ordersSrc",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "ordersTopic",
        },
    )
    _post(
        worker,
        "ordersOut",
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": f"jdbc:postgresql://127.0.0.1:{proxy.port}/test?currentSchema={pg.namespace}",
            "connection.user": "root",
            "connection.attempts": "1",
            "connect.topicnames": "ordersTopic",
            "table.name.format": "orders",
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "id",
            # its own retries give up after 2 s; the outage lasts far longer
            "errors.retry.timeout": "2000",
            "errors.retry.delay.max.ms": "500",
            "restart.transient.backoff.max.ms": "2000",
        },
    )
    wait_until(lambda: len(rows()) == 100, 300, "the first 100 rows")
    restarts = "connector ordersOut failed"
    before = worker.log.read_text().count(restarts)
    proxy.cut()
    try:
        feed(100, 200)
        wait_until(lambda: worker.state("ordersOut") == "RESTARTING", 120, "the sink to give up")

        def retried_twice() -> bool:
            # RESTARTING (or RUNNING between attempts), never FAILED: it comes back by itself
            assert worker.state("ordersOut") in ("RESTARTING", "RUNNING")
            return worker.log.read_text().count(restarts) - before >= 2

        wait_until(retried_twice, 120, "two automatic restarts during the outage", every=0.5)
        assert "for a retriable reason" in worker.log.read_text()
    finally:
        proxy.restore()
    wait_until(lambda: len(rows()) == 200, 300, "every row after the outage")
    assert rows() == [(n, f"order {n}") for n in range(200)]
    wait_until(lambda: worker.state("ordersOut") == "RUNNING", 120, "RUNNING")
    for name in ("ordersSrc", "ordersOut"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code < 300
    proxy.cut()


def test_a_chain_longer_than_the_limit_is_refused_at_create(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    """200 steps overflowed Spark's stack and ended the worker's JVM: refused, naming the key."""
    steps = MAX_TRANSFORMS + 1
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(tmp_path / "in.txt"),
        "connect.topicname": "chainTopic",
        "transforms": ",".join(f"s{i}" for i in range(steps)),
    }
    for i in range(steps):
        config |= {f"transforms.s{i}.type": "InsertHeader", f"transforms.s{i}.header": f"h{i}"}
        config[f"transforms.s{i}.value.literal"] = "v"
    response = worker.request("POST", "/connectors/longChain", content=json.dumps(config))
    assert response.status_code == 400, response.text
    assert f"transforms: names {steps} transforms; a chain may have at most" in response.text
    assert "longChain" not in worker.body("/connectors/list")


def test_a_worker_whose_jvm_dies_exits_non_zero_saying_why(worker: WorkerProcess) -> None:
    """Last in the module: the worker does not survive it."""
    assert worker.proc is not None
    jvm = _java_child(worker.proc.pid)
    os.kill(jvm, signal.SIGKILL)
    wait_until(lambda: worker.proc.poll() is not None, 120, "the worker to exit")
    assert worker.proc.returncode == 70, worker.log.read_text()[-3000:]
    log = worker.log.read_text()
    assert f"the Spark JVM (pid {jvm}) exited with code -9" in log
    assert "exiting with code 70 so that the worker's supervisor starts it again" in log


def _java_child(pid: int) -> int:
    """The pid of the JVM PySpark launched under process `pid`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and cmdline and cmdline[0].endswith(b"java"):
            return int(entry.name)
    raise AssertionError(f"no java child under {pid}")
