"""`GET /metrics`: the worker's metrics in Prometheus' text format (prometheus-client).

Names follow Kafka Connect's metric groups (KIP-196, KIP-475) and RocketMQ Connect's, written the
Prometheus way (`source-record-poll-total` -> `sluice_source_record_poll_total`), with a
`connector` label (tasks are partitions of one Spark query, so totals are per connector) and
`topic`/`queue` labels for sink lag and a `partition` label for source lag. Every scrape asks the
herder for one snapshot (`Herder.metrics`, one read per store); only the JVM heap (1 s) and the
source lag (probed in the background) are cached between scrapes. docs/operations.md lists every
metric and where it comes from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from sluice.rest._common import herder_of
from sluice.rest._routes import GuardedRoute
from sluice.runtime.source_lag import UNITS

router = APIRouter(tags=["metrics"], route_class=GuardedRoute)

#: error counters the tasks add (sluice.engine.errors), as Kafka Connect names them
_ERROR_COUNTERS = (
    ("total-record-failures", "record processing failures, retries included"),
    ("total-record-errors", "records that failed after every retry"),
    ("total-records-skipped", "records skipped (errors.tolerance=all)"),
    ("total-retries", "retried operations"),
    ("total-errors-logged", "errors written to the log (errors.log.enable)"),
    ("deadletterqueue-produce-requests", "records sent to the dead-letter topic"),
    ("deadletterqueue-produce-failures", "dead-letter writes that failed"),
)
#: a push sink's own counters (`GET /v1/connectors/{name}/push` totals), per connector
_PUSH_COUNTERS = (
    ("succeeded", "requests the target accepted"),
    ("failed", "failed attempts (each retry of a request counts)"),
    ("retried", "attempts after a request's first"),
    ("parked", "requests written to the retry topic to try later"),
    ("dead-lettered", "records given up on (dead-letter topic)"),
    ("timeouts", "attempts that timed out"),
)
_PUSH_GAUGES = (
    ("in-flight", "requests the sink's tasks are sending now"),
    ("queued", "requests waiting for a free connection"),
    ("waiting-retry", "requests waiting for their next attempt in memory"),
)
_STATES = ("RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED", "RESTARTING", "DESTROYED")


def _name(kafka_name: str) -> str:
    return "sluice_" + kafka_name.replace("-", "_")


class _Snapshot:
    """A prometheus-client collector over one `Herder.metrics()` snapshot."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        connectors = self.snapshot["connectors"]
        worker = self.snapshot["worker"]

        def counter(kafka_name: str, doc: str, labels: tuple[str, ...] = ("connector",)):
            return CounterMetricFamily(_name(kafka_name).removesuffix("_total"), doc, labels=labels)

        def gauge(kafka_name: str, doc: str, labels: tuple[str, ...] = ("connector",)):
            return GaugeMetricFamily(_name(kafka_name), doc, labels=labels)

        families: dict[str, Any] = {
            "source-record-poll-total": counter(
                "source-record-poll-total", "records polled by a source connector's tasks"
            ),
            "source-record-write-total": counter(
                "source-record-write-total",
                "records a source wrote to its topic (polled - skipped)",
            ),
            "sink-record-read-total": counter(
                "sink-record-read-total", "records a sink connector read from its topics"
            ),
            "sink-record-send-total": counter(
                "sink-record-send-total", "records put to the sink (read - skipped)"
            ),
            "offset-commit-completion-total": counter(
                "offset-commit-completion-total", "micro-batches committed (positions included)"
            ),
            "offset-commit-skip-total": counter(
                "offset-commit-skip-total", "commits skipped (sluice commits every micro-batch)"
            ),
            "source-record-poll-rate": gauge("source-record-poll-rate", "records/s, last batch"),
            "source-record-write-rate": gauge("source-record-write-rate", "records/s, last batch"),
            "sink-record-read-rate": gauge("sink-record-read-rate", "records/s, last batch"),
            "sink-record-send-rate": gauge("sink-record-send-rate", "records/s, last batch"),
            "poll-batch-avg-time-ms": gauge("poll-batch-avg-time-ms", "recent batches, ms"),
            "poll-batch-max-time-ms": gauge("poll-batch-max-time-ms", "recent batches, ms"),
            "put-batch-avg-time-ms": gauge("put-batch-avg-time-ms", "recent batches, ms"),
            "put-batch-max-time-ms": gauge("put-batch-max-time-ms", "recent batches, ms"),
            "offset-commit-avg-time-ms": gauge(
                "offset-commit-avg-time-ms", "recent batches (commit included), ms"
            ),
            "offset-commit-max-time-ms": gauge(
                "offset-commit-max-time-ms", "recent batches (commit included), ms"
            ),
            "sink-record-lag-max": gauge("sink-record-lag-max", "largest lag of a sink's queues"),
            "spark-query-input-rows": gauge(
                "spark-query-input-rows", "numInputRows of the query's last micro-batch"
            ),
            "spark-query-input-rows-per-second": gauge(
                "spark-query-input-rows-per-second", "inputRowsPerSecond of the last batch"
            ),
            "spark-query-processed-rows-per-second": gauge(
                "spark-query-processed-rows-per-second", "processedRowsPerSecond of the last batch"
            ),
            "spark-query-batch-duration-ms": gauge(
                "spark-query-batch-duration-ms", "batchDuration of the last batch"
            ),
        }
        errors = {name: counter(name, doc) for name, doc in _ERROR_COUNTERS}
        last_error = gauge(
            "last-error-timestamp",
            "unix time the connector's query last failed (FAILED, or restarted automatically)",
        )
        lag = gauge(
            "sink-record-lag", "end offset - committed position", ("connector", "topic", "queue")
        )
        # one family per unit, as Prometheus wants: bytes (files, change logs), records (rows…)
        source_lag = {
            unit: gauge(
                f"source-lag-{unit}",
                f"{unit} of the source's data after its committed position (probed in the "
                "background every metrics.source.lag.interval.ms)",
                ("connector", "partition"),
            )
            for unit in UNITS
        }
        state = gauge(
            "connector-state", "1 for the connector's current state", ("connector", "state")
        )
        task_count = gauge(
            "connector-task-count", "the connector's tasks by state", ("connector", "state")
        )
        push = {name: counter(f"push-{name}", doc) for name, doc in _PUSH_COUNTERS}
        push_now = {name: gauge(f"push-{name}", doc) for name, doc in _PUSH_GAUGES}
        for c in connectors:
            name, kind, counters = c["name"], c["type"], c["counters"]
            label = [name]
            records = counters.get("records-total", 0)
            skipped = counters.get("total-records-skipped", 0)
            pushed = c.get("push") or {}
            totals = pushed.get("totals", {})
            for key, _doc in _ERROR_COUNTERS:
                # a push sink's delivery retries are retries too (its own loop, not the engine's)
                extra = totals.get("retried", 0) if key == "total-retries" else 0
                errors[key].add_metric(label, counters.get(key, 0) + extra)
            if pushed:
                for key, _doc in _PUSH_COUNTERS:
                    push[key].add_metric(label, totals.get(key.replace("-", "_"), 0))
                for key, _doc in _PUSH_GAUGES:
                    push_now[key].add_metric(label, pushed.get(key.replace("-", "_"), 0))
            batches = counters.get("batches-total", 0)
            families["offset-commit-completion-total"].add_metric(label, batches)
            families["offset-commit-skip-total"].add_metric(label, 0)
            progress = c["progress"] or {}
            rate_in = progress.get("input_rows_per_second", 0.0)
            rate_out = progress.get("processed_rows_per_second", 0.0)
            if kind == "source":
                families["source-record-poll-total"].add_metric(label, records)
                families["source-record-write-total"].add_metric(label, max(0, records - skipped))
                families["source-record-poll-rate"].add_metric(label, rate_in)
                families["source-record-write-rate"].add_metric(label, rate_out)
                families["poll-batch-avg-time-ms"].add_metric(
                    label, progress.get("avg_batch_ms", 0)
                )
                families["poll-batch-max-time-ms"].add_metric(
                    label, progress.get("max_batch_ms", 0)
                )
                for p in c.get("source_lag", ()):
                    source_lag[p["unit"]].add_metric([name, p["partition"]], p["lag"])
            elif kind == "sink":
                families["sink-record-read-total"].add_metric(label, records)
                families["sink-record-send-total"].add_metric(label, max(0, records - skipped))
                families["sink-record-read-rate"].add_metric(label, rate_in)
                families["sink-record-send-rate"].add_metric(label, rate_out)
                families["put-batch-avg-time-ms"].add_metric(label, progress.get("avg_batch_ms", 0))
                families["put-batch-max-time-ms"].add_metric(label, progress.get("max_batch_ms", 0))
                lags = c["lag"]
                for q in lags:
                    lag.add_metric([name, q["topic"], str(q["queue"])], q["lag"])
                families["sink-record-lag-max"].add_metric(
                    label, max((q["lag"] for q in lags), default=0)
                )
            families["offset-commit-avg-time-ms"].add_metric(label, progress.get("avg_batch_ms", 0))
            families["offset-commit-max-time-ms"].add_metric(label, progress.get("max_batch_ms", 0))
            if progress:
                families["spark-query-input-rows"].add_metric(label, progress["num_input_rows"])
                families["spark-query-input-rows-per-second"].add_metric(label, rate_in)
                families["spark-query-processed-rows-per-second"].add_metric(label, rate_out)
                families["spark-query-batch-duration-ms"].add_metric(
                    label, progress["batch_duration_ms"]
                )
            if c.get("last_error_timestamp"):
                last_error.add_metric(label, c["last_error_timestamp"])
            for s in _STATES:
                state.add_metric([name, s], 1.0 if c["state"] == s else 0.0)
            for s, n in sorted(c["tasks"].items()):
                task_count.add_metric([name, s], n)
        yield from families.values()
        yield from errors.values()
        yield from (last_error, lag, *source_lag.values(), state, task_count)
        yield from push.values()
        yield from push_now.values()
        # worker: connectors and tasks by state (Kafka Connect's connect-worker-metrics)
        by_state = gauge("connector-count", "connectors of this worker by state", ("state",))
        tasks_by_state = gauge("task-count", "tasks of this worker by state", ("state",))
        for s in _STATES:
            by_state.add_metric([s], sum(1 for c in connectors if c["state"] == s))
            tasks_by_state.add_metric([s], sum(c["tasks"].get(s, 0) for c in connectors))
        yield by_state
        yield tasks_by_state
        yield from _rebalance_families(worker.get("rebalance"))
        jvm = worker.get("jvm") or {}
        if jvm:
            heap = GaugeMetricFamily(
                "sluice_jvm_heap_bytes", "Spark driver JVM heap", labels=["area"]
            )
            for area in ("used", "committed", "max"):
                heap.add_metric([area], jvm[f"heap_{area}"])
            yield heap


#: Kafka Connect's connect-worker-rebalance-metrics (distributed mode only)
_REBALANCE = (
    ("completed-rebalances-total", "rebalances this worker completed"),
    ("rebalancing", "1 while this worker is applying a new allocation"),
    ("epoch", "allocations this worker has begun to apply since it started"),
    ("time-since-last-rebalance-ms", "ms since this worker completed its last rebalance"),
    ("rebalance-avg-time-ms", "average time this worker took to apply an allocation"),
    ("rebalance-max-time-ms", "longest time this worker took to apply an allocation"),
)


def _rebalance_families(figures: dict[str, float] | None) -> Iterator[Metric]:
    """The worker rebalance metrics of a distributed worker (none standalone)."""
    if not figures:
        return
    for kafka_name, doc in _REBALANCE:
        if kafka_name.endswith("-total"):
            family: Metric = CounterMetricFamily(_name(kafka_name).removesuffix("_total"), doc)
        else:
            family = GaugeMetricFamily(_name(kafka_name), doc)
        family.add_metric([], figures[kafka_name])
        yield family


def render(snapshot: dict[str, Any]) -> bytes:
    """The Prometheus text of one snapshot, plus this process's RSS, CPU and open files."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(snapshot))  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    return generate_latest(registry)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus text format (version 0.0.4)."""
    snapshot = await run_in_threadpool(herder_of(request).metrics)
    return Response(render(snapshot), media_type=CONTENT_TYPE_LATEST)
