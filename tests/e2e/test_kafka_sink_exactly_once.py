"""The Kafka sink connector is exactly-once: a worker (embedded bus) copies a growing file into a
topic of the real Kafka 4 broker with `KafkaSinkConnector`; it is killed with kill -9 mid-stream
and restarted; a `read_committed` consumer then finds each line in the target topic exactly once
(the transaction per micro-batch and task, and its batch marker, see
`sluice.connectors.kafka.sink`)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess
from tests.integration import bus_helpers
from tests.integration.bus_helpers import RealKafka, unique

pytestmark = pytest.mark.slow

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker


def _feed(path: Path, stop: threading.Event, written: list[int]) -> None:
    """Append 50 lines every 0.1 s until stopped."""
    n = 0
    while not stop.is_set():
        with open(path, "a", encoding="utf-8") as f:
            for _ in range(50):
                f.write(f"{n:08d} line ü {'y' * (n % 30)}\n")
                n += 1
        written[0] = n
        stop.wait(0.1)


def test_kafka_sink_writes_each_record_once_across_kill_9(
    tmp_path: Path, kafka_cluster: RealKafka
) -> None:
    target = unique("eos")
    kafka_cluster.create_topic(target, 3)
    src = tmp_path / "in.txt"
    src.write_text("")
    worker = WorkerProcess(tmp_path / "w").start()
    stop, written = threading.Event(), [0]
    feeder = threading.Thread(target=_feed, args=(src, stop, written), daemon=True)

    def post(name: str, config: dict[str, str]) -> None:
        response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
        assert response.status_code == 200, response.text

    try:
        post(
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": "m",
            },
        )
        post(
            "out",
            {
                "connector.class": "KafkaSinkConnector",
                "target.bootstrap.servers": kafka_cluster.bootstraps,
                "connect.topicnames": "m",
                "topic.rename.format": target,
                "max.tasks": "2",
            },
        )
        feeder.start()
        wait_until(
            lambda: len(kafka_cluster.committed_values(target)) > 5_000,
            timeout=180,
            what="the target topic mid-stream",
        )
        worker.kill9()  # mid-stream: a transaction may be open, a batch half produced
        worker.start()
        wait_until(lambda: worker.state("out") == "RUNNING", what="the sink back")
        stop.set()
        feeder.join()
        lines = written[0]
        wait_until(
            lambda: len(kafka_cluster.committed_values(target)) >= lines,
            timeout=240,
            what=f"{lines} records in {target}",
        )
        assert worker.terminate() == 0
    finally:
        stop.set()
        if worker.proc is not None and worker.proc.poll() is None:
            worker.kill9()
    seen = Counter(kafka_cluster.committed_values(target))
    expected = Counter(line.encode() for line in src.read_text(encoding="utf-8").splitlines())
    assert seen == expected  # every line, none twice
    assert sum(seen.values()) == lines
