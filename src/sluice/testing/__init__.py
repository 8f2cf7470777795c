"""Test doubles for connector authors and for sluice's own tests.

`DirectoryQueueSource` is a poll-only source over a folder of message files (a stand-in for a
pop-style queue: a message is "acknowledged" by deleting its file), so the at-least-once path runs
across Spark's processes. `JsonLinesSink` appends every record it receives as one JSON line with its
topic, queue and offset: handy to check what reached a sink. `sink_frame` builds the rows a sink
task's `put_batch` receives, for driving a task directly. `SourceHarness` and `SinkHarness`
drive a connector's tasks through the runtime's calls without Spark (see docs/sdk.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import pyarrow as pa

from sluice.sdk import (
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    SinkConnector,
    SinkTask,
    SourceConnector,
    SourceTask,
)
from sluice.testing._harness import SinkHarness, SourceHarness, as_records


def sink_frame(
    value: pa.Array, topic: str, *, key: pa.Array | None = None, first: int = 0
) -> pa.RecordBatch:
    """A sink-frame batch (what a sink task receives) carrying `value` records of `topic`, in
    queue 0 from offset `first`."""
    n = len(value)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(first, first + n), pa.int64()),
            key if key is not None else pa.nulls(n, pa.binary()),
            value,
            pa.nulls(n, pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()),
        ],
        names=["topic", "queue_id", "queue_offset", "key", "value", "timestamp", "headers"],
    )


_QUEUE_CONFIG = ConfigDef(
    ConfigKey("queue.dir", doc="folder whose *.msg files are the messages"),
    ConfigKey("connect.topicname", doc="topic to write"),
)


class DirectoryQueueTask(SourceTask):
    """Pops `*.msg` files in name order; deletes them on `commit` (the acknowledgement)."""

    def start(self, config: Mapping[str, str]) -> None:
        self.folder = _QUEUE_CONFIG.parse(config)["queue.dir"]
        self.in_flight: set[str] = set()

    def poll(self) -> list[ConnectRecord]:
        names = sorted(n for n in os.listdir(self.folder) if n.endswith(".msg"))
        records = []
        for name in names:
            if name in self.in_flight:
                continue
            with open(os.path.join(self.folder, name), encoding="utf-8") as f:
                records.append(ConnectRecord(value=f.read(), partition={"file": name}))
            self.in_flight.add(name)
        return records

    def commit(self, records: list[ConnectRecord]) -> None:
        for record in records:
            name = record.partition["file"] if record.partition else None
            if name:
                os.remove(os.path.join(self.folder, name))
                self.in_flight.discard(name)


class DirectoryQueueSource(SourceConnector):
    """Poll-only test source (at-least-once) over a folder of message files."""

    config_def = _QUEUE_CONFIG
    task_class = DirectoryQueueTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]


_SINK_CONFIG = ConfigDef(ConfigKey("path", doc="JSON-lines file to append to"))


class JsonLinesSinkTask(SinkTask):
    """Appends each record as JSON (at-least-once: no batch dedupe on purpose)."""

    def start(self, config: Mapping[str, str]) -> None:
        self.path = _SINK_CONFIG.parse(config)["path"]

    def put(self, records: list[ConnectRecord]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            for r in records:
                value = (
                    r.value.decode("utf-8", "replace") if isinstance(r.value, bytes) else r.value
                )
                line = {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "value": value,
                    "task": self.context.task_id,
                    "batch": self.context.batch_id.number if self.context.batch_id else None,
                }
                f.write(json.dumps(line) + "\n")


class JsonLinesSink(SinkConnector):
    """Test sink: records as JSON lines, one file shared by all tasks."""

    config_def = _SINK_CONFIG
    task_class = JsonLinesSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


__all__ = [
    "DirectoryQueueSource",
    "DirectoryQueueTask",
    "JsonLinesSink",
    "JsonLinesSinkTask",
    "SinkHarness",
    "SourceHarness",
    "as_records",
    "sink_frame",
]
