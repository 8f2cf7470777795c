"""The workers with REST security on, one per auth mode, shared by the modules that test security
(tests/e2e/conftest.py: `basic_worker`, `token_worker`, session-scoped).

`basic_worker` serves HTTPS with a certificate made here (openssl) and asks for basic credentials
(an admin and a read-only user); it enables the `env` and `file` config providers, confines file
connectors to `home/files` and leaves `/metrics` open. `token_worker` asks for a bearer token (an
admin's). Both turn the failed-login limit off (schemathesis tries wrong credentials on every
route). test_ops_security runs a worker of its own (providers, limits and timeouts of its own).
The OpenAPI conformance run (test_openapi_conformance) calls `/connectors/stop/all` on both, so the
modules that share them may not keep connectors from one test to the next.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.rest._auth import add_credential, new_token
from tests.e2e.worker_process import WorkerProcess

#: the basic worker's users: an admin and a read-only one
ADMIN = ("ops", "admin-Pw-1")
READER = ("viewer", "read-Pw-2")


@dataclass
class SecuredWorker:
    """A worker with `rest.auth` on, its folder and an admin's credentials."""

    worker: WorkerProcess
    auth: str  # "basic" | "token"
    home: Path  # users/tokens file, certificate, `files/` (file.allowed.dirs), `secrets/`
    headers: dict[str, str]  # an admin's Authorization header
    token: str = ""  # the admin's bearer token (token_worker)

    @property
    def url(self) -> str:
        return self.worker.url

    @property
    def cert(self) -> Path | None:
        return self.worker.tls_cert


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    return cert, key


@contextmanager
def _running(worker: WorkerProcess, env: dict[str, str] | None = None) -> Iterator[WorkerProcess]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (env or {}).items():
            mp.setenv(name, value)  # the worker inherits it
        worker.start()
    try:
        yield worker
    finally:
        code = worker.terminate()
        assert code == 0, worker.log.read_text(errors="replace")[-3000:]


@contextmanager
def basic_worker(home: Path) -> Iterator[SecuredWorker]:
    cert, key = certificate(home)
    users = home / "users"
    add_credential(str(users), ADMIN[0], "admin", ADMIN[1])
    add_credential(str(users), READER[0], "read-only", READER[1])
    (home / "files").mkdir()
    (home / "secrets").mkdir()
    worker = WorkerProcess(
        home / "worker",
        extra_conf={
            "config.providers": "env,file",
            "file.allowed.dirs": str(home / "files"),
            "rest.auth": "basic",
            "rest.auth.file": str(users),
            "rest.auth.metrics.open": "true",
            "rest.tls.cert": str(cert),
            "rest.tls.key": str(key),
            # schemathesis' ignored_auth check tries wrong credentials on every operation and
            # expects 401 each time, not the 429 of the failed-login limit
            "rest.auth.failures.per.minute": "0",
        },
        tls_cert=cert,
    )
    basic = base64.b64encode(":".join(ADMIN).encode()).decode()
    with _running(worker):
        yield SecuredWorker(worker, "basic", home, {"Authorization": f"Basic {basic}"})


@contextmanager
def token_worker(home: Path) -> Iterator[SecuredWorker]:
    token = new_token()
    tokens = home / "tokens"
    add_credential(str(tokens), "ci", "admin", token)
    worker = WorkerProcess(
        home / "worker",
        extra_conf={
            "rest.auth": "token",
            "rest.auth.file": str(tokens),
            "rest.auth.failures.per.minute": "0",  # as the basic worker's
        },
    )
    with _running(worker):
        yield SecuredWorker(
            worker, "token", home, {"Authorization": f"Bearer {token}"}, token=token
        )
