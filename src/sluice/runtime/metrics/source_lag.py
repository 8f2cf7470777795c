"""Source lag for `/metrics`: how far each replayable source is behind the data it reads.

A source task that can tell implements `ReplayableSourceTask.lag(partition, position)` (file bytes
left, rows past a JDBC cursor, WAL or binlog bytes behind, Redis stream entries after the
position). Asking may cost a query or a connection, so it never happens on a scrape: a scrape reads
the figures of the last probe (`SourceLag.of`), and a probe older than the interval is redone on
one background thread, a connector at a time. The probe runs on fresh task instances of its own,
started with the stored task configs (secrets resolved here, as where the connector runs), and
measures from the connector's committed positions, so a paused or stopped source has a lag too.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.sdk import RecordOffset, ReplayableSourceTask, SourceTaskContext, partition_key
from sluice.store.configs import StoredConnector

log = logging.getLogger(__name__)

#: what `ReplayableSourceTask.lag_unit` may say (one Prometheus family each)
UNITS = ("bytes", "records")


@dataclass(frozen=True)
class PartitionLag:
    """One partition's lag in the task's unit ("bytes" or "records")."""

    partition: str
    unit: str
    lag: int


@dataclass
class _Probe:
    task_configs: list[dict[str, str]]
    at: float  # monotonic time of the probe (0: never done)
    lags: list[PartitionLag]


class SourceLag:
    """The last probed lag of every source connector, refreshed in the background."""

    def __init__(
        self,
        *,
        task_class: Callable[[str], type | None],
        resolve: Callable[[str, Mapping[str, str]], dict[str, str]],
        committed: Callable[[str], dict[str, RecordOffset]],
        interval_s: float,
    ) -> None:
        """`task_class(connector.class)` is the connector's task class (None if unknown);
        `resolve(connector.class, task_config)` resolves its `${…}` references; `committed(name)`
        is what the connector committed."""
        self._task_class = task_class
        self._resolve = resolve
        self._committed = committed
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._probed = threading.Condition(self._lock)  # notified after every probe
        self._probes: dict[str, _Probe] = {}
        self._queued: set[str] = set()
        # one daemon thread: a probe stuck on an unreachable system never holds up the exit
        self._todo: queue.SimpleQueue[StoredConnector | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # connectors whose last probe failed (logged once)

    def of(self, stored: StoredConnector) -> list[PartitionLag]:
        """The figures of the last probe of `stored` ([] before the first one or when its
        tasks cannot tell); queues a new probe when that one is older than the interval."""
        with self._lock:
            probe = self._probes.get(stored.name)
            fresh = self._fresh(stored)
            due = not fresh or time.monotonic() - probe.at >= self.interval_s  # type: ignore[union-attr]
            if due:
                self._queue(stored)
            return list(probe.lags) if fresh else []  # type: ignore[union-attr]

    def first_figures(self, sources: list[StoredConnector], timeout_s: float = 2.0) -> None:
        """Probe the sources never probed (or whose tasks changed) now and wait for them, at most
        `timeout_s` in all: the first scrape shows their lag instead of none (a scrape otherwise
        only reads the last probe). A slow or unreachable system costs one scrape `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            unknown = [s for s in sources if not self._fresh(s)]
            for stored in unknown:
                self._queue(stored)
            while (
                any(not self._fresh(s) for s in unknown)
                and (left := deadline - time.monotonic()) > 0
            ):
                self._probed.wait(left)

    def _fresh(self, stored: StoredConnector) -> bool:
        """Whether the last probe of `stored` was of its current tasks (the caller holds the
        lock)."""
        probe = self._probes.get(stored.name)
        return probe is not None and probe.task_configs == stored.task_configs

    def _queue(self, stored: StoredConnector) -> None:
        """Queue a probe of `stored` unless one is queued (the caller holds the lock)."""
        if stored.name in self._queued:
            return
        self._queued.add(stored.name)
        self._todo.put(stored)
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="source-lag", daemon=True)
            self._thread.start()

    def forget(self, keep: set[str]) -> None:
        """Drop the figures of connectors not in `keep` (deleted ones)."""
        with self._lock:
            for name in set(self._probes) - keep:
                del self._probes[name]

    def close(self) -> None:
        """Stop probing (the probe under way, if any, finishes on its own)."""
        self._todo.put(None)

    def _work(self) -> None:
        while (stored := self._todo.get()) is not None:
            self._refresh(stored)

    def _refresh(self, stored: StoredConnector) -> None:
        try:
            lags = self.probe(stored)
            self._failing.discard(stored.name)
        except Exception as exc:  # the server is away, say: no figure until it answers
            if stored.name not in self._failing:
                log.warning("source lag of connector %s not known: %s", stored.name, exc)
                self._failing.add(stored.name)
            lags = []
        with self._lock:
            self._probes[stored.name] = _Probe(stored.task_configs, time.monotonic(), lags)
            self._queued.discard(stored.name)
            self._probed.notify_all()

    def probe(self, stored: StoredConnector) -> list[PartitionLag]:
        """Ask each task of `stored` now (blocking): what `of` shows after the next refresh."""
        class_name = stored.config.get("connector.class", "")
        task_class = self._task_class(class_name)
        if task_class is None or not _tells_lag(task_class):
            return []
        if task_class.lag_unit not in UNITS:
            raise ValueError(
                f"{task_class.__qualname__}.lag_unit is {task_class.lag_unit!r}, "
                f"not one of {', '.join(UNITS)}"
            )
        committed = self._committed(stored.name)
        lags = []
        for index, task_config in enumerate(stored.task_configs):
            task: Any = task_class()
            task.context = SourceTaskContext(connector_name=stored.name, task_id=index)
            task.start(self._resolve(class_name, task_config))
            try:
                for partition in task.partitions():
                    key = partition_key(partition)
                    lag = task.lag(partition, committed.get(key))
                    if lag is not None:
                        lags.append(PartitionLag(key, task.lag_unit, int(lag)))
            finally:
                task.stop()
        return lags


def _tells_lag(task_class: type) -> bool:
    return (
        issubclass(task_class, ReplayableSourceTask)
        and task_class.lag is not ReplayableSourceTask.lag
    )
