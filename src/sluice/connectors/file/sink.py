"""FileSinkConnector: appends one line per record (`value` + `\\n`) to a file.

Delivery: exactly-once, from the SDK's `AppendSinkConnector`: each task stages its share of a
micro-batch in a part file; the driver appends the parts in task order, once per batch (a replayed
batch is skipped, a half-done append rolled back and redone).
Unit of parallelism: one task per group of queues (`max.tasks`); records of one queue stay in order.
A null value is written as an empty line; STRING and BYTES values as they are; structs, maps and
arrays as one line of JSON (times as ISO-8601, bytes as base64); other values as text.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sluice.connectors.file import _lines
from sluice.connectors.file._config import SINK_CONFIG
from sluice.sdk import (
    AppendSinkConnector,
    AppendSinkTask,
    ConnectRecord,
    StagedAppend,
)


class FileSinkTask(AppendSinkTask):
    """Writes its records of one micro-batch to a staged part file."""

    def start(self, config: Mapping[str, str]) -> None:
        self.target = StagedAppend(SINK_CONFIG.parse(config)["filename"])

    def put(self, records: list[ConnectRecord]) -> None:
        self.append(b"".join(_lines.line_bytes(r.value) for r in records))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        values = batch.column("value")
        data = _lines.joined_lines(values)  # one buffer, built in C++
        if data is None:  # structs, maps, numbers...: row by row, maps as JSON objects
            rows = values.to_pylist(maps_as_pydicts="lossy")
            data = memoryview(b"".join(_lines.line_bytes(v) for v in rows))
        if data:
            self.append(data)


class FileSinkConnector(AppendSinkConnector):
    """Appends records to one file, one line each, exactly once per micro-batch."""

    config_def = SINK_CONFIG
    task_class = FileSinkTask
    key_aliases = {"file": "filename"}  # Kafka's FileStreamSinkConnector's name

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self.target = StagedAppend(SINK_CONFIG.parse(config)["filename"])

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
