"""The OpenAPI document tells the truth: Schemathesis (`--checks all`, a bounded number of
examples, deterministic) against a worker of its own finds no failure, and a few properties are
checked directly (every error status documented with its body, no 422, `Allow` of a path served
by several routes, an offsets entry requires its `partition`).

The worker is this module's own: Schemathesis calls `/connectors/stop/all` and friends. The run is
repeated against the shared workers with `rest.auth=basic` (over HTTPS) and `rest.auth=token`
(tests/e2e/secured.py; an admin's credentials given to Schemathesis, whose `ignored_auth` check
then also calls every route without them), with fewer examples; it runs after the other modules
that use them (tests/conftest.py orders the group).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.rest._auth import is_v1_face
from tests.e2e.secured import ADMIN, READER, SecuredWorker
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


@dataclass
class Conformance:
    """A worker of this module and the schemathesis arguments that authenticate to it."""

    worker: WorkerProcess
    auth: str  # "none" | "basic" | "token"
    credentials: list[str]  # schemathesis arguments
    headers: dict[str, str]  # an admin's, for httpx
    options: list[str]  # how much schemathesis generates


@pytest.fixture(scope="module")
def own_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = WorkerProcess(tmp_path_factory.mktemp("openapi-worker"))
    process.start()
    yield process
    assert process.terminate() == 0, process.log.read_text()[-3000:]


@pytest.fixture(scope="module", params=["none", "basic", "token"])
def conformance(request: pytest.FixtureRequest, own_worker: WorkerProcess) -> Conformance:
    """The run without auth on `own_worker`; with `rest.auth=basic|token`, the shared secured
    worker, an admin's credentials given to schemathesis and fewer cases (the same routes again,
    now behind the middleware: what changes is each route's 401/403)."""
    if request.param == "none":
        return Conformance(own_worker, "none", [], {}, ["--max-examples", "10"])
    secured: SecuredWorker = request.getfixturevalue(f"{request.param}_worker")
    if request.param == "basic":
        assert secured.cert is not None
        arguments = ["--auth", ":".join(ADMIN), "--tls-verify", str(secured.cert)]
    else:
        arguments = ["--header", f"Authorization: Bearer {secured.token}"]
    # every operation with a few examples (each also tried without credentials by the
    # ignored_auth check); the coverage phase's many cases add nothing auth does not
    options = ["--max-examples", "3", "--phases", "examples,fuzzing"]
    return Conformance(secured.worker, request.param, arguments, secured.headers, options)


def test_the_document_describes_errors_and_bodies(own_worker: WorkerProcess) -> None:
    doc = own_worker.get("/openapi.json").json()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)  # validation errors are 400s
            for status in ("400", "404", "500"):
                schema = responses[status]["content"]["application/json"]["schema"]
                face = "V1Error" if is_v1_face(path) else "RocketMQError"
                assert schema == {"$ref": f"#/components/schemas/{face}"}, (method, path)
    entry = doc["components"]["schemas"]["OffsetEntry"]
    assert set(entry["required"]) == {"partition", "offset"}
    config = doc["paths"]["/connectors/{name}"]["post"]["requestBody"]["content"]
    assert config["application/json"]["schema"]["required"] == ["connector.class"]

    # a path served by several routes allows all their methods
    options = own_worker.request("OPTIONS", "/v1/connectors/x")
    assert options.status_code == 405 and options.json()["error_code"] == 405
    assert options.headers["allow"] == "DELETE, GET, PUT"
    assert set(doc["paths"]["/v1/connectors/{name}"]) == {"delete", "get", "put"}


def test_schemathesis_finds_no_failure(conformance: Conformance) -> None:
    worker = conformance.worker
    doc = worker.get("/openapi.json", headers=conformance.headers).json()
    if conformance.auth != "none":
        # the document says what the middleware answers: 401 on every route, 403 on mutations
        scheme = "basic" if conformance.auth == "basic" else "bearer"
        assert doc["components"]["securitySchemes"][f"{conformance.auth}"]["scheme"] == scheme
        assert doc["security"] == [{conformance.auth: []}]
        create = doc["paths"]["/v1/connectors"]["post"]["responses"]
        listing = doc["paths"]["/v1/connectors"]["get"]["responses"]
        assert {"401", "403"} <= set(create) and {"401", "403"} <= set(listing)  # 403: a Host
        assert worker.get("/v1/connectors").status_code == 401
        if conformance.auth == "basic":
            body = {"name": "x", "config": {"connector.class": "FileSinkConnector"}}
            refused = worker.request("POST", "/v1/connectors", json=body, auth=READER)
            assert refused.status_code == 403, refused.text
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "--config-file",
            str(HERE / "schemathesis.toml"),
            "run",
            f"{worker.url}/openapi.json",
            *conformance.credentials,
            "--checks",
            "all",
            *conformance.options,
            "--generation-deterministic",
            "--request-timeout=30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    # every generated case passed (not merely "no crash": a skipped phase would show here)
    assert re.search(r"(\d+) generated, \1 passed", run.stdout), run.stdout[-3000:]
