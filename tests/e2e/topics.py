"""What a topic of the embedded bus under a store root holds, read by the tests after (or while) a
worker process writes it: every record once per copy, and how many records there are."""

from __future__ import annotations

from pathlib import Path

from sluice.bus.embedded import EmbeddedLog


def topic_rows(root: Path, topic: str) -> list[dict]:
    """Every record of `topic` under store root `root`, queue by queue, as row dicts."""
    log = EmbeddedLog(root / "bus")
    try:
        if not log.topic_exists(topic):
            return []
        return [
            row
            for q, r in sorted(log.offsets(topic).items())
            for _, batch in log.read(topic, q, r.min_offset, r.max_offset)
            for row in batch.to_pylist()
        ]
    finally:
        log.close()


def topic_count(root: Path, topic: str) -> int:
    """How many records `topic` under store root `root` holds (0 when it does not exist)."""
    log = EmbeddedLog(root / "bus")
    try:
        if not log.topic_exists(topic):
            return 0
        return sum(r.max_offset for r in log.offsets(topic).values())
    finally:
        log.close()
