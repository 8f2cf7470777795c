"""A new user's first commands: `make demo` installs only the runtime (no extras, no test tools)
and shows pip's progress; `make venv` / `make test` install everything; the demo refuses a port
that is taken, naming `SLUICE_DEMO_PORT`, before it starts anything.

The Makefile is read the way make reads it (`make -n`, which prints the commands a target would
run without running them) in a scratch copy of the checkout's Makefile and pyproject.toml.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.demo import PORT_VARIABLE, DemoError, demo_port

REPO = Path(__file__).resolve().parents[2]
PIP_INSTALL = re.compile(r"\S*pip install (.+)$")


def _dry_run(folder: Path, target: str) -> list[str]:
    """The commands `make <target>` would run in `folder`."""
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        [make, "-n", target], cwd=folder, capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _installs(commands: list[str]) -> list[str]:
    """The arguments of each `pip install` among `commands`."""
    return [m.group(1) for line in commands if (m := PIP_INSTALL.search(line.strip()))]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, tmp_path / name)
    return tmp_path


def _stamp(folder: Path, name: str) -> None:
    (folder / ".venv").mkdir(exist_ok=True)
    stamp = folder / ".venv" / name
    stamp.touch()
    later = (folder / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))


def test_make_demo_installs_the_runtime_alone_and_shows_pips_progress(checkout: Path) -> None:
    commands = _dry_run(checkout, "demo")
    assert _installs(commands) == ["--upgrade pip", "-e ."], commands
    assert not any("--quiet" in c or " -q" in c for c in commands), commands
    assert commands[-1] == ".venv/bin/python -m sluice.demo"


def test_make_venv_installs_every_extra_and_the_dev_set(checkout: Path) -> None:
    assert _installs(_dry_run(checkout, "venv")) == ["--upgrade pip", "-e '.[all,dev]'"]


def test_make_venv_after_make_demo_still_installs_the_dev_set(checkout: Path) -> None:
    _stamp(checkout, ".installed-runtime")  # what `make demo` leaves
    assert _dry_run(checkout, "demo") == [".venv/bin/python -m sluice.demo"]
    assert _installs(_dry_run(checkout, "venv")) == ["--upgrade pip", "-e '.[all,dev]'"]


def test_make_demo_reuses_a_venv_that_has_everything(checkout: Path) -> None:
    _stamp(checkout, ".installed")  # what `make venv` leaves
    assert _dry_run(checkout, "demo") == [".venv/bin/python -m sluice.demo"]


def test_the_demo_refuses_a_taken_port_naming_its_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(DemoError) as caught:
            demo_port({PORT_VARIABLE: str(port)})
    message = str(caught.value)
    assert message.startswith(f"port {port} is in use")
    assert f"{PORT_VARIABLE}={port + 10} make demo" in message
    with pytest.raises(DemoError, match=f"{PORT_VARIABLE}='80x' is not a port number"):
        demo_port({PORT_VARIABLE: "80x"})
    with pytest.raises(DemoError, match=f"{PORT_VARIABLE}='0' is not a port number"):
        demo_port({PORT_VARIABLE: "0"})


def test_python_m_sluice_demo_on_a_taken_port_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "sluice.demo"],
            cwd=tmp_path,
            env={**os.environ, PORT_VARIABLE: str(port)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"demo: port {port} is in use" in done.stderr
    assert PORT_VARIABLE in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".demo" / "worker.log").exists()  # no worker was started
