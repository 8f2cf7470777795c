"""kill -9 a worker mid-stream and start it again: connectors come back in their target state and
the sink file is still byte-identical to the source; SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import BOOT, WorkerProcess

pytestmark = pytest.mark.slow


def _feed(path: Path, stop: threading.Event, written: list[int]) -> None:
    n = 0
    while not stop.is_set():
        with open(path, "a", encoding="utf-8") as f:
            for _ in range(200):
                f.write(f"{n:08d} ünïcödé line {'x' * (n % 50)}\n")
                n += 1
        written[0] = n
        stop.wait(0.02)


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def test_kill_9_then_restart_restores_states_and_loses_nothing(tmp_path: Path) -> None:
    src, dst, spare = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "spare.txt"
    src.write_text("")
    worker = WorkerProcess(tmp_path / "w").start()
    try:
        _post(
            worker,
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": "lines",
            },
        )
        _post(
            worker,
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": "lines",
            },
        )
        _post(
            worker,
            "paused",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(spare),
                "connect.topicnames": "lines",
            },
        )
        worker.body("/connectors/paused/pause")
        stop, written = threading.Event(), [0]
        feeder = threading.Thread(target=_feed, args=(src, stop, written), daemon=True)
        feeder.start()
        try:
            wait_until(
                lambda: dst.exists() and dst.stat().st_size > 100_000,
                what="the sink to be mid-stream",
            )
            worker.kill9()
            worker.start()
            # the REST API listened before the connectors were started, so it answered (and
            # showed them UNASSIGNED) during the boot instead of being down for all of it
            boot = worker.log.read_text().rsplit("starting worker", 1)[1]
            rest_up = boot.index("REST API on http://127.0.0.1:")
            assert rest_up < boot.index("connector src started (") < boot.index(BOOT)
            wait_until(lambda: worker.state("src") == "RUNNING", what="src back")
            assert worker.state("dst") == "RUNNING"
            assert worker.state("paused") == "PAUSED"  # a paused connector stays paused
        finally:
            stop.set()
            feeder.join()
        wait_until(
            lambda: dst.read_bytes() == src.read_bytes(),
            timeout=180,
            what="the sink to equal the source after the restart",
        )
        assert not spare.exists() or spare.stat().st_size == 0

        # SIGTERM: a clean stop, and the next boot resumes where it ended
        assert worker.terminate() == 0
        assert "worker stopped" in worker.log.read_text()
        with open(src, "a", encoding="utf-8") as f:
            f.write("written while the worker was down\n")
        worker.start()
        wait_until(
            lambda: dst.read_bytes() == src.read_bytes(),
            what="the sink to catch up after a clean restart",
        )
        assert worker.state("paused") == "PAUSED"
    finally:
        if worker.proc is not None and worker.proc.poll() is None:
            worker.kill9()
