"""The record totals a query adds itself when its micro-batch commits.

A fused query's Spark rows are receipts (one per task), not records, so the listener of
`sluice.runtime.metrics.progress` cannot count them: sinks (`SinkRunner.commit`) and fused
sources (`CountingConsumer`) add their totals under these names at commit, and a replayed
micro-batch is not counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

#: the counter names of a connector's records and committed micro-batches
RECORDS_TOTAL = "records-total"
BATCHES_TOTAL = "batches-total"


@dataclass(frozen=True)
class CountingConsumer:
    """Wraps a fused source's topic appender (`engine.direct.BatchConsumer`): counts the rows
    each task hands it and adds them to the connector's `records-total` when the micro-batch
    commits. Picklable: it travels to the executors with the plan."""

    inner: Any
    counters: Any
    connector: str

    def write(self, batches: Iterator[pa.RecordBatch], partition_id: int) -> Any:
        seen = [0]

        def counted() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                seen[0] += batch.num_rows
                yield batch

        receipt = self.inner.write(counted(), partition_id)
        return (receipt, seen[0])

    def commit(self, receipts: list[Any], batch_id: int) -> None:
        self.inner.commit([r[0] for r in receipts], batch_id)
        records = sum(r[1] for r in receipts)
        if records:
            self.counters.add(self.connector, {RECORDS_TOTAL: records, BATCHES_TOTAL: 1})

    def abort(self, receipts: list[Any], batch_id: int) -> None:
        self.inner.abort([r[0] for r in receipts if r is not None], batch_id)

    def __getattr__(self, name: str) -> Any:
        # anything else of the appender (e.g. what the schema registration asks) passes through
        if name in ("inner", "counters", "connector") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)
