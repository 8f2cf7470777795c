"""A worker asked to stop while a micro-batch is in its write job: SIGTERM stops it cleanly, and
the batch cut short leaves no Spark ERROR lines ("… is aborting", "… failed to abort", "Aborting
task", "Aborting commit for partition …", "Error in TaskCompletionListener") in the worker's log
(see `sluice.engine.shutdown`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_sigterm_during_a_micro_batch_logs_no_spark_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("one\ntwo\n")
    marker = data / "put-started"
    worker = WorkerProcess(tmp_path / "worker")
    worker.wait_boot(worker.launch(), timeout=420)
    try:
        worker.post_connector(
            "lines",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(data / "in.txt"),
                "connect.topicname": "slow",
            },
        )
        worker.post_connector(
            "slow",
            {
                "connector.class": "tests.e2e.slow_sink.SlowSinkConnector",
                "connect.topicnames": "slow",
                "slow.marker": str(marker),
            },
        )
        wait_until(marker.exists, 300, "the slow sink's first put")
        stopping = worker.log.stat().st_size
        code = worker.terminate()
    finally:
        if worker.proc is not None and worker.proc.poll() is None:
            worker.terminate()
    log = worker.log.read_text(errors="replace")[stopping:]
    assert code == 0, log[-3000:]
    assert not Path(f"{marker}.done").exists(), "the put ended: no batch was cut short"
    assert log.rstrip().endswith("INFO sluice.worker: worker stopped"), log[-3000:]
    errors = [line for line in log.splitlines() if " ERROR " in line or "abort" in line.lower()]
    assert errors == [], log[-6000:]
