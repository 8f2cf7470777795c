"""Test children die with the test process (tests/e2e/orphans.py), also when a helper thread
started them and has ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_until

REPO = Path(__file__).parents[2]

# A middle process that starts a long sleeper through `spawn`, from a helper thread that ends
# at once, prints the sleeper's pid, then waits to be killed.
MIDDLE = """
import sys, threading
from tests.e2e.orphans import spawn
box = []
sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
t = threading.Thread(target=lambda: box.append(spawn(sleep)))
t.start(); t.join()
print(box[0].pid, flush=True)
threading.Event().wait()
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_child_dies_with_the_process_that_spawned_it() -> None:
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert middle.stdout is not None
        sleeper = int(middle.stdout.readline())
        # its helper thread has ended: the sleeper lives on while the middle process lives
        assert _alive(sleeper)
        middle.send_signal(signal.SIGKILL)
        middle.wait(10)
        wait_until(lambda: not _alive(sleeper), timeout=10, what="the sleeper to die")
    finally:
        if middle.poll() is None:
            middle.kill()
