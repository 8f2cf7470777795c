"""The embedded bus: a durable partitioned log on local disk, read and written by Spark."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from sluice.bus.embedded.log import EmbeddedLog, OffsetOutOfRange, QueueRange, TopicInfo
from sluice.bus.embedded.spark import (
    ReaderControl,
    TopicReaderPlan,
    TopicWriterPlan,
    queue_partition,
    topic_reader,
    topic_writer,
)

__all__ = [
    "EmbeddedBus",
    "EmbeddedLog",
    "OffsetOutOfRange",
    "QueueRange",
    "TopicInfo",
    "queue_partition",
]


class EmbeddedBus:
    """The default bus backend: topics in an `EmbeddedLog` under `root`, no server to run."""

    def __init__(self, root: str | os.PathLike[str], *, default_queues: int = 8) -> None:
        self.root = os.fspath(root)
        self.default_queues = default_queues
        self.log = EmbeddedLog(self.root)

    def create_topic(self, topic: str, queues: int | None = None) -> TopicInfo:
        return self.log.create_topic(topic, queues or self.default_queues)

    def describe(self, topic: str) -> TopicInfo:
        return self.log.describe(topic)

    def count(self, topic: str) -> int:
        """Records currently retained in `topic` (0 if it does not exist yet)."""
        if not self.log.topic_exists(topic):
            return 0
        return sum(r.max_offset - r.min_offset for r in self.log.offsets(topic).values())

    def maintain(
        self,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        orphan_age_s: float = 3600.0,
    ) -> dict[str, int]:
        """Apply retention to every topic and delete segments staged by writers that died.

        Returns `{"segments_expired": n, "orphans_removed": m}`.
        """
        expired = removed = 0
        for topic in self.log.topics():
            if retention_ms is not None or retention_bytes is not None:
                expired += self.log.apply_retention(
                    topic, max_age_ms=retention_ms, max_bytes=retention_bytes
                )
            removed += self.log.remove_orphans(topic, older_than_s=orphan_age_s)
        return {"segments_expired": expired, "orphans_removed": removed}

    def topic_appender(self, *, writer_id: str) -> TopicWriterPlan:
        """The topic writer as a plain object (for fused pipelines: `write` + `commit`)."""
        return TopicWriterPlan(self.root, writer_id, self.default_queues)

    def topic_writer(self, *, writer_id: str) -> type[DataSource]:
        return topic_writer(self.topic_appender(writer_id=writer_id))

    def reader_control(self, path: str) -> ReaderControl:
        """Where sink tasks' pause/resume/reset requests are kept for the reader."""
        return ReaderControl(path)

    def topic_reader(
        self,
        *,
        name: str,
        topics: Sequence[str],
        max_tasks: int,
        control_path: str,
        positions: Any,
        max_rows: int | None = None,
        split_queues: bool = False,
        downstream: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
        downstream_ddl: str | None = None,
    ) -> type[DataSource]:
        control = ReaderControl(control_path)
        plan = TopicReaderPlan(
            name=name,
            root=self.root,
            topics=tuple(topics),
            max_tasks=max(1, max_tasks),
            max_rows=max_rows,
            split_queues=split_queues,
            control=control,
            positions=positions,
            downstream=downstream,
            downstream_ddl=downstream_ddl,
        )
        return topic_reader(plan)
