"""Drive a connector's tasks the way the runtime does, without Spark (bytewax's `TestingSource` /
`poll_next_batch` idea): a unit test of a connector is then a few lines and runs in milliseconds.

* `SourceHarness` — a `ReplayableSourceTask`: per micro-batch `latest` (driver) then `read` of
  exactly `(start, end]` on a pickled copy of the task (as on an executor), then the positions
  are committed; `restart()` starts a fresh task from the committed positions (resume after a
  crash). Each range is read twice and must give the same records: replay is what exactly-once
  rests on.
* `SinkHarness` — a `SinkConnector`: per micro-batch each task gets `put` then `flush(batch_id)`,
  and the connector `commit`s the messages in task order; `deliver(..., batch=n)` again replays
  a batch, as Spark does after a crash.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sluice.sdk import (
    BatchId,
    ConnectRecord,
    ReadLimit,
    RecordOffset,
    ReplayableSourceTask,
    SinkConnector,
    SinkTask,
    SinkTaskContext,
    SourceTaskContext,
    partition_key,
)

_UNBOUNDED = ReadLimit()


class SourceHarness:
    """Runs one `ReplayableSourceTask` through latest → read → commit, micro-batch by
    micro-batch. `positions` (partition key → offset) are the committed positions."""

    def __init__(
        self,
        task_class: type[ReplayableSourceTask],
        config: Mapping[str, str],
        *,
        limit: ReadLimit = _UNBOUNDED,
        positions: Mapping[str, RecordOffset] | None = None,
    ) -> None:
        self.task_class, self.config, self.limit = task_class, dict(config), limit
        self.positions: dict[str, RecordOffset] = dict(positions or {})
        self.task = self._started()

    def _started(self) -> ReplayableSourceTask:
        task = self.task_class()
        task.context = SourceTaskContext(connector_name="harness")
        task.start(self.config)
        return task

    def next_batch(self) -> list[ConnectRecord]:
        """One micro-batch over every partition (empty when nothing is new); commits it."""
        records, ends = [], []
        for partition in self.task.partitions():
            start = self.positions.get(partition_key(partition))
            end = self.task.latest(partition, start, self.limit)
            if end is None or end == start:
                continue
            first = self._read(partition, start, end)
            if first != self._read(partition, start, end):
                raise AssertionError(f"reading {partition} ({start}, {end}] twice differed")
            records.extend(first)
            ends.append((partition, end))
        for partition, end in ends:
            self.positions[partition_key(partition)] = end
        if ends:
            self.task.commit(ends)
        return records

    def _read(self, partition: Any, start: Any, end: RecordOffset) -> list[ConnectRecord]:
        executor = pickle.loads(pickle.dumps(self.task))  # a task must pickle for Spark
        executor.start(self.config)
        return as_records(executor.read(partition, start, end))

    def drain(self, max_batches: int = 1000) -> list[ConnectRecord]:
        """Every record available now, over as many micro-batches as the limit needs."""
        out: list[ConnectRecord] = []
        for _ in range(max_batches):
            batch = self.next_batch()
            if not batch:
                return out
            out.extend(batch)
        raise AssertionError(f"still reading after {max_batches} micro-batches")

    def restart(self) -> SourceHarness:
        """A new task resuming from the committed positions (what a restarted worker does)."""
        self.task.stop()
        return SourceHarness(
            self.task_class, self.config, limit=self.limit, positions=self.positions
        )


class SinkHarness:
    """Runs a `SinkConnector` and its tasks through put → flush → commit per micro-batch."""

    def __init__(
        self, connector_class: type[SinkConnector], config: Mapping[str, str], *, tasks: int = 1
    ) -> None:
        self.connector = connector_class()
        self.connector.validate(config)
        self.connector.start(config)
        self.task_configs = self.connector.task_configs(tasks)
        self.batches = 0

    def deliver(self, records: Sequence[ConnectRecord], *, batch: int | None = None) -> None:
        """One micro-batch: records dealt to the tasks in contiguous runs (task order is
        record order), each task flushed, the connector committing. `batch=n` replays batch n."""
        number = self.batches if batch is None else batch
        self.batches = max(self.batches, number + 1)
        batch_id = BatchId("harness", number)
        share = -(-len(records) // len(self.task_configs)) or 1
        messages = []
        for i, config in enumerate(self.task_configs):
            task: SinkTask = self.connector.task_class()
            task.context = SinkTaskContext(connector_name="harness", task_id=i, batch_id=batch_id)
            task.start(config)
            task.put(list(records[i * share : (i + 1) * share]))
            messages.append(task.flush(batch_id))
            task.stop()
        self.connector.commit(batch_id, messages)


def as_records(items: Iterable[ConnectRecord] | Iterable[pa.RecordBatch]) -> list[ConnectRecord]:
    """What a source task's `read` yielded, as records (Arrow batches row by row)."""
    out: list[ConnectRecord] = []
    for item in items:
        if isinstance(item, ConnectRecord):
            out.append(item)
            continue
        for row in item.to_pylist():
            known = {k: row[k] for k in ("key", "value", "timestamp", "topic") if k in row}
            out.append(ConnectRecord(**known, extensions=dict(row.get("headers") or {})))
    return out
