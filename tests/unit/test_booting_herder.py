"""The REST API of a worker still booting (`sluice.runtime.herder.booting`): `GET /` answers, every
route that needs the herder answers 503 `worker.starting` with `Retry-After` on both faces, and
once the herder is handed over the same app forwards to it. `GET /health` (KIP-1017) says which,
without credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sluice.rest._auth import RestSecurity, add_credential
from sluice.rest.app import create_app
from sluice.runtime.herder import Starting
from sluice.runtime.herder.booting import BootingHerder


class _Herder:
    """What the routes below call of a real herder."""

    worker_id = "w1"

    def connectors(self) -> list[str]:
        return ["a", "b"]


def test_calls_before_the_herder_is_ready_raise_starting_then_forward() -> None:
    booting = BootingHerder("w1")
    assert booting.worker_id == "w1" and not booting.is_ready
    with pytest.raises(Starting) as raised:
        booting.connectors()
    assert raised.value.status == 503 and raised.value.code == "worker.starting"
    booting.ready(_Herder())  # type: ignore[arg-type]
    assert booting.is_ready and booting.connectors() == ["a", "b"]


@pytest.mark.parametrize(
    ("path", "code_field"), [("/v1/connectors", "error_code"), ("/connectors/list", "errorCode")]
)
def test_both_faces_answer_503_with_retry_after_while_starting(path: str, code_field: str) -> None:
    booting = BootingHerder("w1")
    client = TestClient(create_app(booting), raise_server_exceptions=False)  # type: ignore[arg-type]
    root = client.get("/")
    assert root.status_code == 200 and root.json()["worker_id"] == "w1"
    answer = client.get(path)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "2"
    body = answer.json()
    assert body[code_field] == 503 and body["code"] == "worker.starting"
    assert "the worker is starting" in body["message"]
    booting.ready(_Herder())  # type: ignore[arg-type]
    assert client.get("/v1/connectors").json() == ["a", "b"]


def test_health_says_starting_then_healthy_and_needs_no_credentials(tmp_path: Path) -> None:
    users = str(tmp_path / "users")
    add_credential(users, "ops", "admin", "pw")
    security = RestSecurity.from_properties({"rest.auth": "basic", "rest.auth.file": users})
    booting = BootingHerder("w1")
    client = TestClient(create_app(booting, security))  # type: ignore[arg-type]
    starting = client.get("/health")  # a probe sends no credentials
    assert starting.status_code == 503 and starting.headers["Retry-After"] == "2"
    assert starting.json() == {"status": "starting", "message": "the worker is still starting"}
    assert client.get("/v1/connectors").status_code == 401  # the rest still asks for them
    booting.ready(_Herder())  # type: ignore[arg-type]
    ready = client.get("/health")
    assert ready.status_code == 200
    assert ready.json() == {"status": "healthy", "message": "the worker is ready"}
