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

Under pytest-xdist the run is the controlling process: its workers register its pid
(`SLUICE_SERVERS_USER`, set by the controller), not their own, and the controller stops what the
run started once every worker is done (a worker that ends first must not stop a server the other
one is about to ask for).

`python3 -m tests.servers start NAME...` (CI, before the tests: `.ci/run`) brings servers up in
parallel in the background of the lint and unit tests, and marks the ones it started as started by
a test run, so that the run that uses them last stops them; `python3 -m tests.servers release
NAME...` (CI, at the end) stops those of them no live run uses, e.g. one no test asked for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
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


def _user() -> str:
    """The pid this process registers as a server user: the pytest run's (see the docstring)."""
    return os.environ.get("SLUICE_SERVERS_USER") or str(os.getpid())


def in_xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


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
            (users / _user()).touch()
        _addresses[name] = _up(name)
        return _addresses[name]


def _up(name: str) -> str:
    """`scripts/servers.sh up name`; its address. Marks a server it started as started by a test
    run (the last run that uses it stops it)."""
    done = _script("up", name, 900)
    line = next(
        (x for x in done.stdout.splitlines() if x.startswith(f"{name} up ")), f"{name} up ?"
    )
    parts = line.split()
    if parts[3:4] == ["started"]:
        (SERVERS_DIR / name / "started-by-pytest").write_text(_user())
    return parts[2]


def prepare(name: str) -> None:
    """Install what server `name` needs (packages, jars) without starting it, once per run.

    For tests that run private instances of a server's binaries (to stop and start them at will).
    """
    with _lock:
        if name not in _prepared:
            _script("prepare", name, 1800)
            _prepared.add(name)


def stop_started() -> None:
    """At the end of the run: stop each server a test run started if no live run uses it.

    The servers are those this run registered for (under xdist: the controller, once its workers
    are done; a worker leaves them to it)."""
    if in_xdist_worker():
        return
    me = _user()
    with _lock:
        used = sorted(p.parent.parent.name for p in SERVERS_DIR.glob(f"*/users/{me}"))
        _release(used, me)
        _addresses.clear()


def release(name: str) -> None:
    """This run is done with server `name` before its end: stop it now if a test run started it
    and no other live run uses it (as the run's end would). For a server that one module of the
    run uses, e.g. the three idle Kafka brokers of `kafka-cluster`, which took ~9 CPU-s a minute
    of a 2-core machine for the rest of the run."""
    with _lock:
        _addresses.pop(name, None)
        _release([name], _user())


def _release(names: list[str], me: str | None) -> None:
    """Unregister `me` from servers `names` and stop those a test run started that no live run
    uses now (`SLUICE_KEEP_SERVERS=1`: keep them, as if started by hand)."""
    keep = os.environ.get("SLUICE_KEEP_SERVERS") == "1"
    for name in names:
        marker = SERVERS_DIR / name / "started-by-pytest"
        with _users_lock(name) as users:
            if me is not None:
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
            subprocess.run(["bash", str(SCRIPT), "down", name], capture_output=True, timeout=300)
            marker.unlink(missing_ok=True)


def _start_all(names: list[str]) -> int:
    """Bring `names` up in parallel (CI, before the tests); 0 if all came up. A server that fails
    here is reported and left to the tests, whose `ensure` tries again and fails naming it."""
    import concurrent.futures

    def up(name: str) -> str:
        started = time.monotonic()
        try:
            return f"{name} up {_up(name)} in {time.monotonic() - started:.0f} s"
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return f"{name} FAILED after {time.monotonic() - started:.0f} s: {e}"

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        results = list(pool.map(up, names))
    for line in results:
        print(f"servers: {line}", flush=True)
    return 0 if all(" FAILED " not in r for r in results) else 1


def main(argv: list[str]) -> int:
    """`start NAME...` or `release NAME...` (see the module's docstring)."""
    if len(argv) < 1 or argv[0] not in ("start", "release"):
        print("usage: python3 -m tests.servers start|release NAME...", file=sys.stderr)
        return 2
    if argv[0] == "start":
        return _start_all(argv[1:])
    _release(argv[1:], None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
