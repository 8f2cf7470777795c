"""RocketMQ down mid-run (name server and broker stopped, then started again, ~20 s): the running
file → topic → file pipeline rides it out — the sink's reader notes the outage in the counters
store, where the task's status shows it as `retrying` — and then finishes with the sink file
byte-identical."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_bus_crash import _size, _start
from tests.integration.bus_helpers import ROCKETMQ_NAMESRV, unique

SERVERS = Path(__file__).resolve().parents[2] / "scripts" / "servers.sh"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.rocketmq,
    # It stops and starts the local test broker; only a run pointed elsewhere on purpose skips it.
    pytest.mark.skipif(
        ROCKETMQ_NAMESRV != "127.0.0.1:9876",
        reason="SLUICE_ROCKETMQ_NAMESRV names another broker: this test restarts the local one",
    ),
]


def _servers(action: str) -> None:
    done = subprocess.run(
        ["bash", str(SERVERS), action, "rocketmq"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _lines(start: int, stop: int) -> str:
    return "".join(f"{i:07d} outage test line\n" for i in range(start, stop))


def test_pipeline_rides_out_a_broker_restart(tmp_path: Path) -> None:
    from sluice.bus.rocketmq import RocketMQBus

    topic = unique("outage")
    probe = RocketMQBus(tmp_path / "probe", namesrv_addr=ROCKETMQ_NAMESRV)
    probe.create_topic(topic, 4)
    src, dst, root, log = (
        tmp_path / "in.txt",
        tmp_path / "out.txt",
        tmp_path / "store",
        tmp_path / "child.log",
    )
    src.write_text(_lines(0, 50_000))
    props = {"bus": "rocketmq", "namesrvAddr": ROCKETMQ_NAMESRV}
    proc = _start(props, root, src, dst, topic, log)

    def notes() -> dict:
        from sluice.store.counters import SqliteCounters

        return SqliteCounters(root / "counters.sqlite").retrying(0).get("dst", {})

    try:
        wait_until(lambda: _size(dst) == _size(src) or proc.poll() is not None, 300, "part 1")
        assert proc.poll() is None, log.read_text()[-3000:]
        _servers("down")
        try:
            with open(src, "a") as f:  # written while the broker is down
                f.write(_lines(50_000, 100_000))
            wait_until(lambda: 0 in notes(), 60, "the reader to notice the outage")
            assert "BusUnavailable: rocketmq namesrvAddr=127.0.0.1:9876" in notes()[0]["error"]
            assert proc.poll() is None, log.read_text()[-3000:]
        finally:
            _servers("up")
        wait_until(lambda: _size(dst) >= _size(src) or proc.poll() is not None, 300, "part 2")
        assert proc.poll() is None, log.read_text()[-3000:]
        wait_until(lambda: notes() == {}, 60, "healthy again")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert dst.read_bytes() == src.read_bytes()
    assert probe.count(topic) == 100_000
