"""Records and positions.

A position is a pair of plain JSON-able dicts: a `RecordPartition` says *which* stream a record
came from (`{"filename": "/data/a.txt"}`), a `RecordOffset` says *where in it* the reader resumes
(`{"position": 1024}`). The offset stored with a record is the position **after** that record:
resuming from it never re-delivers the record and never skips the next one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from sluice.sdk._schema import Schema

RecordPartition: TypeAlias = dict[str, Any]
"""Identifies one ordered stream of a source (a file, a table, a queue). Values are primitives."""

RecordOffset: TypeAlias = dict[str, Any]
"""Where to resume inside a `RecordPartition`: the position just after the last delivered record."""


def partition_key(partition: RecordPartition) -> str:
    """A canonical string for a partition (sorted JSON), usable as a dict key or store key."""
    return json.dumps(partition, sort_keys=True, separators=(",", ":"))


@dataclass
class ConnectRecord:
    """One record moving through sluice, as RocketMQ Connect's `ConnectRecord`.

    `partition`/`offset` are its position at the source (the offset is the position *after* this
    record); `extensions` are string headers (user properties on RocketMQ, headers on Kafka). A
    source task may set the `topic` extension to route a record to another topic than the
    connector's `connect.topicname`.
    """

    value: Any
    schema: Schema | None = None
    key: Any = None
    key_schema: Schema | None = None
    partition: RecordPartition | None = None
    offset: RecordOffset | None = None
    timestamp: datetime | None = None
    extensions: dict[str, str] = field(default_factory=dict)
    topic: str | None = None
