"""Start a crash test's child process in its own process group, and kill -9 that group (the
child's JVM with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def start_child(script: Path, args: list[str], log: Path) -> subprocess.Popen:
    """`python script args…` with the repository importable, its output appended to `log`."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
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
