"""Start a crash test's child process in its own process group, and kill -9 that group (the
child's JVM with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import wait_until
from tests.e2e.orphans import spawn

REPO = Path(__file__).parents[2]


def start_child(script: Path, args: list[str], log: Path) -> subprocess.Popen:
    """`python script args…` with the repository importable, its output appended to `log`."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    return spawn(
        [sys.executable, str(script), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # kill -9 of the group takes the JVM down with it
    )


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL to the child's whole process group, then reap it."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def run_then_kill(
    proc: subprocess.Popen, until: Callable[[], bool], log: Path, *, timeout: float, what: str
) -> None:
    """Let the child run until `until()` holds, then kill -9 it; a child that exits first failed
    (its log's tail says why)."""
    try:
        wait_until(lambda: proc.poll() is not None or until(), timeout, what, every=0.05)
        assert proc.poll() is None, f"child exited early:\n{log.read_text()[-4000:]}"
    finally:
        kill9(proc)
