"""tests/servers.py between two pytest runs sharing a server: the last live user stops what a run
started; a server started by hand is left alone; under pytest-xdist the controlling process, not a
worker, stops what the run started; CI's background start (`python3 -m tests.servers start`) hands
its servers to the run that uses them, and `release` stops one nobody used. On NATS (the quickest
to start), in a servers folder and on a port of the test's own, so that the machine's servers are
not touched."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "servers.sh"

# A stand-in for an xdist run's controller: its one worker (RUN, with the variables xdist and
# tests/conftest.py give a worker) ensures the server and ends; the controller stops what the run
# started when told to (a line on stdin).
CONTROLLER = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
os.environ["SLUICE_SERVERS_USER"] = str(os.getpid())
from tests.servers import stop_started
worker = subprocess.Popen(
    [sys.executable, "-c", sys.argv[2], sys.argv[1]],
    env={**os.environ, "PYTEST_XDIST_WORKER": "gw0"},
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
print(worker.stdout.readline().strip(), flush=True)
print(worker.communicate("\\n", timeout=120)[0].strip(), flush=True)
sys.stdin.readline()
stop_started()
print("controller stopped", flush=True)
"""

# A stand-in for one pytest run: ensure() on start, stop_started() when told to (a line on stdin).
RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.servers import ensure, stop_started
print(ensure("nats"), flush=True)
sys.stdin.readline()
stop_started()
print("stopped", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "SLUICE_SERVERS_DIR": str(tmp_path), "SLUICE_NATS_PORT": str(_free_port())}
    # the stand-in runs are runs of their own, not workers of this pytest run (under xdist)
    for name in ("SLUICE_KEEP_SERVERS", "PYTEST_XDIST_WORKER", "SLUICE_SERVERS_USER"):
        env.pop(name, None)
    yield env
    subprocess.run(["bash", str(SCRIPT), "down", "nats"], env=env, capture_output=True, timeout=60)


def _start_run(env: dict[str, str]) -> subprocess.Popen[str]:
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(ROOT)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    assert run.stdout.readline().strip() == f"127.0.0.1:{env['SLUICE_NATS_PORT']}"
    return run


def _finish(run: subprocess.Popen[str]) -> None:
    out, _ = run.communicate("\n", timeout=120)
    assert out.strip() == "stopped"
    assert run.returncode == 0


def _up(env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["bash", str(SCRIPT), "status", "nats"], env=env, capture_output=True, timeout=60
    )
    return done.returncode == 0


def test_the_last_live_user_stops_what_a_run_started(env: dict[str, str]) -> None:
    first = _start_run(env)  # starts it
    second = _start_run(env)  # finds it running
    _finish(first)
    assert _up(env), "stopped while another run used it"
    _finish(second)
    assert not _up(env), "the last user did not stop what a run started"


def test_a_killed_run_does_not_keep_the_server_in_use(env: dict[str, str]) -> None:
    killed = _start_run(env)
    killed.kill()
    killed.wait(30)
    _finish(_start_run(env))
    assert not _up(env)


def test_a_server_started_by_hand_is_left_up(env: dict[str, str]) -> None:
    subprocess.run(
        ["bash", str(SCRIPT), "up", "nats"], env=env, check=True, capture_output=True, timeout=300
    )
    _finish(_start_run(env))
    assert _up(env)


def test_up_by_hand_keeps_a_server_a_run_started(env: dict[str, str]) -> None:
    run = _start_run(env)  # starts it
    subprocess.run(
        ["bash", str(SCRIPT), "up", "nats"], env=env, check=True, capture_output=True, timeout=300
    )
    _finish(run)
    assert _up(env)


def test_kept_servers_stay_up(env: dict[str, str]) -> None:
    _finish(_start_run({**env, "SLUICE_KEEP_SERVERS": "1"}))
    assert _up(env)
    _finish(_start_run(env))  # kept = as if started by hand
    assert _up(env)


def test_under_xdist_the_controller_stops_what_its_workers_started(env: dict[str, str]) -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(ROOT), RUN],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    assert run.stdout.readline().strip() == f"127.0.0.1:{env['SLUICE_NATS_PORT']}"
    assert run.stdout.readline().strip() == "stopped"  # the worker ended ...
    assert _up(env), "a worker stopped a server its run still uses"  # ... and left it
    out, _ = run.communicate("\n", timeout=120)
    assert out.strip() == "controller stopped" and run.returncode == 0
    assert not _up(env), "the controller did not stop what its run started"


def test_a_background_start_is_stopped_by_the_run_or_released(env: dict[str, str]) -> None:
    def servers(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.servers", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    started = servers("start", "nats")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith("servers: nats up 127.0.0.1:"), started.stdout
    _finish(_start_run(env))  # the run that used it stops it
    assert not _up(env)
    assert servers("start", "nats").returncode == 0
    assert servers("release", "nats").returncode == 0  # nobody used it
    assert not _up(env)
    subprocess.run(
        ["bash", str(SCRIPT), "up", "nats"], env=env, check=True, capture_output=True, timeout=300
    )
    assert servers("release", "nats").returncode == 0  # started by hand: left up
    assert _up(env)
