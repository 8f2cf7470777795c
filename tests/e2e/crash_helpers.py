"""What the crash tests of connectors share: a child worker process started in its own process
group and killed with it, and the records of a topic of its embedded bus."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sluice.bus.embedded import EmbeddedLog


def start_child(child: Path, args: list[str], log: Path) -> subprocess.Popen:
    """`python child *args`, output appended to `log`, in a new session (process group)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, str(child), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # kill -9 of the group takes the JVM down with it
    )


def kill9(proc: subprocess.Popen) -> None:
    """kill -9 of the child's whole process group."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def topic_records(root: Path, topic: str) -> list[dict]:
    """Every record of `topic` in the embedded bus under `root`, queue by queue."""
    log = EmbeddedLog(root / "bus")
    try:
        if not log.topic_exists(topic):
            return []
        return [
            row
            for q, r in sorted(log.offsets(topic).items())
            for _, batch in log.read(topic, q, r.min_offset, r.max_offset)
            for row in batch.to_pylist()
        ]
    finally:
        log.close()


def topic_count(root: Path, topic: str) -> int:
    """How many records `topic` holds (its queues' end offsets)."""
    log = EmbeddedLog(root / "bus")
    try:
        if not log.topic_exists(topic):
            return 0
        return sum(r.max_offset for r in log.offsets(topic).values())
    finally:
        log.close()
