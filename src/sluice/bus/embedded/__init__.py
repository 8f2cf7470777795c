"""The embedded bus: a durable partitioned log on local disk, read and written by Spark."""

from __future__ import annotations

import logging
import os

from sluice.bus.base import OffsetOutOfRange, QueueRange, TopicDamaged, TopicInfo
from sluice.bus.embedded.log import EmbeddedLog
from sluice.bus.embedded.spark import queue_partition
from sluice.bus.facade import Bus

__all__ = [
    "EmbeddedBus",
    "EmbeddedLog",
    "OffsetOutOfRange",
    "QueueRange",
    "TopicDamaged",
    "TopicInfo",
    "queue_partition",
]

_log = logging.getLogger(__name__)


class EmbeddedBus(Bus):
    """The default bus backend: topics in an `EmbeddedLog` under `root`, no server to run.

    Commits are one SQLite transaction keyed by (writer id, batch id): a micro-batch becomes
    visible all at once, exactly once. Retention (by age and size) is sluice's job here.
    """

    kind = "embedded"

    def __init__(self, root: str | os.PathLike[str], *, default_queues: int = 8) -> None:
        self.root = os.fspath(root)
        self.default_queues = default_queues
        self.log: EmbeddedLog = EmbeddedLog(self.root)
        self._damaged: set[str] = set()  # topics whose damage was logged once already

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
            try:
                if retention_ms is not None or retention_bytes is not None:
                    expired += self.log.apply_retention(
                        topic, max_age_ms=retention_ms, max_bytes=retention_bytes
                    )
                removed += self.log.remove_orphans(topic, older_than_s=orphan_age_s)
            except TopicDamaged as exc:  # nothing of it is touched: its files are the evidence
                if topic not in self._damaged:
                    _log.error("%s", exc)
                    self._damaged.add(topic)
        return {"segments_expired": expired, "orphans_removed": removed}

    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` in every existing topic's ``fences`` table (a topic created later
        records the first epoch that commits to it: see docs/distributed.md)."""
        for topic in self.log.topics():
            try:
                self.log.fence(topic, key, epoch)
            except TopicDamaged:
                continue  # whoever writes to it fails at open, fenced or not
