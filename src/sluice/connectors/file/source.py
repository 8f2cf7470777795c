"""FileSourceConnector: follows a text file like `tail -f`; each line is one STRING record.

Delivery: exactly-once (a `ReplayableSourceTask`). Unit of parallelism: one file, so one task
whatever `max.tasks` says (a long range is split into sub-ranges read in parallel).
Position: `{"filename": <path>}` → `{"position": <byte offset just after the line's \\n>}`.
A last line without its `\\n` is not read until the newline arrives. A line that is not UTF-8
fails the task naming its line and byte offset; a file that shrinks below the committed position
fails the task: the runtime cannot tell which bytes were already delivered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pyarrow as pa

from sluice.connectors.file import _lines
from sluice.connectors.file._config import SOURCE_CONFIG
from sluice.sdk import (
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    SourceConnector,
)


class FileSourceTask(ReplayableSourceTask):
    """Reads byte ranges of the file that end on a line boundary."""

    def start(self, config: Mapping[str, str]) -> None:
        self.path = SOURCE_CONFIG.parse(config)["filename"]

    def partitions(self) -> list[RecordPartition]:
        return [{"filename": self.path}]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        pos = int(start["position"]) if start else 0
        end = _lines.range_end(self.path, pos, limit)
        return start if end is None or end == pos else {"position": end}

    def watch_paths(self) -> list[str]:
        return [self.path]

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        pos = int(start["position"]) if start else 0
        return _lines.line_batches(self.path, pos, int(end["position"]))

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        pos = int(start["position"]) if start else 0
        cuts = _lines.cuts(self.path, pos, int(end["position"]), parts)
        return [{"position": cut} for cut in cuts]

    lag_unit = "bytes"

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Bytes of the file after the committed position (a partial last line included)."""
        try:
            size = os.stat(self.path).st_size
        except OSError:  # gone or unreadable: the task names that when it reads
            return None
        return max(0, size - (int(position["position"]) if position else 0))


class FileSourceConnector(SourceConnector):
    """Streams the lines of one file into a topic, following appends."""

    config_def = SOURCE_CONFIG
    task_class = FileSourceTask
    offset_counts = ("position",)
    # Kafka's FileStreamSourceConnector names its keys `file` and `topic`
    key_aliases = {"file": "filename", "topic": "connect.topicname"}

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]

    def default_read_limit(self) -> ReadLimit:
        # Bytes, not rows: finding the end of N rows means reading them on the driver first.
        return ReadLimit(max_bytes=64 << 20)
