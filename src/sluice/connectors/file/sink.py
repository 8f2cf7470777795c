"""FileSinkConnector: appends one line per record (`value` + `\\n`) to a file.

Delivery: exactly-once. Each task stages its share of a micro-batch in a part file; the
connector's `commit` (driver) appends the parts in task order, once per batch, with the SDK's
`StagedAppend` (a replayed batch is skipped, a half-done append rolled back and redone).
Unit of parallelism: one task per group of queues (`max.tasks`); records of one queue stay in order.
A null value is written as an empty line; STRING and BYTES values as they are; others as `str()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sluice.connectors.file import _lines
from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    Delivery,
    SinkConnector,
    SinkTask,
    StagedAppend,
    StagedPart,
)

CONFIG = ConfigDef(
    ConfigKey(
        "filename", type="path", check=_lines.unwritable, doc="path of the file to append to"
    ),
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
)


class FileSinkTask(SinkTask):
    """Writes its records of one micro-batch to a staged part file."""

    def start(self, config: Mapping[str, str]) -> None:
        self.target = StagedAppend(CONFIG.parse(config)["filename"])
        self._part: StagedPart | None = None

    def _out(self) -> StagedPart:
        if self._part is None:
            self._part = self.target.stage(self.context.batch_id, self.context.task_id)
        return self._part

    def put(self, records: list[ConnectRecord]) -> None:
        self._out().write(b"".join(_lines.line_bytes(r.value) for r in records))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        data = _lines.joined_lines(batch.column("value"))  # one buffer, built in C++
        if data is None:
            return super().put_batch(batch)
        if data:
            self._out().write(data)

    def flush(self, batch_id: BatchId) -> Any:
        part, self._part = self._part, None
        return part.close() if part else None

    def stop(self) -> None:
        if self._part is not None:
            self._part.discard()


class FileSinkConnector(SinkConnector):
    """Appends records to one file, one line each, exactly once per micro-batch."""

    config_def = CONFIG
    task_class = FileSinkTask
    key_aliases = {"file": "filename"}  # Kafka's FileStreamSinkConnector's name
    ordered_commit = True

    @classmethod
    def delivery(cls, config: Mapping[str, str]) -> Delivery:
        return Delivery.EXACTLY_ONCE

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self.target = StagedAppend(CONFIG.parse(config)["filename"])

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        self.target.commit(batch_id, messages)

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        self.target.abort(messages)
