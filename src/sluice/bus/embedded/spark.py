"""The embedded log's topic writer and reader: the shared adapters of `sluice.bus.spark`.

Kept as a module so that existing imports (`STORED_SCHEMA`, `queue_partition`, the plans) work.
"""

from __future__ import annotations

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.spark import (
    READ_DDL,
    ReaderControl,
    TopicReaderPlan,
    TopicWriterPlan,
    topic_reader,
    topic_writer,
)

__all__ = [
    "BROKER_NAME",
    "READ_DDL",
    "STORED_SCHEMA",
    "ReaderControl",
    "TopicReaderPlan",
    "TopicWriterPlan",
    "queue_partition",
    "topic_reader",
    "topic_writer",
]

BROKER_NAME = "embedded"


def queue_partition(topic: str, queue: int) -> dict[str, str]:
    """The RocketMQ-shaped partition of one queue (what the position store and offsets API show)."""
    return {"topic": topic, "brokerName": BROKER_NAME, "queueId": str(queue)}
