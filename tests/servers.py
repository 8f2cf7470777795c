"""The servers the suite needs, started on demand through `scripts/servers.sh` (loopback only).

A test module asks for a server with `ensure("kafka")` (usually in a module- or session-scoped
fixture): the first call in a pytest run starts it unless it already runs, and the run stops at its
end exactly the servers it started itself (`SLUICE_KEEP_SERVERS=1` keeps them for the next run).
A server that cannot be brought up fails the test that needs it with the script's message; tests
never skip for a missing server.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "servers.sh"

_lock = threading.Lock()
_addresses: dict[str, str] = {}
_started: list[str] = []
_prepared: set[str] = set()


def ensure(name: str) -> str:
    """Bring server `name` up (idempotent) and return its address as the script printed it."""
    with _lock:
        if name in _addresses:
            return _addresses[name]
        done = subprocess.run(
            ["bash", str(SCRIPT), "up", name], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"scripts/servers.sh up {name} failed (exit {done.returncode}):\n"
                f"{done.stderr[-4000:]}{done.stdout[-2000:]}"
            )
        line = next(
            (x for x in done.stdout.splitlines() if x.startswith(f"{name} up ")), f"{name} up ?"
        )
        parts = line.split()
        _addresses[name] = parts[2]
        if parts[3:4] == ["started"]:
            _started.append(name)
        return _addresses[name]


def prepare(name: str) -> None:
    """Install what server `name` needs (packages, jars) without starting it, once per run.

    For tests that run private instances of a server's binaries (to stop and start them at will).
    """
    with _lock:
        if name in _prepared:
            return
        done = subprocess.run(
            ["bash", str(SCRIPT), "prepare", name], capture_output=True, text=True, timeout=1800
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"scripts/servers.sh prepare {name} failed (exit {done.returncode}):\n"
                f"{done.stderr[-4000:]}{done.stdout[-2000:]}"
            )
        _prepared.add(name)


def stop_started() -> None:
    """Stop the servers this run started (called once at the end of the session)."""
    if os.environ.get("SLUICE_KEEP_SERVERS") == "1":
        return
    with _lock:
        for name in reversed(_started):
            subprocess.run(["bash", str(SCRIPT), "down", name], capture_output=True, timeout=300)
        _started.clear()
        _addresses.clear()
