"""A query runner's bus maintenance (topic retention, orphaned staged segments) runs on a thread
the composition root starts (`start_maintenance`), not one its constructor starts, and ends with
`close`."""

from __future__ import annotations

import threading
from pathlib import Path

from sluice.runtime.runner import ConnectorRunner
from tests.conftest import wait_until

NAME = "sluice-bus-maintenance"


def _maintenance_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == NAME]


def test_maintenance_runs_only_once_started_and_stops_with_the_runner(
    spark: object, tmp_path: Path
) -> None:
    before = len(_maintenance_threads())
    runner = ConnectorRunner(spark, tmp_path / "store")
    assert len(_maintenance_threads()) == before  # the constructor starts no thread
    rounds: list[dict[str, int]] = []
    maintain = runner.maintain
    runner.maintain = lambda: rounds.append(maintain()) or rounds[-1]  # type: ignore[method-assign]
    runner.start_maintenance(interval_s=0.05)
    wait_until(lambda: len(rounds) >= 2, 30, "two maintenance rounds")
    runner.close()
    wait_until(lambda: len(_maintenance_threads()) == before, 30, "the maintenance thread ended")
