"""The servers the suite needs, started on demand through `scripts/servers.sh` (loopback only).

A test module asks for a server with `ensure("kafka")` (usually in a module- or session-scoped
fixture): the first call in a pytest run starts it unless it already runs, and at the end of the
run the servers that a pytest run started are stopped (`SLUICE_KEEP_SERVERS=1` keeps them for the
next run; servers started by hand, `make servers-up`, are never stopped here).

The servers are machine-wide, so two pytest runs may use one server at once: each run registers
itself as a user of the server (`$SLUICE_SERVERS_DIR/NAME/users/PID`), and the last live user of a
server that a pytest run started stops it, whichever run started it. A server that cannot be
brought up fails the test that needs it with the script's message; tests never skip for a missing
server. See docs/servers.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "servers.sh"
SERVERS_DIR = Path(os.environ.get("SLUICE_SERVERS_DIR", "/tmp/sluice-servers"))

_lock = threading.Lock()
_addresses: dict[str, str] = {}
_prepared: set[str] = set()


@contextlib.contextmanager
def _users_lock(name: str) -> Iterator[Path]:
    """The users folder of server `name`, locked against other pytest runs."""
    users = SERVERS_DIR / name / "users"
    users.mkdir(parents=True, exist_ok=True)
    with open(SERVERS_DIR / name / "users.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield users


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _script(action: str, name: str, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", str(SCRIPT), action, name],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SLUICE_SERVERS_CALLER": "pytest"},  # see scripts/servers.sh
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"scripts/servers.sh {action} {name} failed (exit {done.returncode}):\n"
            f"{done.stderr[-4000:]}{done.stdout[-2000:]}"
        )
    return done


def ensure(name: str) -> str:
    """Bring server `name` up (idempotent) and return its address as the script printed it."""
    with _lock:
        if name in _addresses:
            return _addresses[name]
        # registered before `up`: a run ending meanwhile sees this one and leaves the server up
        with _users_lock(name) as users:
            (users / str(os.getpid())).touch()
        done = _script("up", name, 900)
        line = next(
            (x for x in done.stdout.splitlines() if x.startswith(f"{name} up ")), f"{name} up ?"
        )
        parts = line.split()
        _addresses[name] = parts[2]
        if parts[3:4] == ["started"]:
            (SERVERS_DIR / name / "started-by-pytest").write_text(str(os.getpid()))
        return _addresses[name]


def prepare(name: str) -> None:
    """Install what server `name` needs (packages, jars) without starting it, once per run.

    For tests that run private instances of a server's binaries (to stop and start them at will).
    """
    with _lock:
        if name not in _prepared:
            _script("prepare", name, 1800)
            _prepared.add(name)


def stop_started() -> None:
    """At the end of the session: stop each server a pytest run started if no live run uses it."""
    keep = os.environ.get("SLUICE_KEEP_SERVERS") == "1"
    me = str(os.getpid())
    with _lock:
        for name in reversed(list(_addresses)):
            marker = SERVERS_DIR / name / "started-by-pytest"
            with _users_lock(name) as users:
                (users / me).unlink(missing_ok=True)
                others = []
                for user in users.iterdir():
                    if user.name.isdigit() and _alive(int(user.name)):
                        others.append(user)
                    else:  # a run that ended without this (killed)
                        user.unlink(missing_ok=True)
                if keep:
                    # kept on purpose: from now on it counts as started by hand
                    marker.unlink(missing_ok=True)
                    continue
                if others or not marker.exists():
                    continue
                subprocess.run(
                    ["bash", str(SCRIPT), "down", name], capture_output=True, timeout=300
                )
                marker.unlink(missing_ok=True)
        _addresses.clear()
