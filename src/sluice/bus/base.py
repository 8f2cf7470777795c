"""The bus interface: what the runtime needs from a topic backend (embedded, Kafka, RocketMQ).

A backend provides two objects:

* a :class:`TopicLog` — topic admin (create, list, per-queue offset ranges) and the three data-plane
  primitives the Spark adapters are built on:

  - ``stage`` (executor, once per task and queue): put a task's rows somewhere durable but
    *invisible* to readers, and return a small picklable :class:`StagedSegment`;
  - ``commit`` (driver, once per micro-batch and topic): make the staged rows of a micro-batch
    visible, **at most once per** ``(writer_id, batch_id)``, so a replayed batch is not appended
    twice;
  - ``read`` (executor): exactly the offsets ``[start, end)`` of one queue, so a replayed
    micro-batch reads the same records.

  A broker backend (Kafka, RocketMQ) also writes from the executors: ``part_writer``
  (executor, once per task of a micro-batch) returns a :class:`PartWriter` that sends the task's
  share of the micro-batch (its *part*, keyed by writer, batch and task) to the broker itself,
  in parallel with the other tasks, exactly once per part however often Spark runs the task;
  ``commit_parts`` (driver, once per micro-batch and topic) only records the micro-batch as
  committed (checked against the writer's lease generation) and waits until readers see it.
  Each backend's module says how a part is made exactly-once with what its broker offers; the
  staging primitives stay for writes outside a Spark micro-batch (no batch id is known there).

  A log is picklable (Spark ships it to executors) and opens its clients lazily, once per process.
* a :class:`~sluice.bus.facade.Bus` (`sluice.bus.facade`) — what the runtime holds: the log, the
  topic writer and topic reader as Spark data sources built on it (:mod:`sluice.bus.spark`), the
  reader control through which sink tasks pause, resume and reset queues, and maintenance.

Positions of a queue are RocketMQ-shaped: ``{"topic", "brokerName", "queueId"}`` →
``{"queueOffset": next offset to read}``, whatever the backend.

Errors::

    BusError                       root of what a bus raises on purpose
    ├── OffsetOutOfRange           a read asked for offsets not (or no longer) in the queue
    ├── UnknownTopic (KeyError)    the topic does not exist
    ├── WriterFenced               a commit by a writer whose epoch (a connector's lease
    │                              generation) was superseded: refused, nothing published
    ├── TopicDamaged               a topic's files disagree (an index emptied, a segment truncated
    │                              or gone): whoever opens or reads it fails, naming the file
    ├── PositionBeyondEnd          a reader's position is past its queue's end (the topic was
    │                              emptied or re-created): fails, never skips what comes next
    └── BusUnavailable             the broker cannot be reached or refused a request; retriable
                                   (also a sluice.sdk.RetriableException)
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from sluice.sdk import TIMESTAMP_TYPE, RetriableException

__all__ = [
    "STORED_SCHEMA",
    "BusError",
    "BusUnavailable",
    "OffsetOutOfRange",
    "PartWriter",
    "PositionBeyondEnd",
    "QueueRange",
    "StagedSegment",
    "TopicDamaged",
    "TopicInfo",
    "TopicLog",
    "UnknownTopic",
    "WriterFenced",
    "WrittenPart",
]

#: The columns a topic stores per record, whatever the backend: key and value bytes, the record's
#: timestamp, and its extensions (headers / user properties) as the text of a JSON object — Spark
#: hands nested types (maps) to Python ~100x slower than strings.
STORED_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("headers", pa.string()),
    ]
)


# ---------------------------------------------------------------------------------------- types
@dataclass(frozen=True)
class StagedSegment:
    """Rows staged by :meth:`TopicLog.stage` but not yet published.

    A small picklable descriptor, shipped from the process that staged the rows (a Spark executor)
    to the one that commits them (the driver). ``path`` is relative to the log's own staging place.
    Until :meth:`TopicLog.commit` publishes it the data is invisible to readers.
    """

    topic: str
    queue: int
    path: str
    rows: int
    bytes: int
    #: The writer the rows were staged for (broker backends tag messages with it at staging).
    writer: str = ""


@dataclass(frozen=True)
class WrittenPart:
    """What one task wrote of a micro-batch straight to the broker (a :class:`PartWriter`'s
    receipt): small and picklable, shipped to the driver's commit.

    ``ends`` maps each topic the part wrote to ``{queue: end offset}`` measured after the part
    was sent (at or above the part's last record), for the driver to wait until readers can
    see it. ``replayed`` says an earlier attempt of the task had written (all or some of) the
    part already, so this attempt sent nothing (or only the rest).
    """

    writer: str
    batch: int
    task: int
    rows: int
    ends: dict[str, dict[int, int]]
    replayed: bool = False


class PartWriter(ABC):
    """One task's part of a micro-batch (writer, batch, task), sent from the executor.

    The topic writer calls :meth:`add` with the part's rows per (topic, queue) in the order
    they must keep in the queue, then :meth:`finish` once (or :meth:`abort` on failure).
    Exactly once per part: an attempt that finds the part (or a prefix of it) already written
    by an earlier attempt sends only what is missing."""

    @abstractmethod
    def add(self, topic: str, queue: int, rows: pa.RecordBatch) -> None:
        """Send ``rows`` (columns of :data:`STORED_SCHEMA`) to ``topic``/``queue``, after the
        rows added before for that queue."""

    @abstractmethod
    def finish(self) -> WrittenPart:
        """Make the part durable (Kafka: commit its transaction), wait until it is readable,
        record in the journal that this task finished, and return the receipt."""

    def abort(self) -> None:
        """Give up the part (an error in the task): nothing more is sent; what a broker can
        take back (Kafka's open transaction) is taken back."""


@dataclass(frozen=True)
class QueueRange:
    """Retained offsets of one queue: ``min_offset <= offset < max_offset``.

    ``max_offset`` is the offset the next record will get (exclusive end, like RocketMQ's
    maxOffset and Kafka's high watermark); ``min_offset`` is the first record still retained.
    They are equal when the queue holds no records.
    """

    queue: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class TopicInfo:
    """A topic's name, queue count and the current offset range of each queue (by queue id)."""

    name: str
    queues: int
    ranges: list[QueueRange]


# --------------------------------------------------------------------------------------- errors
class BusError(Exception):
    """Root of the errors a bus backend raises on purpose."""


class OffsetOutOfRange(BusError):
    """A read asked for offsets that are not (or no longer) in the queue.

    Raised when ``offset < min_offset`` (removed by retention) or ``offset > max_offset``.
    """

    def __init__(
        self, topic: str, queue: int, offset: int, min_offset: int, max_offset: int
    ) -> None:
        self.topic = topic
        self.queue = queue
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        # Keep the constructor arguments as args so the exception survives pickling (e.g. when
        # it travels back from a Spark worker).
        super().__init__(topic, queue, offset, min_offset, max_offset)

    def __str__(self) -> str:
        return (
            f"offset {self.offset} out of range for topic {self.topic!r} queue {self.queue}: "
            f"retained offsets are [{self.min_offset}, {self.max_offset})"
        )


class UnknownTopic(BusError, KeyError):
    """The named topic does not exist (or was deleted)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(topic)

    def __str__(self) -> str:
        # KeyError would repr() the args; give a readable message that names the topic.
        return f"unknown topic {self.topic!r}"


class WriterFenced(BusError):
    """A commit by a writer whose epoch is older than the newest one recorded for its key (a
    connector whose lease moved to another worker): refused, nothing of it published.

    Its text starts with ``fenced:``, which is how the distributed herder recognises a query
    that failed because another worker owns it now."""

    def __init__(self, key: str, epoch: int, current: int, topic: str) -> None:
        super().__init__(
            f"fenced: writer {key!r} epoch {epoch} may no longer commit to topic {topic!r} "
            f"(epoch {current} took over)"
        )
        self.key, self.epoch, self.current, self.topic = key, epoch, current, topic

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.epoch, self.current, self.topic))


class TopicDamaged(BusError):
    """A topic's files disagree with each other: its index was emptied or truncated, or a segment
    file it lists is truncated or gone. Raised where the topic is opened or read, naming the
    file; never a reason to start the topic afresh (offsets would restart below every reader's
    position, and what was written since would be skipped)."""

    def __init__(self, topic: str, path: str, problem: str) -> None:
        super().__init__(
            f"topic {topic!r} is damaged: {path}: {problem}; restore the topic's folder from a "
            "backup, or delete the topic (its records are lost) and reset the offsets of the "
            "connectors that read it"
        )
        self.topic, self.path, self.problem = topic, path, problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.topic, self.path, self.problem))


class PositionBeyondEnd(BusError):
    """A reader's position in a queue is past the queue's end: the topic lost records it had
    (emptied, re-created). Reading on would skip every record written until the end passes the
    position again, so the reader fails instead, naming the topic and queue."""

    def __init__(self, topic: str, queue: int, position: int, end: int, reader: str) -> None:
        super().__init__(
            f"{reader}: position {position} in topic {topic!r} queue {queue} is beyond the "
            f"queue's end ({end}): the topic lost records it had (emptied or re-created?) and "
            "records written to it now would be skipped; check the topic, then set the "
            f"connector's offsets (PATCH or DELETE /v1/connectors/{reader}/offsets)"
        )
        self.topic, self.queue, self.position, self.end, self.reader = (
            topic,
            queue,
            position,
            end,
            reader,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.topic, self.queue, self.position, self.end, self.reader))


def check_commit(writer_id: str, batch_id: int, segs: Sequence[StagedSegment]) -> str:
    """Validate a commit's arguments (they cross process boundaries); returns its one topic."""
    if not isinstance(writer_id, str) or not writer_id:
        raise ValueError(f"writer_id must be a non-empty string, got {writer_id!r}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        raise ValueError(f"batch_id must be an int, got {batch_id!r}")
    topic = segs[0].topic
    for seg in segs:
        if not isinstance(seg, StagedSegment):
            raise TypeError(f"commit() needs StagedSegment objects, got {type(seg).__name__}")
        if seg.topic != topic:
            raise ValueError(
                f"all segments of one commit must belong to one topic: "
                f"got {topic!r} and {seg.topic!r}"
            )
    return topic


def raise_fence(db: Any, key: str, epoch: int, topic: str) -> None:
    """Inside a SQLite transaction on a table ``fences (fence_key TEXT PRIMARY KEY, epoch
    INTEGER)``: refuse ``epoch`` (:class:`WriterFenced`) if a newer one is recorded for ``key``,
    record it if it is newer (the stored epoch never goes down). Shared by the embedded log and
    the broker backends' commit journal."""
    row = db.execute("SELECT epoch FROM fences WHERE fence_key = ?", (key,)).fetchone()
    if row is not None and int(row[0]) > epoch:
        raise WriterFenced(key, epoch, int(row[0]), topic)
    if row is None or int(row[0]) < epoch:
        db.execute(
            "INSERT INTO fences (fence_key, epoch) VALUES (?, ?) ON CONFLICT(fence_key) "
            "DO UPDATE SET epoch = excluded.epoch",
            (key, epoch),
        )


class BusUnavailable(BusError, RetriableException):
    """The broker could not be reached, or failed a request; doing it again later may work.

    The message names the backend and the address (e.g. ``kafka bootstrap.servers=…``).
    """

    code = "bus.unavailable"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), {"suggestion": self.suggestion})


# ------------------------------------------------------------------------------------ TopicLog
class TopicLog(ABC):
    """One backend's topics: admin, plus the stage/commit/read primitives (see module docstring).

    Picklable and cheap to copy; clients are opened lazily in each process that uses them.
    Offsets of a queue are contiguous for records sluice wrote; ``read`` tolerates gaps (a
    compacted or transactional Kafka topic) by reporting each record's real offset.
    """

    #: ``brokerName`` in this backend's queue positions.
    broker_name: ClassVar[str] = ""
    #: The characters a topic name may have (a regex character class's inside) and its most:
    #: the embedded log's own rule; Kafka and RocketMQ set their brokers'.
    topic_chars: ClassVar[str] = "A-Za-z0-9._%-"
    topic_max: ClassVar[int] = 127
    #: How long reads and commits keep retrying through :class:`BusUnavailable` (a broker
    #: outage) before they fail; 0: not at all (a local log has no outages).
    outage_s: float = 0.0

    @classmethod
    def topic_name_problem(cls, topic: str) -> str | None:
        """Why ``topic`` cannot name a topic of this backend, None when it can."""
        allowed = f"[{cls.topic_chars}]{{1,{cls.topic_max}}}"
        if topic in (".", "..") or re.fullmatch(allowed, topic) is None:
            return (
                f"{topic!r} is not a valid topic name: 1-{cls.topic_max} characters of "
                f"[{cls.topic_chars}], not '.' or '..'"
            )
        return None

    #: Whether the `doorbells` ring for every write a reader could see (the embedded log: every
    #: commit rings). When False they ring for some writes only, and a reader that found nothing
    #: new looks again after `sluice.sdk.wakeup.IDLE_PAUSE_S` whether or not a bell rang.
    doorbells_ring_for_every_write = True

    def doorbells(self, topics: Sequence[str]) -> list[str]:
        """Files that change whenever one of `topics` gets new records (a reader waits on them
        when it found nothing new: see `sluice.sdk.wakeup`). Default: none, the reader asks
        again at the next trigger."""
        return []

    # -- admin ---------------------------------------------------------------------------------
    @abstractmethod
    def topics(self) -> list[str]:
        """Names of all (user) topics, sorted."""

    @abstractmethod
    def topic_exists(self, topic: str) -> bool:
        """Whether ``topic`` exists."""

    @abstractmethod
    def queue_count(self, topic: str) -> int:
        """Number of queues of ``topic``; :class:`UnknownTopic` if it does not exist."""

    @abstractmethod
    def create_topic(self, topic: str, queues: int = 8, *, exist_ok: bool = True) -> TopicInfo:
        """Create ``topic`` with ``queues`` queues (an existing topic is returned unchanged)."""

    def ensure_topic(self, topic: str, queues: int = 8) -> int:
        """The queue count of ``topic``, creating it with ``queues`` queues if it does not exist:
        what a writer asks for every topic it writes, so it skips `create_topic`'s offsets."""
        try:
            return self.queue_count(topic)
        except UnknownTopic:
            return self.create_topic(topic, queues).queues

    @abstractmethod
    def offsets(self, topic: str) -> dict[int, QueueRange]:
        """The current :class:`QueueRange` of every queue of ``topic``, keyed by queue id."""

    def describe(self, topic: str) -> TopicInfo:
        """Name, queue count and per-queue offset ranges of ``topic``."""
        ranges = self.offsets(topic)
        return TopicInfo(topic, len(ranges), [ranges[q] for q in sorted(ranges)])

    def queue_partition(self, topic: str, queue: int) -> dict[str, str]:
        """The RocketMQ-shaped position partition of one queue."""
        return {"topic": topic, "brokerName": self.broker_name, "queueId": str(queue)}

    # -- data plane ----------------------------------------------------------------------------
    @abstractmethod
    def stage(self, topic: str, queue: int, data: pa.RecordBatch | pa.Table) -> StagedSegment:
        """Executor: keep ``data`` (columns of :data:`STORED_SCHEMA`) for ``topic``/``queue``,
        invisible to readers until :meth:`commit` publishes the returned descriptor."""

    def stage_for(
        self, writer_id: str, topic: str, queue: int, data: pa.RecordBatch | pa.Table
    ) -> StagedSegment:
        """Executor: :meth:`stage` on behalf of ``writer_id`` (the topic writer calls this; a
        backend that encodes messages at staging time tags them with the writer)."""
        return self.stage(topic, queue, data)

    @abstractmethod
    def commit(
        self,
        writer_id: str,
        batch_id: int,
        segments: Sequence[StagedSegment],
        *,
        fence: tuple[str, int] | None = None,
    ) -> bool:
        """Driver: publish ``segments`` (all of one topic, in list order per queue) at most once
        per ``(writer_id, batch_id)``. Returns False if that pair was already published (the
        segments are then discarded), True otherwise. After a crash in the middle of a commit,
        committing the same batch again publishes exactly what is missing.

        With ``fence=(key, epoch)`` (distributed mode: the connector and its lease generation)
        the commit is refused with :class:`WriterFenced` once :meth:`Bus.fence` recorded a
        newer epoch for ``key``; each backend says in its docstring how the check and the
        publish are made one step."""

    @abstractmethod
    def read(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Executor: ``(offset of first row, batch)`` over the records with ``start <= offset <
        min(end, max_offset)``, in order. Batches have the :data:`STORED_SCHEMA` columns, plus an
        int64 ``offset`` column when the offsets are not contiguous. Raises
        :class:`OffsetOutOfRange` if ``start < min_offset`` or ``start > max_offset``."""

    def discard(self, segments: Sequence[StagedSegment]) -> None:
        """Forget staged segments that will never be committed (an aborted micro-batch)."""

    # -- writes from the executors (broker backends) ----------------------------------------------
    def part_writer(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        *,
        fence: tuple[str, int] | None = None,
    ) -> PartWriter | None:
        """Executor: the writer of task ``task``'s part of micro-batch ``batch_id`` of
        ``writer_id``, or None when this backend publishes only through :meth:`commit` (the
        embedded log: its commit moves whole segments). With ``fence`` a part is refused
        (:class:`WriterFenced`) once a newer lease generation was recorded."""
        return None

    def task_finished(self, writer_id: str, batch_id: int, task: int) -> bool:
        """Executor: whether task ``task`` finished its part of the micro-batch (its
        :meth:`PartWriter.finish` returned, in this or an earlier attempt). Only for backends
        with :meth:`part_writer`."""
        raise NotImplementedError(f"{type(self).__name__} writes no parts")

    def wait_task(self, writer_id: str, batch_id: int, task: int, *, timeout_s: float) -> None:
        """Executor: return once :meth:`task_finished`; :class:`BusError` after ``timeout_s``."""
        import time

        deadline = time.monotonic() + timeout_s
        pause = 0.002
        while not self.task_finished(writer_id, batch_id, task):
            if time.monotonic() > deadline:
                raise BusError(
                    f"writer {writer_id!r} batch {batch_id}: task {task} did not finish its "
                    f"part within {timeout_s:.0f}s (the next task's records follow its records "
                    "in their queues, so it waits for it)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def commit_parts(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        parts: Sequence[WrittenPart],
        *,
        fence: tuple[str, int] | None = None,
    ) -> None:
        """Driver: record micro-batch ``batch_id`` of ``writer_id`` as committed to ``topic``
        (its parts are already in the topic), refused with :class:`WriterFenced` once a newer
        lease generation was recorded, and wait (bounded) until readers see the parts."""
        raise NotImplementedError(f"{type(self).__name__} writes no parts")

    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Driver: record a consumer's next offsets per ``(topic, queue)`` under consumer group
        ``group`` where the broker's own tools show them (lag monitoring). Only informative:
        sluice reads its positions from Spark's checkpoint and the position store."""

    def close(self) -> None:
        """Close this process's clients (they reopen on demand)."""


#: Consecutive failures after which a retry loop pauses longer (RocketMQ Connect's sink task
#: backs off the same way after 16 consecutive pull errors).
BACKOFF_AFTER = 16
BACKOFF_S = 10.0


def retry_outage(
    what: str, call: Callable[[], Any], outage_s: float, *, sleep: Callable[[float], None]
) -> Any:
    """``call()``, retried through :class:`BusUnavailable` for up to ``outage_s`` seconds: after
    0.3 s, doubling up to 2 s, and 10 s after every 16 consecutive failures. Each failure is
    logged as a warning naming ``what``; the last one is raised."""
    import logging

    from sluice.sdk.retry import Backoff, retry

    logger = logging.getLogger("sluice.bus")

    def warn(exc: BaseException, failures: int, pause: float) -> None:
        logger.warning("%s failed (%d in a row), retrying in %.1fs: %s", what, failures, pause, exc)

    return retry(
        call,
        backoff=Backoff(0.3, 2.0, 2.0, long_every=BACKOFF_AFTER, long_s=BACKOFF_S),
        timeout_s=outage_s,
        retriable=lambda exc: isinstance(exc, BusUnavailable),
        on_retry=warn,
        sleep=sleep,
    )


OUTAGE_KEY = "bus.outage.timeout.ms"
REQUEST_KEY = "bus.request.timeout.ms"


def outage_seconds(props: Mapping[str, str]) -> float:
    """The worker key ``bus.outage.timeout.ms`` (default 300000) in seconds, validated."""
    return _seconds(props, OUTAGE_KEY, 300_000, least=0)


def request_seconds(props: Mapping[str, str]) -> float:
    """The worker key ``bus.request.timeout.ms`` (default 30000) in seconds, validated: how long
    one request to a Kafka broker may wait before it counts as a failure (then retried through
    ``bus.outage.timeout.ms``; the tasks' status says so from the first failure on)."""
    return _seconds(props, REQUEST_KEY, 30_000, least=1)


def _seconds(props: Mapping[str, str], key: str, default: int, *, least: int) -> float:
    from sluice.sdk import ConfigException

    raw = str(props.get(key, default)).strip()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigException(key, f"expected an integer, got {raw!r}") from None
    if value < least:
        raise ConfigException(key, f"must be at least {least}, got {value}")
    return value / 1000.0
