"""kill -9 a process running file source → broker topic → file sink, on `bus=kafka` (the real
Kafka 4 broker of `scripts/servers.sh`) and `bus=rocketmq` (a real broker); restart; the sink file
is byte-identical, each line is in the topic exactly once (Kafka: as a `read_committed` consumer
counts them), and the sink's consumer-group offsets advanced on the broker.

The source runs two tasks over one file (Spark cuts each micro-batch's range in two), so every
micro-batch is two parts sent from the executors, the second after the first (their lines share a
queue): a kill lands before, during or after any part or the driver's commit.

Each test kills once in the suite (`SLUICE_CRASH_ROUNDS`, default 1, at a random sink fill level)
on a small file (`SLUICE_CRASH_LINES`, default 40,000 / 100,000); `make crash-kafka` and `make
crash-rocketmq` run 1,000,000 lines with three kills (two at random sink fill levels, one at a
random instant). `SLUICE_CRASH_SEED` fixes the random choices."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.integration import bus_helpers
from tests.integration.bus_helpers import ROCKETMQ_NAMESRV, RealKafka, unique

# more than the default 300 s on a loaded 2-core machine: a kill -9 and restarts of a Spark process
# on a broker bus
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker

CHILD = Path(__file__).with_name("bus_child.py")


def _start(props: dict[str, str], root: Path, src: Path, dst: Path, topic: str, log: Path) -> Any:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return spawn(
        [sys.executable, str(CHILD), json.dumps(props), str(root), str(src), str(dst), topic],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _crash_and_recover(
    tmp_path: Path,
    props: dict[str, str],
    topic: str,
    lines: int,
    settled: Callable[[], bool],
    rounds: int = 3,
) -> tuple[bytes, bytes]:
    """Kill the child `rounds` times (of three: two random sink fill levels, one random
    instant), then let a last one finish and wait for `settled`; return the source and sink
    file contents."""
    src, dst, root, log = (
        tmp_path / "in.txt",
        tmp_path / "out.txt",
        tmp_path / "store",
        tmp_path / "child.log",
    )
    seed = int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns()))
    rng = random.Random(seed)
    with open(src, "w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(f"{i:06d} {'ü' * (i % 3)}{rng.random():.4f}\n")
    total = _size(src)
    plans = [("fill", f) for f in sorted(rng.uniform(0.1, 0.8) for _ in range(2))]
    plans.insert(rng.randrange(3), ("time", rng.uniform(3.0, 10.0)))
    if rounds < 3:  # fewer rounds: kills at sink fill levels, so each one is mid-stream
        plans = [p for p in plans if p[0] == "fill"][:rounds]
    kills = []
    for kind, amount in plans:
        before = _size(dst)
        proc = _start(props, root, src, dst, topic, log)
        if kind == "time":
            deadline = time.monotonic() + amount
            wait_until(lambda d=deadline, p=proc: time.monotonic() >= d or p.poll() is not None, 60)
        else:
            target = max(before + 1, int(total * amount))
            wait_until(
                lambda t=target, p=proc: _size(dst) >= t or p.poll() is not None,
                300,
                f"sink to reach {target} bytes",
            )
        assert proc.poll() is None, f"child exited early:\n{log.read_text()[-3000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        kills.append(f"{kind}={amount:.2f} (sink at {_size(dst)} of {total} bytes)")
    print(f"seed {seed}; kill -9 at: {'; '.join(kills)}")
    proc = _start(props, root, src, dst, topic, log)
    try:
        wait_until(
            lambda: _size(dst) >= total or proc.poll() is not None, 300, "the sink to finish"
        )
        assert proc.poll() is None, f"child failed:\n{log.read_text()[-3000:]}"
        wait_until(settled, 60, "the consumer-group offsets to reach the end")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return src.read_bytes(), dst.read_bytes()


def test_kafka_bus_survives_kill_9(tmp_path: Path, kafka_cluster: RealKafka) -> None:
    from sluice.bus.kafka import KafkaBus

    topic = unique("crash")
    kafka_cluster.create_topic(topic, 4)
    props = {"bus": "kafka", "bootstrap.servers": kafka_cluster.bootstraps}
    bus = KafkaBus(tmp_path / "probe", bootstrap_servers=kafka_cluster.bootstraps)

    def settled() -> bool:  # the group's offsets are at the end of every partition
        ends = {r.queue: r.max_offset for r in bus.describe(topic).ranges}
        return bus.log.group_offsets("connect-dst", topic) == ends

    lines = int(os.environ.get("SLUICE_CRASH_LINES", "40000"))
    source, sink = _crash_and_recover(tmp_path, props, topic, lines, settled, _rounds())
    assert sink == source
    # each line appended exactly once, as a read_committed consumer counts them
    seen = kafka_cluster.committed_values(topic)
    assert len(seen) == lines
    assert sorted(seen) == sorted(line.encode() for line in source.decode().splitlines())


def _rounds() -> int:
    return int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


@pytest.mark.rocketmq
def test_rocketmq_bus_survives_kill_9(tmp_path: Path) -> None:
    from sluice.bus.base import BusUnavailable
    from sluice.bus.rocketmq import RocketMQBus

    topic = unique("crash")
    probe = RocketMQBus(tmp_path / "probe", namesrv_addr=ROCKETMQ_NAMESRV)

    def created() -> bool:
        # a name server the run (re)started a moment ago may not answer yet
        try:
            probe.create_topic(topic, 4)
        except BusUnavailable:
            return False
        return True

    wait_until(created, 120, "the name server to answer and the topic to be created")
    props = {"bus": "rocketmq", "namesrvAddr": ROCKETMQ_NAMESRV}

    lines = int(os.environ.get("SLUICE_CRASH_LINES", "100000"))

    def settled() -> bool:  # what `mqadmin consumerProgress -g connect-dst` shows
        return sum(probe.log.group_offsets("connect-dst", topic).values()) == lines

    source, sink = _crash_and_recover(tmp_path, props, topic, lines, settled, _rounds())
    assert sink == source
    assert probe.count(topic) == lines  # each line appended exactly once
    seen = [
        value
        for r in probe.describe(topic).ranges
        for _, batch in probe.log.read(topic, r.queue, r.min_offset, r.max_offset)
        for value in batch.column("value").to_pylist()
    ]
    assert sorted(seen) == sorted(line.encode() for line in source.decode().splitlines())
