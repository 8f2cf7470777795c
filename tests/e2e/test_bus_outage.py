"""RocketMQ down mid-run (a private name server and broker of this test: the broker alone, then
both, each stopped and started again): the running file → topic → file pipeline rides it out
— the sink's reader notes the outage in the counters store, where the task's status shows it as
`retrying` — and then finishes with the sink file byte-identical."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.bus.base import BusUnavailable
from tests.conftest import wait_until
from tests.e2e.test_bus_crash import _size, _start
from tests.integration import private_rocketmq
from tests.integration.bus_helpers import unique

SERVERS = Path(__file__).resolve().parents[2] / "scripts" / "servers.sh"

# more than the default 300 s on a loaded 2-core machine: a broker stopped and started again
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _lines(start: int, stop: int) -> str:
    return "".join(f"{i:07d} outage test line\n" for i in range(start, stop))


@pytest.mark.rocketmq
def test_pipeline_rides_out_a_broker_restart(tmp_path: Path) -> None:
    """On a RocketMQ of its own: stopping the shared one would fail whatever else uses it. One
    pipeline rides out two outages in turn: the broker alone (stopped cleanly, it unregisters at
    once: the name server answers but routes no topic, and "no route" must then read as the
    outage, not as a topic that does not exist), then the name server and the broker."""
    cluster = private_rocketmq.start(tmp_path / "servers")
    try:
        _ride_out(cluster, tmp_path)
    finally:
        cluster.stop()


def _ride_out(cluster: private_rocketmq.PrivateRocketMQ, tmp_path: Path) -> None:
    from sluice.bus.rocketmq import RocketMQBus

    topic = unique("outage")
    probe = RocketMQBus(tmp_path / "probe", namesrv_addr=cluster.namesrv)
    probe.create_topic(topic, 4)
    src, dst, root, log = (
        tmp_path / "in.txt",
        tmp_path / "out.txt",
        tmp_path / "store",
        tmp_path / "child.log",
    )
    part = 50_000
    src.write_text(_lines(0, part))
    props = {"bus": "rocketmq", "namesrvAddr": cluster.namesrv}
    proc = _start(props, root, src, dst, topic, log)

    def notes() -> dict:
        from sluice.store.counters import SqliteCounters

        return SqliteCounters(root / "counters.sqlite").retrying(0).get("dst", {})

    try:
        wait_until(lambda: _size(dst) == _size(src) or proc.poll() is not None, 300, "part 1")
        assert proc.poll() is None, log.read_text()[-3000:]
        for n, away in enumerate(("broker alone", "name server and broker"), start=1):
            if away == "broker alone":
                cluster.stop_broker()
            else:
                cluster.run("down")
            try:
                # a writer's first question about its topic meets the outage, where the writer
                # rides it out (`TopicWriterPlan.routed`), not in the middle of a part's sends
                with pytest.raises(BusUnavailable):
                    probe.log.ensure_topic(topic)
                # a client without the route in its cache asks the name server: with the broker
                # alone away it has no route left, which is no answer about the topic (a sink's
                # reader took it for "not made yet", cleared its `retrying` note and waited
                # silently)
                fresh = RocketMQBus(tmp_path / f"fresh{n}", namesrv_addr=cluster.namesrv)
                with pytest.raises(BusUnavailable):
                    fresh.log.topic_exists(topic)
                with open(src, "a") as f:  # written while the servers are away
                    f.write(_lines(n * part, (n + 1) * part))
                wait_until(lambda: 0 in notes(), 60, f"the reader to notice ({away} away)")
                error = notes()[0]["error"]
                assert f"BusUnavailable: rocketmq namesrvAddr={cluster.namesrv}" in error
                assert proc.poll() is None, log.read_text()[-3000:]
            finally:
                cluster.run("up")
            wait_until(
                lambda: _size(dst) >= _size(src) or proc.poll() is not None,
                300,
                f"part {n + 1} ({away} back)",
            )
            assert proc.poll() is None, log.read_text()[-3000:]
            wait_until(lambda: notes() == {}, 60, f"healthy again ({away} back)")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert dst.read_bytes() == src.read_bytes()
    assert probe.count(topic) == 3 * part


# ------------------------------------------------------------------------------------------ Kafka
KAFKA_OUTAGE_S = 20.0


class PrivateKafka:
    """A Kafka broker of this test alone (`scripts/servers/kafka.sh` with its own folder and
    ports), so that stopping it disturbs no other test or user of the shared one."""

    def __init__(self, folder: Path) -> None:
        from tests.e2e.worker_process import free_port

        self.port = free_port()
        self.env = {
            **os.environ,
            "SLUICE_SERVERS_DIR": str(folder),
            "SLUICE_KAFKA_PORT": str(self.port),
            "SLUICE_KAFKA_CONTROLLER_PORT": str(free_port()),
        }
        self.address = f"127.0.0.1:{self.port}"

    def run(self, action: str) -> None:
        script = SERVERS.parent / "servers" / "kafka.sh"
        done = subprocess.run(
            ["bash", str(script), action], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr


def _statuses(worker, names: tuple[str, ...]) -> dict[str, dict[int, dict]]:
    """Connector → task id → retry note as `/v1` shows it (connectors and tasks all RUNNING),
    for the connectors whose notes the RocketMQ face shows on the same tasks (one read may fall
    between a note's coming and going: those are left out, ask again)."""
    out = {}
    for name in names:
        v1 = worker.get(f"/v1/connectors/{name}/status").json()
        rocketmq = worker.body(f"/connectors/{name}/status")
        assert v1["connector"]["state"] == "RUNNING", v1
        assert all(t["state"] == "RUNNING" for t in v1["tasks"]), v1
        notes = {t["id"]: t["retrying"] for t in v1["tasks"] if "retrying" in t}
        if set(notes) == {t["id"] for t in rocketmq["tasks"] if "retrying" in t}:
            out[name] = notes
    return out


def test_kafka_away_for_20_s_shows_in_both_status_faces(tmp_path: Path) -> None:
    """A real worker on a private Kafka, a file → topic → file pipeline on the JVM path (Spark
    SQL between the connectors and the bus). The broker stops for 20 s while lines are added:
    the source's commit and the sink's reader retry, both tasks show `retrying` on `/v1` and on
    the RocketMQ face, the notes go once the broker is back, and the copy is byte-identical with
    each line once in the topic."""
    from tests.e2e.worker_process import WorkerProcess
    from tests.integration.bus_helpers import RealKafka

    kafka = PrivateKafka(tmp_path / "servers")
    kafka.run("up")
    conf = {"bus": "kafka", "bootstrap.servers": kafka.address, "bus.default.queues": "2"}
    # one request waits 5 s at most before it counts as a failure (and the status says so)
    worker = WorkerProcess(
        tmp_path / "worker", extra_conf={**conf, "bus.request.timeout.ms": "5000"}
    )
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text(_lines(0, 5_000))
    jvm = {"pipeline.fused": "false"}
    try:
        worker.start()
        worker.post_connector(
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": "lines",
                **jvm,
            },
        )
        worker.post_connector(
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": "lines",
                **jvm,
            },
        )
        wait_until(lambda: _size(dst) == _size(src), 240, "the first part copied")
        kafka.run("down")
        away = time.monotonic()
        try:
            with open(src, "a") as f:  # read while the broker is down
                f.write(_lines(5_000, 10_000))
            seen: dict[str, dict[int, dict]] = {}

            def noted() -> bool:
                seen.update((k, v) for k, v in _statuses(worker, ("src", "dst")).items() if v)
                return set(seen) == {"src", "dst"}

            try:
                wait_until(noted, KAFKA_OUTAGE_S, "both connectors' retrying", every=0.5)
            except AssertionError:
                pytest.fail(f"not both connectors' status said they retry; seen: {seen}")
            for name in ("src", "dst"):
                note = seen[name][0]
                assert note["attempts"] >= 1 and note["since"] / 1000 <= time.time(), note
                assert f"BusUnavailable: kafka bootstrap.servers={kafka.address}" in note["error"]
            left = KAFKA_OUTAGE_S - (time.monotonic() - away)
            until = time.monotonic() + left
            wait_until(
                lambda: bool(_statuses(worker, ("src", "dst"))) and time.monotonic() >= until,
                left + 30,
                "the end of the outage (both connectors RUNNING)",
                every=0.5,
            )
        finally:
            kafka.run("up")
        wait_until(lambda: _size(dst) >= _size(src), 300, "the second part copied")
        wait_until(
            lambda: _statuses(worker, ("src", "dst")) == {"src": {}, "dst": {}},
            60,
            "the retry notes to go",
        )
        assert dst.read_bytes() == src.read_bytes()
        # each line once in the topic, as a read_committed consumer counts them
        seen_values = RealKafka(kafka.address).committed_values("lines")
        assert sorted(seen_values) == sorted(x.encode() for x in src.read_text().splitlines())
        retries = {
            sample.labels["connector"]: sample.value
            for family in text_string_to_metric_families(worker.get("/metrics").text)
            for sample in family.samples
            if sample.name == "sluice_total_retries_total"
        }
        assert retries["src"] >= seen["src"][0]["attempts"], retries
        assert retries["dst"] >= seen["dst"][0]["attempts"], retries
    finally:
        if worker.proc is not None:
            worker.terminate()
        kafka.run("down")
