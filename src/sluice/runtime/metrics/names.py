"""Every metric a worker exposes, in one table: its name, kind, labels and meaning.

Names are Kafka Connect's (its metric groups of KIP-196 and KIP-475) or RocketMQ Connect's,
spelled as there (`source-record-poll-total`); `GET /metrics` writes them the Prometheus way
(`sluice_source_record_poll_total`). A connector's tasks are the partitions of one Spark query, so
per-connector figures carry a `connector` label rather than a task's. What each figure is made
of is `sluice.runtime.metrics.figures`; docs/operations.md lists them for users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sluice.runtime.metrics.source_lag import UNITS

_CONNECTOR = ("connector",)


@dataclass(frozen=True)
class Metric:
    """One metric: `name` as Kafka Connect spells it, whether it only grows (`counter`) or is a
    reading (`gauge`), what it means, the labels of its figures, and whether it is shown when no
    figure has been measured (a distributed worker's rebalances, the JVM's heap once read)."""

    name: str
    kind: Literal["counter", "gauge"]
    doc: str
    labels: tuple[str, ...] = _CONNECTOR
    always: bool = True

    @property
    def exposed_name(self) -> str:
        """The Prometheus name of its family (a counter's `_total` is added by the exposition)."""
        name = "sluice_" + self.name.replace("-", "_")
        return name.removesuffix("_total") if self.kind == "counter" else name


def _counter(name: str, doc: str, labels: tuple[str, ...] = _CONNECTOR) -> Metric:
    return Metric(name, "counter", doc, labels)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = _CONNECTOR) -> Metric:
    return Metric(name, "gauge", doc, labels)


#: error counters the tasks add (`sluice.engine.errors`), named as the counters store keeps them
ERROR_COUNTERS = (
    _counter("total-record-failures", "record processing failures, retries included"),
    _counter("total-record-errors", "records that failed after every retry"),
    _counter("total-records-skipped", "records skipped (errors.tolerance=all)"),
    _counter("total-retries", "retried operations"),
    _counter("total-errors-logged", "errors written to the log (errors.log.enable)"),
    _counter("deadletterqueue-produce-requests", "records sent to the dead-letter topic"),
    _counter("deadletterqueue-produce-failures", "dead-letter writes that failed"),
)

#: a push sink's own totals (`GET /v1/connectors/{name}/push`), by the key it reports them under
PUSH_COUNTERS = {
    "succeeded": _counter("push-succeeded", "requests the target accepted"),
    "failed": _counter("push-failed", "failed attempts (each retry of a request counts)"),
    "retried": _counter("push-retried", "attempts after a request's first"),
    "parked": _counter("push-parked", "requests written to the retry topic to try later"),
    "dead_lettered": _counter("push-dead-lettered", "records given up on (dead-letter topic)"),
    "timeouts": _counter("push-timeouts", "attempts that timed out"),
}
#: what a push sink's tasks hold now, by the key of the snapshot's push entry
PUSH_GAUGES = {
    "in_flight": _gauge("push-in-flight", "requests the sink's tasks are sending now"),
    "queued": _gauge("push-queued", "requests waiting for a free connection"),
    "waiting_retry": _gauge(
        "push-waiting-retry", "requests waiting for their next attempt in memory"
    ),
}

#: Kafka Connect's connect-worker-rebalance-metrics (a distributed worker's only)
REBALANCE = tuple(
    Metric(name, kind, doc, (), always=False)
    for name, kind, doc in (
        ("completed-rebalances-total", "counter", "rebalances this worker completed"),
        ("rebalancing", "gauge", "1 while this worker is applying a new allocation"),
        ("epoch", "gauge", "allocations this worker has begun to apply since it started"),
        (
            "time-since-last-rebalance-ms",
            "gauge",
            "ms since this worker completed its last rebalance",
        ),
        ("rebalance-avg-time-ms", "gauge", "average time this worker took to apply an allocation"),
        ("rebalance-max-time-ms", "gauge", "longest time this worker took to apply an allocation"),
    )
)

#: the states a connector or task is counted under
STATES = ("RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED", "RESTARTING", "DESTROYED")

#: every metric, in the order `GET /metrics` writes them
METRICS: tuple[Metric, ...] = (
    _counter("source-record-poll-total", "records polled by a source connector's tasks"),
    _counter("source-record-write-total", "records a source wrote to its topic (polled - skipped)"),
    _counter("sink-record-read-total", "records a sink connector read from its topics"),
    _counter("sink-record-send-total", "records put to the sink (read - skipped)"),
    _counter("offset-commit-completion-total", "micro-batches committed (positions included)"),
    _counter("offset-commit-skip-total", "commits skipped (sluice commits every micro-batch)"),
    _gauge("source-record-poll-rate", "records/s, last batch"),
    _gauge("source-record-write-rate", "records/s, last batch"),
    _gauge("sink-record-read-rate", "records/s, last batch"),
    _gauge("sink-record-send-rate", "records/s, last batch"),
    _gauge("poll-batch-avg-time-ms", "recent batches, ms"),
    _gauge("poll-batch-max-time-ms", "recent batches, ms"),
    _gauge("put-batch-avg-time-ms", "recent batches, ms"),
    _gauge("put-batch-max-time-ms", "recent batches, ms"),
    _gauge("offset-commit-avg-time-ms", "recent batches (commit included), ms"),
    _gauge("offset-commit-max-time-ms", "recent batches (commit included), ms"),
    _gauge("sink-record-lag-max", "largest lag of a sink's queues"),
    _gauge("spark-query-input-rows", "numInputRows of the query's last micro-batch"),
    _gauge("spark-query-input-rows-per-second", "inputRowsPerSecond of the last batch"),
    _gauge("spark-query-processed-rows-per-second", "processedRowsPerSecond of the last batch"),
    _gauge("spark-query-batch-duration-ms", "batchDuration of the last batch"),
    *ERROR_COUNTERS,
    _gauge(
        "last-error-timestamp",
        "unix time the connector's query last failed (FAILED, or restarted automatically)",
    ),
    _gauge("sink-record-lag", "end offset - committed position", ("connector", "topic", "queue")),
    # one family per unit, as Prometheus wants: bytes (files, change logs), records (rows…)
    *(
        _gauge(
            f"source-lag-{unit}",
            f"{unit} of the source's data after its committed position (probed in the "
            "background every metrics.source.lag.interval.ms)",
            ("connector", "partition"),
        )
        for unit in UNITS
    ),
    _gauge("connector-state", "1 for the connector's current state", ("connector", "state")),
    _gauge("connector-task-count", "the connector's tasks by state", ("connector", "state")),
    *PUSH_COUNTERS.values(),
    *PUSH_GAUGES.values(),
    _gauge("connector-count", "connectors of this worker by state", ("state",)),
    _gauge("task-count", "tasks of this worker by state", ("state",)),
    *REBALANCE,
    Metric("jvm-heap-bytes", "gauge", "Spark driver JVM heap", ("area",), always=False),
)

#: the metrics by name
BY_NAME = {metric.name: metric for metric in METRICS}
