"""Shared fixtures: one quiet local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Spark's Python workers import connector classes defined in test modules: let them find `tests`.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p
)


def wait_until(
    predicate: Callable[[], object], timeout: float = 120.0, what: str = "", every: float = 0.1
) -> None:
    """Wait for a condition (not a fixed sleep), checking it every `every` seconds (less often
    when checking costs, e.g. a database query); fail with `what` if it never holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    assert predicate(), f"timed out after {timeout}s waiting for {what or predicate}"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from sluice.engine.session import build_session

    session = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    yield session
    session.stop()


@pytest.fixture
def runner(spark: object, tmp_path: object) -> Iterator[object]:
    from sluice.runtime.runner import ConnectorRunner

    r = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=100)
    yield r
    r.close()


@pytest.fixture(autouse=True)
def _rocketmq_broker(request: pytest.FixtureRequest) -> None:
    """Tests marked `rocketmq` get the test broker (scripts/servers.sh up rocketmq) first."""
    if request.node.get_closest_marker("rocketmq") is not None:
        from tests.integration.bus_helpers import rocketmq_namesrv

        rocketmq_namesrv()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.servers import stop_started

    stop_started()
