"""Kafka Connect's worker rebalance metrics of a distributed worker, as `/metrics` renders them
(the real figures after a kill -9 are checked in tests/e2e/test_distributed.py)."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from sluice.rest.metrics import render
from sluice.runtime.herder.distributed import Rebalances
from sluice.runtime.metrics.figures import report_of


def _samples(rebalance: dict[str, float] | None) -> dict[str, float]:
    worker: dict = {"worker_id": "w1"}
    if rebalance is not None:
        worker["rebalance"] = rebalance
    text = render(report_of({"worker": worker, "connectors": []})).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.startswith("process_")
    }


def test_rebalances_count_time_and_render_with_kafka_connects_names() -> None:
    r = Rebalances()
    fresh = _samples(r.snapshot())
    assert fresh["sluice_completed_rebalances_total"] == 0 and fresh["sluice_epoch"] == 0
    assert math.isinf(fresh["sluice_time_since_last_rebalance_ms"])  # none yet, as in Kafka
    r.end()  # a round that applied no new allocation is no rebalance
    r.begin()
    assert _samples(r.snapshot())["sluice_rebalancing"] == 1
    r.end()
    r.begin()
    after = _samples(r.snapshot())
    assert after["sluice_completed_rebalances_total"] == 1
    assert after["sluice_epoch"] == 2 and after["sluice_rebalancing"] == 1
    assert 0 <= after["sluice_time_since_last_rebalance_ms"] < 60_000
    assert 0 <= after["sluice_rebalance_avg_time_ms"] == after["sluice_rebalance_max_time_ms"]
    assert not any("rebalanc" in n or "epoch" in n for n in _samples(None))  # standalone
