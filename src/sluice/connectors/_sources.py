"""Pieces the queue-like sources (Redis, RabbitMQ) share: how named partitions are spread over
tasks, and the Arrow batch a `ReplayableSourceTask.read` yields."""

from __future__ import annotations

import pyarrow as pa

from sluice.sdk import HEADERS_TYPE, TIMESTAMP_TYPE


def shares(names: list[str], max_tasks: int) -> list[list[str]]:
    """`names` dealt round-robin over at most `max_tasks` tasks (never an empty share)."""
    tasks = max(1, min(max_tasks, len(names)))
    return [names[i::tasks] for i in range(tasks)]


def source_batch(
    topic: str,
    keys: list[bytes | None],
    values: list[bytes | None],
    stamps_us: list[int | None],
    headers: list[list[tuple[str, str]] | None],
) -> pa.RecordBatch:
    """The columns `topic, key, value, timestamp, headers` of records bound for one topic
    (timestamps in microseconds since the epoch, headers as (name, text) pairs)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), len(values)),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(stamps_us, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(headers, HEADERS_TYPE),
        ],
        names=["topic", "key", "value", "timestamp", "headers"],
    )
