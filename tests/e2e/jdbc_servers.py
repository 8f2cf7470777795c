"""Private MariaDB and PostgreSQL servers that a test may stop and start.

The shared servers on 127.0.0.1:3306/5432 serve other tests (and other sessions on the machine):
stopping them would break those. The outage test therefore runs its own instances of the same
server binaries (the Debian packages that `scripts/servers.sh prepare` installs, as for the shared
servers), on their own ports and data directories under /tmp, and always removes them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.servers import prepare


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, up: bool, timeout: float = 60.0) -> None:
    def reachable() -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return (s.connect_ex(("127.0.0.1", port)) == 0) == up

    wait_until(reachable, timeout, f"port {port} to go {'up' if up else 'down'}")


def _need(path: str, what: str) -> str:
    found = shutil.which(path) or (path if os.path.exists(path) else None)
    if not found:
        pytest.fail(f"{what} ({path}) is not installed: the outage test runs a private instance")
    return found


class PrivateMariaDB:
    """A mariadbd of its own (no grant tables: any user, no password)."""

    def __init__(self) -> None:
        prepare("mariadb")
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-mariadb-"))
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        install = _need("mariadb-install-db", "MariaDB")
        subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={self.dir / 'data'}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )

    def start(self) -> None:
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - handed to the server
        self.proc = spawn(
            [
                _need("/usr/sbin/mariadbd", "MariaDB"),
                "--no-defaults",
                f"--datadir={self.dir / 'data'}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.dir / 'sock'}",
                f"--pid-file={self.dir / 'pid'}",
                "--user=root",
                "--skip-grant-tables",
                "--innodb-buffer-pool-size=64M",
                "--skip-log-bin",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a clean shutdown, as a service stop does
            self.proc.wait(60)
        _wait_port(self.port, up=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"jdbc:mysql://127.0.0.1:{self.port}/{database}"


class PrivatePostgres:
    """A PostgreSQL cluster of its own (trust authentication, user root)."""

    def __init__(self) -> None:
        prepare("postgres")
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            pytest.fail("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are missing")
        self.bin = Path(bins[-1])
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        self.port = _free_port()
        # The server refuses to run as root: run it as the postgres user then.
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.dir / "data"),
                "-U",
                "root",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )

    def _run(self, argv: list[str]) -> None:
        # a hang fails naming the command (subprocess.TimeoutExpired)
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=300)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c shared_buffers=32MB"
        )
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.dir / "data"),
                "-o",
                options,
                "-l",
                str(self.dir / "server.log"),
                "-w",
                "start",
            ]
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        # "fast": the server ends every session and shuts down cleanly, as a service stop does
        self._run(
            [str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop"]
        )
        _wait_port(self.port, up=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(
                [
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.dir / "data"),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]
            )
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"
