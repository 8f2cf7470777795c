"""The worker processes shared by end-to-end tests: `worker` (no REST security), for the tests
that do not restart it, and one per REST auth mode (`basic_worker`, `token_worker`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import secured
from tests.e2e.secured import SecuredWorker
from tests.e2e.worker_process import WorkerProcess


@pytest.fixture(scope="session")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    tmp = tmp_path_factory.mktemp("worker")
    # source lag probed every second (default 10 s), so that tests see it change quickly
    process = WorkerProcess(
        tmp, plugin_dir=tmp / "plugins", extra_conf={"metrics.source.lag.interval.ms": "1000"}
    )
    (tmp / "plugins").mkdir()
    process.start()
    yield process
    code = process.terminate()
    assert code == 0, f"worker exit code {code}:\n{process.log.read_text()[-3000:]}"


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def basic_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredWorker]:
    """The worker with `rest.auth=basic` over HTTPS (tests/e2e/secured.py), shared by the
    security, OpenAPI and console modules (one xdist group: tests/conftest.py)."""
    with secured.basic_worker(tmp_path_factory.mktemp("basic-worker")) as w:
        yield w


@pytest.fixture(scope="session")
def token_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredWorker]:
    """The worker with `rest.auth=token` (tests/e2e/secured.py), shared like `basic_worker`."""
    with secured.token_worker(tmp_path_factory.mktemp("token-worker")) as w:
        yield w
