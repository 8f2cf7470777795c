"""A push sink's own counters on /metrics (`render` of a snapshot), and the snapshot's reading of
the push board: delivery retries count in `sluice_total_retries_total`, parked requests, dead
letters and what the tasks hold now have families of their own."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sluice.push import PushBoard
from sluice.rest.metrics import render
from sluice.runtime.metrics.figures import report_of
from sluice.runtime.metrics.snapshot import MetricsSnapshot
from sluice.runtime.stores import WorkerParts


def _connector(name: str, push: dict | None, retries: int = 0) -> dict:
    return {
        "name": name,
        "type": "sink",
        "state": "RUNNING",
        "tasks": {"RUNNING": 1},
        "counters": {"records-total": 10, "total-retries": retries},
        "progress": None,
        "lag": [],
        "source_lag": [],
        "last_error_timestamp": None,
        "push": push,
    }


def _samples(connectors: list[dict]) -> dict[tuple[str, str], float]:
    text = render(report_of({"worker": {"worker_id": "w1"}, "connectors": connectors})).decode()
    return {
        (s.name, s.labels.get("connector", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_push_counters_render_and_delivery_retries_count_as_retries() -> None:
    push = {
        "totals": {"succeeded": 2964, "retried": 1408, "parked": 50, "dead_lettered": 42},
        "in_flight": 3,
        "queued": 7,
        "waiting_retry": 2,
    }
    got = _samples([_connector("hook", push, retries=1), _connector("jdbc", None, retries=4)])
    assert got[("sluice_total_retries_total", "hook")] == 1409  # the engine's 1 + push's 1408
    assert got[("sluice_total_retries_total", "jdbc")] == 4
    assert got[("sluice_push_succeeded_total", "hook")] == 2964
    assert got[("sluice_push_parked_total", "hook")] == 50
    assert got[("sluice_push_dead_lettered_total", "hook")] == 42
    assert got[("sluice_push_failed_total", "hook")] == 0
    assert got[("sluice_push_in_flight", "hook")] == 3
    assert got[("sluice_push_queued", "hook")] == 7
    assert got[("sluice_push_waiting_retry", "hook")] == 2
    assert ("sluice_push_succeeded_total", "jdbc") not in got  # not a push sink


def test_snapshot_reads_the_push_board(tmp_path: Path) -> None:
    path = str(tmp_path / "push.sqlite")
    snapshot = MetricsSnapshot.__new__(MetricsSnapshot)
    snapshot.parts = WorkerParts(None, None, PushBoard(path))  # type: ignore[arg-type]
    assert snapshot._push("hook") is None  # no board yet
    board = PushBoard(path)
    board.report("hook", 0, {"active": 2, "queue_size": 5, "retry_queue_size": 1}, {"retried": 3})
    board.report("hook", 1, {"active": 1, "queue_size": 0, "retry_queue_size": 0}, {"parked": 2})
    assert snapshot._push("hook") == {
        "totals": {"retried": 3, "parked": 2},
        "in_flight": 3,
        "queued": 5,
        "waiting_retry": 1,
    }
    assert snapshot._push("other-sink") is None


def test_cli_push_table_says_why_there_are_no_totals() -> None:
    from rich.console import Console

    from sluice.cli._render import push_table

    def shown(body: dict) -> str:
        console = Console(width=200, record=True)
        console.print(push_table(body))
        return console.export_text()

    assert "no task has started" in shown({"totals": {}, "tasks": [], "settings": {}})
    waiting = shown({"totals": {}, "tasks": [{"task": 0, "active": 1}], "settings": {}})
    assert "have not settled a request" in waiting
    assert "succeeded=3" in shown({"totals": {"succeeded": 3}, "tasks": [], "settings": {}})
