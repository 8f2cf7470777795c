"""A worker's boot as a client sees it: the REST API listens before Spark is built (503
`worker.starting` until the herder is there), a port already in use is refused before anything
starts, naming `httpPort`, and a running connector's Spark progress is readable over REST."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import REPO, WorkerProcess

pytestmark = pytest.mark.slow


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_a_port_in_use_is_refused_before_spark_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        worker = WorkerProcess(tmp_path / "worker", port=holder.getsockname()[1])
        worker.tmp.mkdir(parents=True)
        worker.write_conf()
        done = subprocess.run(
            [sys.executable, "-m", "sluice.cli", "worker", "-c", str(worker.conf)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    assert done.returncode == 2, done.stderr
    assert f"httpPort: 127.0.0.1:{worker.port} cannot be listened on" in done.stderr
    assert "starting worker" not in done.stderr  # nothing was built: no Spark, no store
    assert not (worker.tmp / "store").exists()


def test_rest_answers_while_spark_starts_then_shows_progress(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("one\ntwo\n")
    worker = WorkerProcess(tmp_path / "worker")
    boots = worker.launch()
    try:
        wait_until(lambda: _answers(worker.url + "/"), 120, "GET / to answer", every=0.02)
        # Spark's JVM alone takes seconds to start: the herder cannot be there yet
        early = httpx.get(worker.url + "/v1/connectors", timeout=5)
        assert early.status_code == 503, early.text
        assert early.json()["code"] == "worker.starting"
        assert early.headers["Retry-After"] == "2"
        worker.wait_boot(boots)
        log = worker.log.read_text()
        assert log.index("REST API on") < log.index("The standalone worker boot success.")

        worker.post_connector(
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(data / "in.txt"),
                "connect.topicname": "lines",
            },
        )
        worker.post_connector(
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(data / "out.txt"),
                "connect.topicnames": "lines",
            },
        )
        out = data / "out.txt"
        wait_until(lambda: out.exists() and out.read_text() == "one\ntwo\n", 180, "the copy")
        progress = worker.get("/v1/connectors/dst/progress").json()
        assert progress["connector"] == "dst" and progress["query_id"]
        # (numInputRows counts what Spark sees: a source's receipts, not the lines)
        assert [b["batchId"] for b in progress["batches"]][:1] == [0]
        phases = progress["batches"][0]["durationMs"]
        assert {"addBatch", "queryPlanning", "walCommit", "triggerExecution"} <= set(phases)
        assert phases["triggerExecution"] >= phases["addBatch"]
        missing = worker.get("/v1/connectors/nope/progress")
        assert missing.status_code == 404 and "nope" in missing.json()["message"]
    finally:
        assert worker.terminate() == 0, worker.log.read_text()[-3000:]
