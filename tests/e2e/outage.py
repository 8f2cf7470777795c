"""An outage of a server, ridden out by a runner's connectors: none may fail meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.conftest import wait_until


def healthy(runner: Any, during: str = "") -> None:
    """Fail naming the first connector of `runner` whose query failed."""
    for running in runner.running.values():
        failure = running.failure()
        assert failure is None, f"{running.name} failed{during}: {failure[0]}"


def ride_out(runner: Any, seconds: float, restore: Callable[[], None]) -> None:
    """Let `seconds` pass with the server away, checking the connectors stay up; then `restore()`
    the server (also when a connector failed)."""
    until = time.monotonic() + seconds

    def over() -> bool:
        healthy(runner, " during the outage")
        return time.monotonic() >= until

    try:
        wait_until(over, seconds + 30, "the end of the outage", every=0.5)
    finally:
        restore()
