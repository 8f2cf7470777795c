"""Waiting in a benchmark for a condition while the connectors it drives run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(done: Callable[[], bool], runner: Any, timeout: float = 3600) -> None:
    """Poll `done()` until it is true; stop the benchmark at once if a connector of `runner`
    (a `ConnectorRunner`) failed, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        for running in runner.running.values():
            failure = running.failure()
            if failure is not None:
                raise SystemExit(f"connector {running.name} failed: {failure[0]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s")
        time.sleep(0.05)
