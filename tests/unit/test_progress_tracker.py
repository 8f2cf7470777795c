"""ProgressTracker reads Spark's progress as its JSON text (one py4j round trip per batch)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from sluice.runtime.metrics.progress import ProgressTracker, _JsonListener


class _Counters:
    def __init__(self) -> None:
        self.totals: dict[str, dict[str, int]] = defaultdict(dict)

    def add(self, name: str, amounts: dict[str, int]) -> None:
        for key, n in amounts.items():
            self.totals[name][key] = self.totals[name].get(key, 0) + n

    def get(self, name: str) -> dict[str, int]:
        return dict(self.totals[name])


class _JProgress:
    def __init__(self, progress: dict[str, Any]) -> None:
        self.text = json.dumps(progress)

    def json(self) -> str:
        return self.text


class _JEvent:
    def __init__(self, progress: dict[str, Any] | None = None, name: str = "") -> None:
        self._progress, self._name = progress, name

    def progress(self) -> _JProgress:
        assert self._progress is not None
        return _JProgress(self._progress)

    def name(self) -> str:
        return self._name


def _batch(batch_id: int, rows: int, ms: int, name: str = "source:orders") -> dict[str, Any]:
    # the fields of Spark's StreamingQueryProgress.json() the tracker reads, named as Spark does
    return {
        "name": name,
        "batchId": batch_id,
        "numInputRows": rows,
        "batchDuration": ms + 3,
        "durationMs": {"latestOffset": 1, "addBatch": ms - 5, "triggerExecution": ms},
        "sources": [{"description": "x", "startOffset": None}],
    }


def test_a_batch_adds_its_rows_and_an_idle_tick_keeps_the_last_batch() -> None:
    counters = _Counters()
    tracker = ProgressTracker(counters)
    listener = _JsonListener(tracker)
    listener.onQueryStarted(_JEvent(name="source:orders"))
    listener.onQueryProgress(_JEvent(_batch(0, 40, 200)))
    listener.onQueryProgress(_JEvent(_batch(1, 0, 2)))  # idle: figures stay the last batch's
    assert counters.get("orders") == {"records-total": 40, "batches-total": 1}
    progress = tracker.progress("orders")
    assert progress is not None
    assert (progress.batch_id, progress.num_input_rows, progress.batch_duration_ms) == (0, 40, 203)
    assert progress.processed_rows_per_second == 200.0
    assert progress.max_batch_ms == 200.0


def test_queries_that_are_not_connectors_and_bad_progress_are_ignored(caplog) -> None:
    counters = _Counters()
    tracker = ProgressTracker(counters)
    listener = _JsonListener(tracker)
    listener.onQueryProgress(_JEvent(_batch(0, 5, 10, name="adhoc")))
    listener.onQueryProgress(_JEvent({"name": "sink:s", "numInputRows": "many"}))
    assert tracker.progress("adhoc") is None and tracker.progress("s") is None
    assert counters.totals == {}
    assert "query progress not recorded" in caplog.text  # logged, never raised to Spark
