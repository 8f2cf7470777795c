"""The bus as the runtime holds it: a backend's topic log and the Spark adapters on it.

`sluice.bus.base` declares what a backend provides (`TopicLog`, the shared types and errors);
`sluice.bus.spark` builds the topic writer and reader on a log; this module joins the two, so
that neither of them imports the other's user.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from sluice.bus.base import TopicInfo, TopicLog

if TYPE_CHECKING:  # Spark's data source module loads pyspark: only its types are needed here
    from pyspark.sql.datasource import DataSource

    from sluice.bus.spark import ReaderControl, TopicWriterPlan


class Bus(ABC):
    """A topic backend as the runtime uses it: a :class:`TopicLog` plus Spark adapters on it.

    Subclasses set ``log`` and ``default_queues`` and implement :meth:`maintain`; the topic
    writer, topic reader and reader control are the shared ones of :mod:`sluice.bus.spark`, so
    every backend has the same delivery guarantees and the same pause/resume/reset behaviour.
    """

    #: The worker config's ``bus=`` value for this backend.
    kind: ClassVar[str] = ""
    log: TopicLog
    default_queues: int

    # -- admin ---------------------------------------------------------------------------------
    def topic_name_problem(self, topic: str) -> str | None:
        """Why ``topic`` cannot name a topic on this bus, None when it can."""
        return self.log.topic_name_problem(topic)

    def create_topic(self, topic: str, queues: int | None = None) -> TopicInfo:
        """Create ``topic`` (default queue count if ``queues`` is None); existing ones are kept."""
        return self.log.create_topic(topic, queues or self.default_queues)

    def describe(self, topic: str) -> TopicInfo:
        """Name, queue count and per-queue offset ranges of ``topic``."""
        return self.log.describe(topic)

    def count(self, topic: str) -> int:
        """Records currently retained in `topic` (0 if it does not exist yet)."""
        if not self.log.topic_exists(topic):
            return 0
        return sum(r.max_offset - r.min_offset for r in self.log.offsets(topic).values())

    def queue_partition(self, topic: str, queue: int) -> dict[str, str]:
        """The position partition of one queue (what the offsets API shows)."""
        return self.log.queue_partition(topic, queue)

    @abstractmethod
    def maintain(
        self,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        orphan_age_s: float = 3600.0,
    ) -> dict[str, int]:
        """Apply retention where sluice owns it and clean up after writers that died.

        Returns ``{"segments_expired": n, "orphans_removed": m}``. Called every minute by the
        runner; never raises for a transient broker problem (the next round tries again).
        """

    def close(self) -> None:
        """Release clients held by this process."""
        self.log.close()

    @abstractmethod
    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` as the newest of writer ``key`` (never lowers it): from now on every
        commit made with ``fence=(key, older epoch)`` is refused with :class:`WriterFenced`.

        Called by a worker that took a connector's lease, before it starts the connector's
        query, so the previous owner (a zombie) can no longer publish to any topic."""

    def keep_journal(self, journal: Any) -> None:
        """Keep the commit journal in ``journal`` (the PostgreSQL cluster store's, in
        distributed mode) instead of the default file under the bus's state directory. A bus
        that has no journal (the embedded log commits in its own files) ignores it."""

    # -- Spark adapters ------------------------------------------------------------------------
    def topic_appender(
        self, *, writer_id: str, fence: tuple[str, int] | None = None, notes: Any = None
    ) -> TopicWriterPlan:
        """The topic writer as a plain object (for fused pipelines: `write` + `commit`).

        `fence=(key, epoch)` makes every commit check the writer's epoch (see `fence`);
        `notes` (`sluice.bus.spark.TaskNotes`) is whose status shows its retries."""
        from sluice.bus.spark import TopicWriterPlan

        return TopicWriterPlan(self.log, writer_id, self.default_queues, fence, notes)

    def topic_writer(
        self, *, writer_id: str, fence: tuple[str, int] | None = None, notes: Any = None
    ) -> type[DataSource]:
        """A Spark data source class whose stream writer appends to topics exactly once."""
        from sluice.bus.spark import topic_writer

        return topic_writer(self.topic_appender(writer_id=writer_id, fence=fence, notes=notes))

    def reader_control(self, path: str) -> ReaderControl:
        """Where sink tasks' pause/resume/reset requests are kept for the reader."""
        from sluice.bus.spark import ReaderControl

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
        group: str | None = None,
        consume_from: str = "first",
        notes: Any = None,
        idle_wait_s: float | None = None,
        delayed: Mapping[str, str] | None = None,
    ) -> type[DataSource]:
        """A Spark data source class that reads ``topics`` in exact, replayable queue ranges.

        ``positions`` (a position store) gives a new query its start; queues without a stored
        position start at their first offset, or at their end with ``consume_from="last"``
        (RocketMQ's ``consume.from.where`` values ``CONSUME_FROM_FIRST_OFFSET`` /
        ``CONSUME_FROM_LAST_OFFSET`` are accepted too). ``group`` (default ``connect-<name>``)
        is the consumer group the committed offsets are shown under. ``notes``
        (`sluice.bus.spark.TaskNotes`) is whose status shows the reader's broker failures.
        ``idle_wait_s`` bounds how long an idle reader waits for the topics to grow within one
        trigger (default: `sluice.sdk.wakeup.IDLE_WAIT_S`). ``delayed`` (topic -> due-time
        header) names topics read as delay queues: a queue only up to its first record not due.
        """
        from sluice.bus.spark import ReaderControl, TopicReaderPlan, topic_reader
        from sluice.sdk import ConfigException

        where = {
            "first": "first",
            "last": "last",
            "CONSUME_FROM_FIRST_OFFSET": "first",
            "CONSUME_FROM_LAST_OFFSET": "last",
        }.get(consume_from)
        if where is None:
            raise ConfigException(
                "consume.from.where",
                "expected CONSUME_FROM_FIRST_OFFSET or CONSUME_FROM_LAST_OFFSET, "
                f"got {consume_from!r}",
            )

        plan = TopicReaderPlan(
            name=name,
            log=self.log,
            topics=tuple(topics),
            max_tasks=max(1, max_tasks),
            max_rows=max_rows,
            split_queues=split_queues,
            control=ReaderControl(control_path),
            positions=positions,
            downstream=downstream,
            downstream_ddl=downstream_ddl,
            group=group or f"connect-{name}",
            consume_from=where,
            notes=notes,
            delayed=dict(delayed or {}),
            **({} if idle_wait_s is None else {"idle_wait_s": idle_wait_s}),
        )
        return topic_reader(plan)
