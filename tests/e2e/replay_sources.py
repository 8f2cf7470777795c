"""Sources of the poll-only and dead-letter crash test (Spark's Python workers import them here).

`CappedQueueSource` is `sluice.testing.DirectoryQueueSource` (a pop-style queue over a folder of
message files, acknowledged by deleting them) that hands over at most `max.poll.records` messages
per poll, so a long queue drains over many micro-batches. `PacedBadRecordSource` is the
integration tests' `BadRecordSource` (every record i with i % 10 in (3, 7) does not fit its
schema and is dead-lettered) reading at most the read limit's rows per micro-batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sluice.sdk import (
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    RetriableException,
)
from sluice.testing import DirectoryQueueSource, DirectoryQueueTask
from tests.integration.bad_sources import BadRecordSource, BadRecordTask

_CAPPED = ConfigDef(
    *DirectoryQueueSource.config_def.keys.values(),
    ConfigKey("max.poll.records", type="int", default=100, min=1, doc="messages per poll"),
)


class CappedQueueTask(DirectoryQueueTask):
    """Pops at most `max.poll.records` of the oldest message files per poll."""

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self.cap = _CAPPED.parse(config)["max.poll.records"]

    def poll(self) -> list[ConnectRecord]:
        records = super().poll()
        for late in records[self.cap :]:  # not handed over: polled again next time
            self.in_flight.discard(late.partition["file"])
        return records[: self.cap]


class CappedQueueSource(DirectoryQueueSource):
    """Poll-only (at-least-once) queue of message files, `max.poll.records` per poll."""

    config_def = _CAPPED
    task_class = CappedQueueTask


class PacedBadRecordTask(BadRecordTask):
    """`BadRecordTask` that advances by at most the read limit's rows per micro-batch."""

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        first = start["next"] if start else 0
        step = limit.max_rows if limit.max_rows is not None else self.count
        return {"next": min(self.count, first + step)}


class PacedBadRecordSource(BadRecordSource):
    """`BadRecordSource` read in micro-batches of at most `read.max.rows` records."""

    task_class = PacedBadRecordTask


class DownableQueueTask(DirectoryQueueTask):
    """`DirectoryQueueTask` whose queue is down while a file `DOWN` is in its folder: `poll`
    raises `RetriableException` then, as a client that lost its server does."""

    def poll(self) -> list[ConnectRecord]:
        if os.path.exists(os.path.join(self.folder, "DOWN")):
            raise RetriableException(f"queue.dir={self.folder}: the queue is down")
        return super().poll()


class DownableQueueSource(DirectoryQueueSource):
    """Poll-only queue of message files that can be taken down (a `DOWN` file)."""

    task_class = DownableQueueTask
