"""The embedded bus: a durable partitioned log on local disk, read and written by Spark."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

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

    def topic_writer(self, *, writer_id: str) -> type[DataSource]:
        return topic_writer(TopicWriterPlan(self.root, writer_id, self.default_queues))

    def topic_reader(
        self,
        *,
        name: str,
        topics: Sequence[str],
        max_tasks: int,
        control_path: str,
        positions: Any,
        max_rows: int | None = None,
    ) -> tuple[type[DataSource], ReaderControl]:
        control = ReaderControl(control_path)
        plan = TopicReaderPlan(
            name=name,
            root=self.root,
            topics=tuple(topics),
            max_tasks=max(1, max_tasks),
            max_rows=max_rows,
            control=control,
            positions=positions,
        )
        return topic_reader(plan), control
