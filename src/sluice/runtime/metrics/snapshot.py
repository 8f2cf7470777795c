"""One `/metrics` snapshot of a worker, read with one query per store for all connectors.

A scrape must stay cheap with many connectors (the target is 50 connectors in ≤ 50 ms), so
nothing here is read per connector: the configs, statuses, counters and positions of every
connector come from one read each, the offsets of each topic once, and the slow answers are
cached: the JVM heap (a py4j round trip per figure) for a second, the source lag (a query to the
source's system, `sluice.runtime.metrics.source_lag`) probed in the background.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.engine.settings import topic_use
from sluice.push import PushBoard
from sluice.runtime.metrics.progress import ProgressTracker
from sluice.runtime.metrics.source_lag import SourceLag
from sluice.runtime.stores import WorkerParts
from sluice.sdk import RecordOffset, partition_key
from sluice.store.configs import ConfigStore, StoredConnector
from sluice.store.statuses import StatusStore

_JVM_TTL_S = 1.0


class MeasuredRunner(Protocol):
    """What a snapshot reads of the query runner (`ConnectorRunner`): what each connector has
    committed, and the Spark session (for the JVM's heap)."""

    @property
    def spark(self) -> Any: ...

    def committed_positions(
        self, name: str, stored: dict[str, RecordOffset] | None = None
    ) -> dict[str, RecordOffset]:
        """What `name` has committed (`stored`, or the store, overlaid by its checkpoint)."""


@dataclass
class MetricsSnapshot:
    """Builds the dict `Herder.metrics` answers (its docstring gives the shape), plus each
    source's `source_lag` (`[{"partition", "unit", "lag"}]`)."""

    worker_id: str
    configs: ConfigStore
    runner: MeasuredRunner
    #: the bus, stores and push board the queries commit to
    parts: WorkerParts
    progress: ProgressTracker
    source_lag: SourceLag
    kind_of: Callable[[dict[str, str]], str]  # "source" | "sink" | "unknown" of a config
    _jvm: tuple[float, dict[str, int]] = (0.0, {})
    _queue_keys: dict[tuple[str, int], str] = field(default_factory=dict)

    def take(
        self,
        statuses: StatusStore,
        last_error: Mapping[str, float],
        probes_lag: Callable[[str], bool] = lambda _name: True,
    ) -> dict[str, Any]:
        """One read of the stores; the herder adds what only it knows: the statuses it shows
        (`statuses`, its board), when each connector last FAILED, and whether this worker
        probes a connector's source lag (distributed: only its owner does)."""
        stored = self.configs.all()
        shown = statuses.all()
        counters = self.parts.stores.counters.all()
        positions = self.parts.stores.positions.load_all()
        offsets: dict[str, dict[int, Any]] = {}  # per topic, read once per scrape
        connectors = []
        kinds = {s.name: self.kind_of(s.config) for s in stored}
        board = self.parts.push_board if "sink" in kinds.values() else None
        self.source_lag.first_figures(
            [s for s in stored if kinds[s.name] == "source" and probes_lag(s.name)]
        )
        for s in sorted(stored, key=lambda s: s.name):
            own, tasks = shown.get(s.name, (None, []))
            by_state: dict[str, int] = {}
            for task in tasks:
                by_state[task.state] = by_state.get(task.state, 0) + 1
            entry: dict[str, Any] = {
                "name": s.name,
                "type": kinds[s.name],
                "state": own.state if own else "UNASSIGNED",
                "tasks": by_state,
                "counters": counters.get(s.name, {}),
                "progress": self._progress(s.name),
                "lag": [],
                "source_lag": [],
                "last_error_timestamp": last_error.get(s.name),
            }
            if entry["type"] == "sink":
                committed = self.runner.committed_positions(s.name, positions.get(s.name, {}))
                entry["lag"] = self._sink_lag(s, committed, offsets)
                entry["push"] = self._push(s.name, board)
            elif entry["type"] == "source" and probes_lag(s.name):
                entry["source_lag"] = [
                    {"partition": p.partition, "unit": p.unit, "lag": p.lag}
                    for p in self.source_lag.of(s)
                ]
            connectors.append(entry)
        self.source_lag.forget({s.name for s in stored})
        return {
            "worker": {"worker_id": self.worker_id, "jvm": self._jvm_memory()},
            "connectors": connectors,
        }

    def close(self) -> None:
        """Stop the source-lag probe's thread."""
        self.source_lag.close()

    def _push(self, name: str, board: PushBoard | None = None) -> dict[str, Any] | None:
        """A push sink's totals and what its tasks hold now (None for other sinks): the HTTP
        sink's own counters, which the engine's record counters cannot tell apart (a parked
        request read back is a new read for the engine). `board`: the scrape's one board."""
        try:
            if board is None:
                board = self.parts.push_board
            progress = board.progress(name)
        except Exception:  # no board yet (no push sink ever ran here): nothing to report
            return None
        if not progress["totals"] and not progress["tasks"]:
            return None
        tasks = progress["tasks"]
        return {
            "totals": progress["totals"],
            "in_flight": sum(int(t.get("active", 0)) for t in tasks),
            "queued": sum(int(t.get("queue_size", 0)) for t in tasks),
            "waiting_retry": sum(int(t.get("retry_queue_size", 0)) for t in tasks),
        }

    def _progress(self, name: str) -> dict[str, Any] | None:
        progress = self.progress.progress(name)
        if progress is None:
            return None
        return {
            "num_input_rows": progress.num_input_rows,
            "input_rows_per_second": progress.input_rows_per_second,
            "processed_rows_per_second": progress.processed_rows_per_second,
            "batch_duration_ms": progress.batch_duration_ms,
            "avg_batch_ms": progress.avg_batch_ms,
            "max_batch_ms": progress.max_batch_ms,
        }

    def _sink_lag(
        self,
        stored: StoredConnector,
        committed: dict[str, RecordOffset],
        offsets: dict[str, dict[int, Any]],
    ) -> list[dict[str, Any]]:
        """Per queue of each topic the sink reads: end offset - committed position."""
        topics = topic_use(stored.config).reads
        log_ = self.parts.bus.log
        lag = []
        for topic in topics:
            if topic not in offsets:
                try:
                    offsets[topic] = log_.offsets(topic)
                except Exception:  # a topic not created yet has no lag
                    offsets[topic] = {}
            for queue, span in sorted(offsets[topic].items()):
                key = self._queue_key(topic, queue)
                position = (committed.get(key) or {}).get("queueOffset", span.min_offset)
                behind = span.max_offset - max(int(position), span.min_offset)
                lag.append({"topic": topic, "queue": queue, "lag": max(0, behind)})
        return lag

    def _queue_key(self, topic: str, queue: int) -> str:
        # the same few keys every scrape: JSON-encoding them is a good part of a scrape's cost
        key = self._queue_keys.get((topic, queue))
        if key is None:
            key = partition_key(self.parts.bus.log.queue_partition(topic, queue))
            self._queue_keys[(topic, queue)] = key
        return key

    def _jvm_memory(self) -> dict[str, int]:
        at, figures = self._jvm
        if time.monotonic() - at < _JVM_TTL_S:
            return figures
        try:
            runtime = self.runner.spark._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
            total, free = int(runtime.totalMemory()), int(runtime.freeMemory())
            figures = {
                "heap_used": total - free,
                "heap_committed": total,
                "heap_max": int(runtime.maxMemory()),
            }
        except Exception:  # no JVM access (e.g. Spark Connect): leave the gauges out
            figures = {}
        self._jvm = (time.monotonic(), figures)
        return figures
