"""`make demo` as a user runs it: lines arrive in the demo's sink, and Ctrl-C stops it cleanly.

The demo runs in a scratch copy of the project's Makefile and pyproject.toml whose `.venv` is a
link to this checkout's: the Makefile then finds its install stamp up to date and does not
reinstall (installing is what `make venv` does, before every test). `.demo/` lands in the copy,
and `SLUICE_DEMO_PORT` picks a free port, so a demo the developer runs is never disturbed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.e2e.worker_process import REPO, free_port

pytestmark = pytest.mark.slow


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:`port`, as `ss` shows it."""
    shown = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout
    match = re.search(r"pid=(\d+)", shown)
    return int(match.group(1)) if match else None


def _stop_everything(demo: subprocess.Popen, port: int) -> None:
    """After a failure too: the demo's worker runs in a session of its own, so killing the demo
    would leave it (and its JVM) running. Ctrl-C first, which stops it; kill what is left."""
    if demo.poll() is None:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(180)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(30)
    worker = _listener_pid(port)
    if worker is not None:  # its process group: the worker, its JVM and Python workers
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(worker), signal.SIGKILL)


def test_make_demo_streams_lines_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    venv = REPO / ".venv"
    stamp = venv / ".installed"
    assert stamp.exists() and Path(sys.executable).is_relative_to(venv), (
        "run the suite from the checkout's .venv (make venv)"
    )
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, tmp_path / name)
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    # the stamp must be newer than pyproject.toml, or make would reinstall into the shared venv
    before = stamp.stat().st_mtime - 1
    os.utime(tmp_path / "pyproject.toml", (before, before))

    port = free_port()
    out = tmp_path / "make-demo.out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS")}
    with open(out, "wb") as sink:
        # its own process group, the terminal's foreground group when a user types Ctrl-C
        demo = spawn(
            [make, "demo"],
            cwd=tmp_path,
            env={**env, "SLUICE_DEMO_PORT": str(port), "PYTHONUNBUFFERED": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    output_file = tmp_path / ".demo" / "output.txt"
    worker_log = tmp_path / ".demo" / "worker.log"

    def failed() -> bool:  # the demo prints the connectors' states every 5 s
        return "FAILED" in out.read_text(errors="replace")

    try:
        wait_until(
            lambda: _lines(output_file) >= 10 or demo.poll() is not None or failed(),
            300,
            "lines in the demo's sink file",
            every=0.5,
        )
        assert demo.poll() is None, out.read_text(errors="replace")
        assert not failed(), worker_log.read_text(errors="replace")[-4000:]
        # the demo's own report of the first lines (it looks every 5 s: the file may hold
        # them before it says so, and a Ctrl-C in between left the stage unsaid)
        wait_until(
            lambda: "first lines in" in out.read_text(errors="replace"),
            120,
            "the first-lines stage",
        )
        wait_until(lambda: "sink lines=" in out.read_text(errors="replace"), 60, "a status line")
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets SIGINT
        code = demo.wait(180)
        leftover = _listener_pid(port)  # before the clean-up below would kill it
    finally:
        _stop_everything(demo, port)
    text = out.read_text(errors="replace")
    print(text[-1500:])
    assert "pip install" not in text, "make demo reinstalled instead of reusing .venv"
    assert "Traceback" not in text and "make: ***" not in text, text[-3000:]
    # make re-raises the SIGINT it got once the demo (which caught it) exited with status 0;
    # a demo that failed would show as "make: *** [...] Error N" above
    assert code == -signal.SIGINT, (code, text[-3000:])
    assert "FAILED" not in text, text[-3000:]
    # it said what it waited for, in order, before the first lines
    stages = ["starting Spark…", "REST API up on", "connectors created after", "first micro-batch…"]
    at = [text.find(stage) for stage in [*stages, "first lines in"]]
    assert -1 not in at and at == sorted(at), text[:3000]
    assert "Stopping the worker…" in text and "Stopped. " in text
    delivered = _lines(output_file)
    assert f"Stopped. {delivered} lines in {output_file}" in text
    # what arrived is what the demo wrote, in order, line for line
    written = (tmp_path / ".demo" / "input.txt").read_bytes()
    assert delivered >= 10 and written.startswith(output_file.read_bytes())
    assert "héllo from sluice" in output_file.read_text(encoding="utf-8")
    # the worker got SIGTERM from the demo and shut down, not killed
    log = worker_log.read_text(errors="replace")
    assert log.rstrip().endswith("INFO sluice.worker: worker stopped"), log[-3000:]
    assert leftover is None, "the demo's worker still listens after the demo stopped"
