"""The anchor's quickstart through a real `sluice worker` process on each external bus.

File source → topic → file sink, created over the REST API, on `bus=rocketmq` (the real broker)
and `bus=kafka` (librdkafka's mock cluster, which lives in this test process; the worker connects
to it over TCP). A feeder appends lines while the worker runs; the worker's process group is
killed with -9 mid-stream and started again. The sink file ends byte-identical to the source, the
topic holds each line exactly once, and the broker's offsets for the consumer group
`connect-<sink>` advance while running and reach the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess
from tests.integration import bus_helpers
from tests.integration.bus_helpers import ROCKETMQ_NAMESRV, RealKafka, unique

pytestmark = pytest.mark.slow

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker


def _feed(path: Path, stop: threading.Event, written: list[int]) -> None:
    """Append 100 lines every 0.2 s until stopped (one file stays in one queue)."""
    n = 0
    while not stop.is_set():
        with open(path, "a", encoding="utf-8") as f:
            for _ in range(100):
                f.write(f"{n:08d} ünïcödé line {'x' * (n % 40)}\n")
                n += 1
        written[0] = n
        stop.wait(0.2)


def _post(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _quickstart(
    tmp_path: Path,
    bus_conf: dict[str, str],
    topic: str,
    committed: Callable[[], int],
    end: Callable[[], int] | None = None,
) -> tuple[int, int]:
    """Run the quickstart with a kill -9 mid-stream; return the group's committed offsets just
    before the kill and the number of lines written. The group's offsets must reach `end()`
    (default: the number of lines, for a bus whose offsets are dense)."""
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("")
    worker = WorkerProcess(tmp_path / "w", extra_conf=bus_conf).start()
    stop, written = threading.Event(), [0]
    feeder = threading.Thread(target=_feed, args=(src, stop, written), daemon=True)
    try:
        _post(
            worker,
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": topic,
            },
        )
        _post(
            worker,
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": topic,
            },
        )
        feeder.start()
        wait_until(
            lambda: _size(dst) > 100_000 and committed() > 0,
            what="the sink mid-stream with group offsets committed on the broker",
        )
        before = committed()
        worker.kill9()
        worker.start()
        wait_until(lambda: worker.state("dst") == "RUNNING", what="dst back")
        assert worker.state("src") == "RUNNING"
        stop.set()  # the feeder ran through the kill and the restart
        feeder.join()
        wait_until(
            lambda: _size(dst) >= _size(src),
            timeout=180,
            what="the sink to catch up after the restart",
        )
        assert dst.read_bytes() == src.read_bytes()
        target = end or (lambda: written[0])
        wait_until(lambda: committed() == target(), what="the group offsets to reach the end")
        assert worker.terminate() == 0
        return before, written[0]
    finally:
        stop.set()
        if worker.proc is not None and worker.proc.poll() is None:
            worker.kill9()


def test_quickstart_on_kafka_survives_kill_9(tmp_path: Path, kafka_cluster: RealKafka) -> None:
    from sluice.bus.kafka import KafkaBus

    topic = unique("qs")
    kafka_cluster.create_topic(topic, 4)
    probe = KafkaBus(tmp_path / "probe", bootstrap_servers=kafka_cluster.bootstraps)

    def committed() -> int:  # what `kafka-consumer-groups --describe --group connect-dst` shows
        return sum(o for o in probe.log.group_offsets("connect-dst", topic).values() if o > 0)

    def written() -> int:  # the partitions' ends (records and one commit marker per batch)
        return sum(r.max_offset for r in probe.describe(topic).ranges)

    conf = {"bus": "kafka", "bootstrap.servers": kafka_cluster.bootstraps}
    before, lines = _quickstart(tmp_path, conf, topic, committed, written)
    assert 0 < before < written()
    # each line appended exactly once, as a read_committed consumer counts them
    assert len(kafka_cluster.committed_values(topic)) == lines


# --------------------------------------------------------------------------------- RocketMQ
SERVERS = Path(__file__).resolve().parents[2] / "scripts" / "servers"


def _mqadmin_consumer_progress(group: str) -> dict[tuple[str, int], int]:
    """`mqadmin consumerProgress -g <group>` (rocketmq-tools, from the jars of
    `scripts/servers/rocketmq.sh admin`): consumer offset per (topic, queue)."""
    args = ["consumerProgress", "-n", ROCKETMQ_NAMESRV, "-g", group]
    done = subprocess.run(
        ["bash", str(SERVERS / "rocketmq.sh"), "admin", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    out = done.stdout
    # rows: "<topic> <broker> <qid> <broker offset> <consumer offset> <client ip> <diff> <time>"
    row = re.compile(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s", re.MULTILINE)
    return {(m[1], int(m[3])): int(m[5]) for m in row.finditer(out)}


@pytest.mark.rocketmq
def test_quickstart_on_rocketmq_survives_kill_9(tmp_path: Path) -> None:
    from sluice.bus.rocketmq import RocketMQBus

    topic = unique("qs")
    probe = RocketMQBus(tmp_path / "probe", namesrv_addr=ROCKETMQ_NAMESRV)

    def committed() -> int:  # the broker's consumer offsets (QUERY_CONSUMER_OFFSET)
        if not probe.log.topic_exists(topic):
            return 0
        return sum(max(o, 0) for o in probe.log.group_offsets("connect-dst", topic).values())

    conf = {"bus": "rocketmq", "namesrvAddr": ROCKETMQ_NAMESRV}
    before, lines = _quickstart(tmp_path, conf, topic, committed)
    assert 0 < before < lines
    assert probe.count(topic) == lines  # each line appended exactly once
    progress = _mqadmin_consumer_progress("connect-dst")  # RocketMQ's own tool agrees
    assert sum(o for (t, _), o in progress.items() if t == topic) == lines
