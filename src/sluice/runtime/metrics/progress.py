"""What `/metrics` reports, gathered on the driver: Spark query progress and record totals.

Each connector is one streaming query named `source:<name>` or `sink:<name>`. A query
listener sees every finished micro-batch (`onQueryProgress`): it adds the batch's
`numInputRows` to the connector's counters in the counter store (SQLite, so totals survive a
restart and stay monotonic) and keeps the last progress and the last batch durations in memory
for the rates and batch times. The error counters (`total-record-errors`, dead letters,
retries…) are added by the tasks themselves (`sluice.engine.errors`).

Queries whose Spark rows are not records count their own: a fused query's rows are one receipt
per task, so sinks (`SinkRunner.commit`) and fused sources (`CountingConsumer`) add their record
totals when a micro-batch commits (a replayed batch is not counted twice); for the others the
listener adds `numInputRows` (a batch replayed after a crash is then counted again, as in Kafka
Connect). Rates are records of the last batch over the time since the previous one (input) and
over the batch's duration (processed).

The listener takes each progress as the one JSON text Spark makes of it. PySpark's own
`StreamingQueryListener` builds its event objects field by field, one py4j round trip per field,
map entry and source (~50 per micro-batch): measured, that made the JVM's listener thread the
busiest thread of a worker carrying a trickle (0.28 CPU-s/s of 0.84 for the whole JVM, with one
file pair at a 0 ms trigger).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from sluice.engine.counting import BATCHES_TOTAL, RECORDS_TOTAL

log = logging.getLogger(__name__)

_RECENT = 32  # batch durations kept for avg/max


@dataclass
class QueryProgress:
    """The last micro-batch of one connector's query and the durations of the recent ones."""

    batch_id: int = -1
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_duration_ms: int = 0
    durations_ms: deque[int] = field(default_factory=lambda: deque(maxlen=_RECENT))

    @property
    def avg_batch_ms(self) -> float:
        return sum(self.durations_ms) / len(self.durations_ms) if self.durations_ms else 0.0

    @property
    def max_batch_ms(self) -> float:
        return float(max(self.durations_ms, default=0))


def connector_of_query(query_name: str | None) -> str | None:
    """`source:orders` -> `orders` (None for a query that is not a connector's)."""
    kind, sep, name = (query_name or "").partition(":")
    return name if sep and kind in ("source", "sink") and name else None


class ProgressTracker:
    """Listens to every query of the session; `progress(name)` is a connector's last batch."""

    def __init__(self, counters: Any, counts_itself: Callable[[str], bool] = lambda _: False):
        self.counters = counters
        self.counts_itself = counts_itself
        self._lock = threading.Lock()
        self._progress: dict[str, QueryProgress] = {}
        self._totals: dict[str, tuple[int, float]] = {}  # name -> (records-total, when)
        self._jlistener: Any = None

    def attach(self, spark: SparkSession) -> ProgressTracker:
        """Listen to every query of `spark` (once)."""
        if self._jlistener is None:
            gateway = spark.sparkContext._gateway
            jvm = spark.sparkContext._jvm
            assert gateway is not None and jvm is not None
            ensure_callback_server_started(gateway)
            wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
            self._jlistener = wrapper(_JsonListener(self))
            spark._jsparkSession.streams().addListener(self._jlistener)
        return self

    def detach(self, spark: SparkSession) -> None:
        """Stop listening (a session that outlives this tracker: one shared by several herders)."""
        if self._jlistener is not None:
            spark._jsparkSession.streams().removeListener(self._jlistener)
            self._jlistener = None

    def started(self, query_name: str | None) -> None:
        """A query started: its connector's total so far is what its first batch adds to."""
        name = connector_of_query(query_name)
        if name is not None and self.counters is not None:
            total = self.counters.get(name).get(RECORDS_TOTAL, 0)
            self._totals[name] = (total, time.monotonic())

    def record(self, p: dict[str, Any]) -> None:
        """Take one micro-batch's progress (Spark's `StreamingQueryProgress` as JSON)."""
        name = connector_of_query(p.get("name"))
        if name is None:
            return
        rows = int(p.get("numInputRows") or 0)
        if self.counters is not None and rows and not self.counts_itself(name):
            self.counters.add(name, {RECORDS_TOTAL: rows, BATCHES_TOTAL: 1})
        batch_ms = int(p.get("batchDuration") or 0)
        duration = int((p.get("durationMs") or {}).get("triggerExecution", batch_ms))
        # records of this batch: the growth of the connector's total since the last progress
        now = time.monotonic()
        total = self.counters.get(name).get(RECORDS_TOTAL, 0) if self.counters is not None else 0
        before, then = self._totals.get(name, (total, now))
        self._totals[name] = (total, now)
        rows = total - before if self.counters is not None else rows
        with self._lock:
            state = self._progress.setdefault(name, QueryProgress())
            if not rows and state.batch_id >= 0:  # an idle tick: keep the last batch's figures
                return
            state.batch_id = int(p.get("batchId", -1))
            state.num_input_rows = rows
            state.input_rows_per_second = rows / (now - then) if now > then else 0.0
            state.processed_rows_per_second = rows * 1000 / duration if duration else 0.0
            state.batch_duration_ms = batch_ms
            if rows:
                state.durations_ms.append(duration)

    def progress(self, name: str) -> QueryProgress | None:
        with self._lock:
            return self._progress.get(name)


class _JsonListener:
    """The py4j side of Spark's `PythonStreamingQueryListener`: one or two round trips per
    event (see the module's docstring). It runs on py4j's callback threads; a metrics hiccup is
    logged and never reaches the query."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self.tracker = tracker

    def onQueryStarted(self, jevent: Any) -> None:  # Spark's interface names
        try:
            self.tracker.started(jevent.name())
        except Exception:
            log.exception("query start not recorded")

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            self.tracker.record(json.loads(jevent.progress().json()))
        except Exception:
            log.exception("query progress not recorded")

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
