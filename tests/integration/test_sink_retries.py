"""errors.retry.*: a sink's RetriableException is retried with backoff, then delivered once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_until, whole_lines
from tests.integration.flaky_sinks import lines_in_topic

pytestmark = pytest.mark.spark


def _start(runner, tmp_path: Path, **extra: str) -> Path:
    out = tmp_path / "out.txt"
    lines_in_topic(runner, tmp_path / "in.txt", 50)
    runner.start(
        "dst",
        {
            "connector.class": "tests.integration.flaky_sinks.FlakySink",
            "path": str(out),
            "connect.topicnames": "t",
            **extra,
        },
    )
    return out


@pytest.mark.parametrize("stage", ["put", "flush"])
def test_three_retriable_failures_then_success_deliver_once(
    runner, tmp_path: Path, stage: str
) -> None:
    retry = {"errors.retry.timeout": "60000", "errors.retry.delay.max.ms": "1000"}
    out = _start(runner, tmp_path, **retry, **{"fail.in": stage})

    def delivered() -> list[str]:
        assert runner.running["dst"].failure() is None, runner.running["dst"].failure()
        return whole_lines(out)

    wait_until(lambda: len(delivered()) >= 50, 120, "50 delivered")
    wait_until(lambda: runner.counters.get("dst").get("total-retries") == 3, 30, "retries counted")
    assert delivered() == [f"r{i}" for i in range(50)]  # once each, in order


def test_without_retry_budget_the_task_fails_naming_the_cause(runner, tmp_path: Path) -> None:
    out = _start(
        runner, tmp_path, failures="-1"
    )  # always fails; errors.retry.timeout defaults to 0
    wait_until(lambda: runner.running["dst"].failure() is not None, 120, "the sink to fail")
    cause, _ = runner.running["dst"].failure()
    assert "failed after 0 retries" in cause
    assert "the target is briefly unavailable" in cause and "errors.retry.timeout=0" in cause
    assert not out.exists()
