"""What each metric of `sluice.runtime.metrics.names` is made of, for one snapshot of a worker.

`MetricsSnapshot.take` reads the stores once per scrape into a plain snapshot (per connector: its
type, state, task states, counters, last progress, lags, push figures; per worker: the JVM heap
and, distributed, the rebalances); `report_of` turns it into the figures of the registered
metrics, the typed answer of `Herder.metrics`. The REST layer only writes them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sluice.engine.counting import BATCHES_TOTAL, RECORDS_TOTAL
from sluice.runtime.metrics.names import (
    BY_NAME,
    ERROR_COUNTERS,
    PUSH_COUNTERS,
    PUSH_GAUGES,
    REBALANCE,
    STATES,
)


@dataclass(frozen=True)
class Figure:
    """One value of a registered metric, under its labels' values (in the metric's order)."""

    metric: str
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class MetricsReport:
    """A worker's figures of one scrape, what `Herder.metrics` answers."""

    worker_id: str
    figures: tuple[Figure, ...]

    def of(self, metric: str) -> list[Figure]:
        """The figures of one metric (by its registered name)."""
        return [f for f in self.figures if f.metric == metric]

    def value(self, metric: str, *labels: str) -> float | None:
        """The value of one metric under these labels, None when it was not measured."""
        return next(
            (f.value for f in self.figures if (f.metric, f.labels) == (metric, labels)), None
        )


def report_of(snapshot: dict[str, Any]) -> MetricsReport:
    """The figures of a snapshot (`MetricsSnapshot.take`'s shape); each names a registered
    metric (KeyError naming it otherwise: a metric is added to the registry first)."""
    figures = tuple(_figures(snapshot))
    for figure in figures:
        if figure.metric not in BY_NAME:
            raise KeyError(f"{figure.metric}: not a metric of sluice.runtime.metrics.names")
    return MetricsReport(snapshot["worker"]["worker_id"], figures)


def _figures(snapshot: dict[str, Any]) -> Iterator[Figure]:
    connectors = snapshot["connectors"]
    for c in connectors:
        yield from _connector_figures(c)
    for state in STATES:
        yield Figure("connector-count", (state,), sum(1 for c in connectors if c["state"] == state))
        yield Figure("task-count", (state,), sum(c["tasks"].get(state, 0) for c in connectors))
    rebalance, jvm = snapshot["worker"].get("rebalance"), snapshot["worker"].get("jvm")
    if rebalance:  # a distributed worker's only
        yield from (Figure(m.name, (), rebalance[m.name]) for m in REBALANCE)
    if jvm:  # once read (cached for a second)
        yield from (
            Figure("jvm-heap-bytes", (a,), jvm[f"heap_{a}"]) for a in ("used", "committed", "max")
        )


def _connector_figures(c: dict[str, Any]) -> Iterator[Figure]:
    """One connector's figures: its records by direction, batch times, errors, lags, push
    figures and states (its tasks are partitions of one query: the figures are per connector)."""
    name, kind, counters = c["name"], c["type"], c["counters"]
    label = (name,)
    records = counters.get(RECORDS_TOTAL, 0)
    written = max(0, records - counters.get("total-records-skipped", 0))
    pushed = c.get("push") or {}
    totals = pushed.get("totals", {})
    for metric in ERROR_COUNTERS:
        # a push sink's delivery retries are retries too (its own loop, not the engine's)
        extra = totals.get("retried", 0) if metric.name == "total-retries" else 0
        yield Figure(metric.name, label, counters.get(metric.name, 0) + extra)
    if pushed:
        for key, metric in PUSH_COUNTERS.items():
            yield Figure(metric.name, label, totals.get(key, 0))
        for key, metric in PUSH_GAUGES.items():
            yield Figure(metric.name, label, pushed.get(key, 0))
    yield Figure("offset-commit-completion-total", label, counters.get(BATCHES_TOTAL, 0))
    yield Figure("offset-commit-skip-total", label, 0)
    progress = c["progress"] or {}
    rate_in = progress.get("input_rows_per_second", 0.0)
    rate_out = progress.get("processed_rows_per_second", 0.0)
    avg_ms, max_ms = progress.get("avg_batch_ms", 0), progress.get("max_batch_ms", 0)
    if kind == "source":
        yield Figure("source-record-poll-total", label, records)
        yield Figure("source-record-write-total", label, written)
        yield Figure("source-record-poll-rate", label, rate_in)
        yield Figure("source-record-write-rate", label, rate_out)
        yield Figure("poll-batch-avg-time-ms", label, avg_ms)
        yield Figure("poll-batch-max-time-ms", label, max_ms)
        for p in c.get("source_lag", ()):
            yield Figure(f"source-lag-{p['unit']}", (name, p["partition"]), p["lag"])
    elif kind == "sink":
        yield Figure("sink-record-read-total", label, records)
        yield Figure("sink-record-send-total", label, written)
        yield Figure("sink-record-read-rate", label, rate_in)
        yield Figure("sink-record-send-rate", label, rate_out)
        yield Figure("put-batch-avg-time-ms", label, avg_ms)
        yield Figure("put-batch-max-time-ms", label, max_ms)
        for q in c["lag"]:
            yield Figure("sink-record-lag", (name, q["topic"], str(q["queue"])), q["lag"])
        yield Figure("sink-record-lag-max", label, max((q["lag"] for q in c["lag"]), default=0))
    yield Figure("offset-commit-avg-time-ms", label, avg_ms)
    yield Figure("offset-commit-max-time-ms", label, max_ms)
    if progress:
        yield Figure("spark-query-input-rows", label, progress["num_input_rows"])
        yield Figure("spark-query-input-rows-per-second", label, rate_in)
        yield Figure("spark-query-processed-rows-per-second", label, rate_out)
        yield Figure("spark-query-batch-duration-ms", label, progress["batch_duration_ms"])
    if c.get("last_error_timestamp"):
        yield Figure("last-error-timestamp", label, c["last_error_timestamp"])
    for state in STATES:
        yield Figure("connector-state", (name, state), 1.0 if c["state"] == state else 0.0)
    for state, n in sorted(c["tasks"].items()):
        yield Figure("connector-task-count", (name, state), n)
