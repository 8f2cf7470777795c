"""The end of a crash test's child process: report the first connector failure, else run on until
the test kills the process."""

from __future__ import annotations

import sys
import threading
from typing import Any


def watch_until_killed(runner: Any, every: float = 0.2) -> None:
    """Print `RUNNING`, then check the runner's connectors every `every` seconds; on the first
    failure print `FAILED <name>: <error>` with its trace's tail and exit 3 (the test reads both
    lines from the child's output). Never returns otherwise: the test ends the child with a kill."""
    print("RUNNING", flush=True)
    idle = threading.Event()  # never set: a wait that nothing interrupts but the kill
    while True:
        for running in runner.running.values():
            failure = running.failure()
            if failure is not None:
                print(f"FAILED {running.name}: {failure[0]}\n{failure[1][-4000:]}", flush=True)
                sys.exit(3)
        idle.wait(every)
