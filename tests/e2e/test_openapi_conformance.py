"""The OpenAPI document tells the truth: Schemathesis (`--checks all`, a bounded number of
examples, deterministic) against a worker of its own finds no failure, and a few properties are
checked directly (every error status documented with its body, no 422, `Allow` of a path served
by several routes, an offsets entry requires its `partition`).

The worker is this module's own: Schemathesis calls `/connectors/stop/all` and friends.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def own_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = WorkerProcess(tmp_path_factory.mktemp("openapi-worker"))
    process.start()
    yield process
    assert process.terminate() == 0, process.log.read_text()[-3000:]


def test_the_document_describes_errors_and_bodies(own_worker: WorkerProcess) -> None:
    doc = own_worker.get("/openapi.json").json()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)  # validation errors are 400s
            for status in ("400", "404", "500"):
                schema = responses[status]["content"]["application/json"]["schema"]
                face = "V1Error" if path.startswith("/v1") or path == "/" else "RocketMQError"
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


def test_schemathesis_finds_no_failure(own_worker: WorkerProcess) -> None:
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "--config-file",
            str(HERE / "schemathesis.toml"),
            "run",
            f"{own_worker.url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "10",
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
