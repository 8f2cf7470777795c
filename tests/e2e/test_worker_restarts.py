"""A connector whose query fails for a transient Spark reason restarts by itself
(`sluice.runtime.herder.restarts`), on the shared worker: a source whose Spark Python worker dies
under it (`os._exit`, as when Spark loses a worker) twice comes back RUNNING and delivers every line
once; with `restart.transient.max.attempts=0` (Kafka Connect's behaviour) it stays FAILED; a bad
value is a 400 naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

PLUGIN = '''
import os
from pathlib import Path

from sluice.connectors.file.source import FileSourceConnector, FileSourceTask


class _CrashingTask(FileSourceTask):
    def start(self, config):
        super().start(config)
        self.marks = Path(config["crash.dir"])
        self.times = int(config["crash.times"])

    def read(self, *args, **kwargs):
        self.marks.mkdir(exist_ok=True)
        done = len(list(self.marks.iterdir()))
        if done < self.times:
            (self.marks / str(done)).touch()
            os._exit(1)  # the Spark Python worker dies under the query
        return super().read(*args, **kwargs)


class CrashingFileSource(FileSourceConnector):
    """The file source, whose Python worker dies the first `crash.times` reads."""

    task_class = _CrashingTask
'''


def _count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:
        return 0
    return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> int:
    return worker.request("POST", f"/connectors/{name}", content=json.dumps(config)).status_code


def test_a_transient_spark_failure_restarts_the_connector(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    assert worker.plugin_dir is not None
    (worker.plugin_dir / "crashing_source.py").write_text(PLUGIN)
    worker.body("/plugin/reload")
    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i}\n" for i in range(40)))
    base = {"connector.class": "CrashingFileSource", "filename": str(src)}
    config = {**base, "connect.topicname": "crashyTopic", "crash.dir": str(tmp_path / "a")}
    assert _post(worker, "crashy", {**config, "crash.times": "2"}) == 200
    wait_until(lambda: _count(worker, "crashyTopic") == 40, timeout=120, what="the 40 lines")
    assert worker.state("crashy") == "RUNNING"
    log = worker.log.read_text()
    assert "connector crashy failed for a transient Spark reason" in log
    assert "(automatic restart 2 of 5, restart.transient.max.attempts)" in log
    assert "automatic restart 3 of 5" not in log
    assert len(list((tmp_path / "a").iterdir())) == 2
    worker.body("/connectors/crashy/stop")

    # Kafka Connect's behaviour: no automatic restart
    off = {**config, "connect.topicname": "offTopic", "crash.dir": str(tmp_path / "b")}
    off |= {"crash.times": "1", "restart.transient.max.attempts": "0"}
    assert _post(worker, "crashyOff", off) == 200
    wait_until(lambda: worker.state("crashyOff") == "FAILED", timeout=90, what="FAILED")
    trace = worker.get("/v1/connectors/crashyOff/status").json()["connector"]["trace"]
    assert "Python worker exited unexpectedly" in trace
    assert "connector crashyOff failed for a transient" not in worker.log.read_text()
    worker.body("/connectors/crashyOff/stop")

    bad = worker.request(
        "POST",
        "/connectors/crashyBad",
        content=json.dumps({**config, "restart.transient.max.attempts": "-1"}),
    )
    assert bad.status_code == 400
    assert "restart.transient.max.attempts" in bad.json()["message"]
