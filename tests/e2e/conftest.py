"""A worker process shared by the end-to-end tests that do not restart it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
