"""The topic writer and topic reader, as Spark Python data sources, for every bus backend.

Both are built on a :class:`~sluice.bus.base.TopicLog`, so the embedded log, Kafka and RocketMQ
share one implementation of the delivery guarantees.

Writer: each Spark task routes its rows to (topic, queue) and then, depending on the backend:

* **from the executor** (Kafka, RocketMQ, inside a Spark micro-batch): the task sends its *part*
  of the micro-batch to the broker itself through ``TopicLog.part_writer`` (exactly once per
  (writer, batch, task), see each backend), and the driver-side ``commit(messages, batchId)``
  only records the micro-batch as committed (``TopicLog.commit_parts``, fenced by the lease
  generation in distributed mode). The micro-batch id comes from Spark's task-local property
  ``streaming.sql.batchId``.
* **staged** (the embedded log, and any write outside a micro-batch): the task stages its rows
  with ``TopicLog.stage`` (invisible to readers); the driver-side commit publishes them with
  ``TopicLog.commit(writer_id, batchId, …)``, which ignores a batch it has already published —
  a replayed micro-batch is not appended twice. Segments are published in task order.

Order in a queue: records of one task keep their order in each queue. Records of one source
range keep it too when Spark cut the range over several tasks (the engine does when
``max.tasks`` exceeds a batch's ranges): the staged path publishes tasks in order; on the
executor path a task whose records follow its predecessor's in their queues (the engine marks
such a task's frames with :data:`FOLLOWS_KEY`; on the JVM path every task is taken to follow)
reads and buffers its rows while task *p - 1* writes, and sends them once *p - 1* finished its
part (the journal says so), so a queue holds *p - 1*'s records, then *p*'s. Tasks that do not
follow one another send in parallel.

Queue selection: a record with a key goes to ``crc32(key) % queues`` (one key stays ordered), one
without a key but with a source partition to that partition's hash (one file stays ordered), others
round-robin (the ``route`` column computed by the engine says which).

Reader: the Spark offset is ``{"q": {"topic/queue": next_offset}, "r": {…}, "rid": [...]}``: the
next offset per queue, plus the explicit start of queues that are new or were reset in this batch
("r") and the ids of the reset requests applied ("rid"), so a replayed batch reads the same ranges.
Queues that appear in a topic while the query runs are picked up at their first retained offset.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sluice.bus.base import (
    BACKOFF_AFTER,
    BACKOFF_S,
    STORED_SCHEMA,
    BusUnavailable,
    OffsetOutOfRange,
    PartWriter,
    PositionBeyondEnd,
    StagedSegment,
    TopicLog,
    WrittenPart,
    retry_outage,
)
from sluice.sdk import RecordOffset, partition_key
from sluice.sdk.retry import RetryWatcher, watching
from sluice.sdk.wakeup import IDLE_PAUSE_S, IDLE_WAIT_S, FileWatch, wait_for_new

log = logging.getLogger(__name__)

__all__ = [
    "FOLLOWS_KEY",
    "READ_DDL",
    "STORED_SCHEMA",
    "ReaderControl",
    "TopicReaderPlan",
    "TopicWriterPlan",
    "topic_reader",
    "topic_writer",
]

READ_DDL = (
    "topic string, queue_id int, queue_offset bigint, key binary, value binary, "
    "timestamp timestamp, headers string"
)
_STAGE_BYTES = 64 << 20  # stage a queue's buffer once it holds this much: bounded memory

#: The retry notes of the connector a writer or reader works for (the runner passes
#: `sluice.engine.retry.ConnectorNotes`): called with a Spark partition, the watcher of the task
#: that partition reads; with None, of every task (a commit or a plan holds them all up).
TaskNotes = Callable[[int | None], RetryWatcher]


def _noting(notes: TaskNotes | None, partition: int | None = None) -> Any:
    """A context in which the bus's retry loops keep the connector's status notes (see
    `TaskNotes`): a broker outage shows as its tasks' `retrying`."""
    return watching(notes(partition)) if notes is not None else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------- writer
def by_queue(
    rows: pa.RecordBatch, target: pa.Array, queues: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """`(queue, rows)` of each queue `target` sends rows to, in queue order, each queue's rows in
    their order in `rows`. One stable sort and one copy of the batch, then slices: a filter per
    queue scanned and copied the whole batch once per queue (8 by default), the costliest step
    of staging a CDC snapshot's chunk (py-spy)."""
    queue_of = target.to_numpy(zero_copy_only=False)
    counts = np.bincount(queue_of, minlength=queues)
    if np.count_nonzero(counts) == 1:
        yield int(np.flatnonzero(counts)[0]), rows
        return
    grouped = rows.take(pa.array(np.argsort(queue_of, kind="stable")))
    start = 0
    for queue in np.flatnonzero(counts):
        yield int(queue), grouped.slice(start, int(counts[queue]))
        start += int(counts[queue])


def _modulo(values: pa.Array, n: int) -> pa.Array:
    # values are non-negative: integer division truncates, so this is the remainder
    return pc.subtract(values, pc.multiply(pc.divide(values, n), n))


#: Schema metadata of a topic frame whose task's records follow the previous task's in their
#: queues (the engine cut one source range over both tasks): written by
#: `sluice.engine.source` (same literal there), read by the topic writer.
FOLLOWS_KEY = b"sluice.follows"
#: How long a task whose records follow its predecessor's waits for it (a last resort: a task
#: that fails fails its stage, which stops the tasks waiting for it).
_FOLLOW_TIMEOUT_S = 1800.0


def spark_batch_id() -> int | None:
    """The micro-batch this Spark task belongs to (the local property Spark's streaming engine
    sets for every task of a micro-batch), or None outside one."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class TopicWriterPlan:
    """Where and as whom a source query writes topics; also usable directly (fused pipelines).

    `write` (executor) routes a task's rows — columns `topic, key, value, timestamp, headers,
    route` — per (topic, queue) and either sends them (a broker bus inside a micro-batch: the
    receipt is a `WrittenPart`) or stages them (the receipt is the staged segments); `commit`
    (driver) records or publishes the receipts of all tasks of a micro-batch, once per (writer
    id, batch id). See the module docstring.
    """

    log: TopicLog
    writer_id: str
    default_queues: int = 8
    #: `(key, epoch)` of a fenced writer (distributed mode): each commit is checked against the
    #: newest epoch recorded by `Bus.fence` (see each backend for how)
    fence: tuple[str, int] | None = None
    #: Whose status shows this writer's retries through an outage (none: nobody's).
    notes: TaskNotes | None = field(default=None, compare=False)

    @property
    def format_name(self) -> str:
        return f"sluice-topic-writer-{self.writer_id}"

    def write(
        self,
        batches: Iterator[pa.RecordBatch],
        partition_id: int,
        *,
        batch_id: int | None = None,
        ordered: bool = False,
    ) -> list[StagedSegment] | WrittenPart:
        """Executor: route and write one task's rows. ``batch_id`` defaults to the Spark
        micro-batch of the calling task; ``ordered`` makes the task's records follow task
        ``partition_id - 1``'s in their queues (else frames marked :data:`FOLLOWS_KEY` do)."""
        if batch_id is None:
            batch_id = spark_batch_id()
        if batch_id is not None and batch_id >= 0:
            parts = _PartSender(self, partition_id, batch_id, ordered)
            if parts.possible():
                return parts.run(batches)
        return self._stage(batches, partition_id)

    def _stage(self, batches: Iterator[pa.RecordBatch], partition_id: int) -> list[StagedSegment]:
        the_log = self.log
        buffers: dict[tuple[str, int], list[pa.RecordBatch]] = {}
        sizes: dict[tuple[str, int], int] = {}
        staged: list[StagedSegment] = []

        def stage(slot: tuple[str, int]) -> None:
            parts = buffers.pop(slot, [])
            sizes.pop(slot, None)
            if parts:
                table = pa.Table.from_batches(parts)
                staged.append(the_log.stage_for(self.writer_id, slot[0], slot[1], table))

        for topic, queue, rows in self.routed(batches, partition_id):
            slot = (topic, queue)
            buffers.setdefault(slot, []).append(rows)
            sizes[slot] = sizes.get(slot, 0) + rows.nbytes
            if sizes[slot] >= _STAGE_BYTES:
                stage(slot)
        for slot in list(buffers):
            stage(slot)
        return staged

    def routed(
        self, batches: Iterator[pa.RecordBatch], partition_id: int
    ) -> Iterator[tuple[str, int, pa.RecordBatch]]:
        """``(topic, queue, rows)`` of a task's batches in order (rows in ``STORED_SCHEMA``),
        creating topics on first sight."""
        the_log = self.log
        queues: dict[str, int] = {}
        rotation = partition_id
        for batch in batches:
            if not batch.num_rows:
                continue
            topics = batch.column("topic")
            distinct = topics.unique()
            for topic in distinct.to_pylist():
                if topic is None:
                    raise ValueError("a record has no topic: set connect.topicname or its topic")
                part = batch if len(distinct) == 1 else batch.filter(pc.equal(topics, topic))
                if topic not in queues:
                    with _noting(self.notes):  # partitions of a source are not its tasks
                        queues[topic] = retry_outage(
                            f"topic {topic!r}",
                            lambda t=topic: the_log.ensure_topic(t, self.default_queues),
                            the_log.outage_s,
                            sleep=time.sleep,
                        )
                route = part.column("route")
                if route.null_count:
                    # no key, no source partition: round-robin, continuing across batches
                    spread = pc.add(_arange(len(route)), pa.scalar(rotation, pa.int64()))
                    rotation += len(route)
                    route = pc.coalesce(route.cast(pa.int64()), spread)
                target = _modulo(route, queues[topic])
                stored = pa.RecordBatch.from_arrays(
                    [part.column(f.name).cast(f.type) for f in STORED_SCHEMA], schema=STORED_SCHEMA
                )
                yield from ((topic, q, rows) for q, rows in by_queue(stored, target, queues[topic]))

    def commit(self, receipts: list[Any], batch_id: int) -> None:
        """Driver: publish (staged) or record (sent) the receipts of a micro-batch's tasks."""
        by_topic: dict[str, list[StagedSegment]] = {}
        sent: dict[str, list[WrittenPart]] = {}
        for receipt in receipts:
            if isinstance(receipt, WrittenPart):
                if receipt.batch != batch_id or receipt.writer != self.writer_id:
                    raise ValueError(
                        f"a part of writer {receipt.writer!r} batch {receipt.batch} was "
                        f"committed as writer {self.writer_id!r} batch {batch_id}"
                    )
                for topic in receipt.ends:
                    sent.setdefault(topic, []).append(receipt)
                continue
            for segment in receipt or []:
                by_topic.setdefault(segment.topic, []).append(segment)
        with _noting(self.notes):
            for topic, parts in sorted(sent.items()):
                retry_outage(
                    f"commit of {self.writer_id} batch {batch_id} to topic {topic!r}",
                    lambda t=topic, p=parts: self.log.commit_parts(
                        self.writer_id, batch_id, t, p, fence=self.fence
                    ),
                    self.log.outage_s,
                    sleep=time.sleep,
                )
            for _topic, segments in sorted(by_topic.items()):
                self.log.commit(self.writer_id, batch_id, segments, fence=self.fence)

    def abort(self, receipts: list[Any], batch_id: int) -> None:
        """Driver: a micro-batch that will not commit. Staged rows are dropped; parts already
        sent stay (the replay of the batch finds them and sends nothing again)."""
        self.log.discard([s for r in receipts if not isinstance(r, WrittenPart) for s in r or []])


class _PartSender:
    """One task's part on the executor path (see the module docstring): routes the rows to the
    backend's `PartWriter`, holding them back while the task waits for its predecessor."""

    #: Rows held back while waiting for the predecessor before the task just waits (memory).
    HOLD_BYTES = 256 << 20

    def __init__(self, plan: TopicWriterPlan, task: int, batch: int, ordered: bool) -> None:
        self.plan, self.task, self.batch, self.ordered = plan, task, batch, ordered
        self.writer: PartWriter | None = None
        self.held: list[tuple[str, int, pa.RecordBatch]] = []
        self.held_bytes = 0
        # for the predecessor: known before any frame on the JVM path (a task without frames
        # still waits), else said by the frames (the engine's first one may have no rows)
        self.waiting = task > 0 and ordered
        self.checked = 0.0

    def possible(self) -> bool:
        self.writer = self.plan.log.part_writer(
            self.plan.writer_id, self.batch, self.task, fence=self.plan.fence
        )
        return self.writer is not None

    def _frames(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, noting from those up to the first with rows whether this task follows
        its predecessor. A marked frame without rows counts: a partition whose source range
        gave no records still finishes only after its predecessor, or the task after it would
        be released too early and send before that one."""
        deciding = self.task > 0
        for batch in batches:
            if deciding:
                if (batch.schema.metadata or {}).get(FOLLOWS_KEY) == b"1":
                    self.waiting = True
                deciding = not batch.num_rows
            yield batch

    def _released(self, *, block: bool) -> bool:
        """Whether the predecessor finished (blocking: wait for it)."""
        if not self.waiting:
            return True
        log, plan = self.plan.log, self.plan
        if block:
            log.wait_task(plan.writer_id, self.batch, self.task - 1, timeout_s=_FOLLOW_TIMEOUT_S)
            self.waiting = False
            return True
        now = time.monotonic()
        if now - self.checked < 0.005:  # a journal read at most every 5 ms
            return False
        self.checked = now
        if not log.task_finished(plan.writer_id, self.batch, self.task - 1):
            return False
        self.waiting = False
        return True

    def run(self, batches: Iterator[pa.RecordBatch]) -> WrittenPart:
        writer = self.writer
        assert writer is not None
        try:
            for piece in self.plan.routed(self._frames(batches), self.task):
                if self.waiting:
                    self.held.append(piece)
                    self.held_bytes += piece[2].nbytes
                    if self._released(block=self.held_bytes >= self.HOLD_BYTES):
                        self._flush_held()
                    continue
                writer.add(*piece)
            self._released(block=True)
            self._flush_held()
            return writer.finish()
        except BaseException:
            writer.abort()
            raise

    def _flush_held(self) -> None:
        held, self.held, self.held_bytes = self.held, [], 0
        for topic, queue, rows in held:
            self.writer.add(topic, queue, rows)  # type: ignore[union-attr]


@dataclass
class _Staged(WriterCommitMessage):
    partition: int
    receipt: Any


def topic_writer(plan: TopicWriterPlan) -> type[DataSource]:
    """A DataSource class (bound to `plan`) whose stream writer appends to topics."""
    return type(
        f"SluiceTopicWriter_{abs(hash(plan.format_name))}",
        (_WriterSource,),
        {"plan": plan, "__module__": __name__},
    )


class _WriterSource(DataSource):
    plan: TopicWriterPlan

    @classmethod
    def name(cls) -> str:
        return cls.plan.format_name

    def streamWriter(self, schema: Any, overwrite: bool) -> _TopicWriter:
        return _TopicWriter(self.plan)


class _TopicWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: TopicWriterPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Staged:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition_id = ctx.partitionId() if ctx else 0
        # On the JVM path the writer cannot tell which tasks continue a cut source range:
        # every task's records follow its predecessor's (the order of the staged path).
        return _Staged(partition_id, self.plan.write(iterator, partition_id, ordered=True))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ordered = sorted((m for m in messages if isinstance(m, _Staged)), key=lambda m: m.partition)
        self.plan.commit([m.receipt for m in ordered], batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.plan.abort([m.receipt if isinstance(m, _Staged) else None for m in messages], batchId)


# ---------------------------------------------------------------------------------------- control
@dataclass(frozen=True)
class ReaderControl:
    """Pause/resume/reset requests from sink tasks, kept in a small JSON file for the reader."""

    path: str

    def _update(self, change: Any) -> dict:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.load()
            change(state)
            tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w") as f:
                json.dump(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            return state

    def load(self) -> dict:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"paused": [], "resets": {}}

    def apply(self, requests: list[dict[str, Any]]) -> None:
        """Record requests from `SinkTaskContext` (called by the sink's commit)."""

        def change(state: dict) -> None:
            for req in requests:
                part = req["partition"]
                key = f"{part['topic']}/{int(part['queueId'])}"
                if req["op"] == "pause" and key not in state["paused"]:
                    state["paused"].append(key)
                elif req["op"] == "resume" and key in state["paused"]:
                    state["paused"].remove(key)
                elif req["op"] == "reset":
                    state["resets"][uuid.uuid4().hex] = [key, int(req["offset"]["queueOffset"])]

        self._update(change)

    def acknowledge(self, reset_ids: list[str]) -> None:
        """Forget resets that a committed micro-batch applied."""
        if reset_ids:
            self._update(lambda state: [state["resets"].pop(i, None) for i in reset_ids])


# ---------------------------------------------------------------------------------------- reader
@dataclass(frozen=True)
class TopicReaderPlan:
    """What a sink query reads: topics of a log, grouped into at most `max_tasks` partitions."""

    name: str
    log: TopicLog
    topics: tuple[str, ...]
    max_tasks: int = 1
    max_rows: int | None = None
    split_queues: bool = False
    control: ReaderControl | None = None
    positions: Any = field(default=None, compare=False)
    #: Fused pipelines: consumes the rows a task read and yields what the query outputs instead
    #: (e.g. a sink's commit receipt), so records never cross into the JVM. Output schema:
    #: `downstream_ddl`.
    downstream: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = field(
        default=None, compare=False
    )
    downstream_ddl: str | None = None
    #: Consumer group under which committed offsets are shown by the broker's tools.
    group: str | None = None
    #: Where a queue with no stored position starts when the query starts: its first retained
    #: offset ("first") or its current end ("last", RocketMQ's CONSUME_FROM_LAST_OFFSET).
    #: Queues that appear later always start at their first offset.
    consume_from: str = "first"
    #: Whose status shows the reader's broker failures (none: only the log does).
    notes: TaskNotes | None = field(default=None, compare=False)
    #: How long `latestOffset` waits for the topics' doorbells (or the control file) when
    #: nothing is new (see `sluice.sdk.wakeup.idle_wait`).
    idle_wait_s: float = IDLE_WAIT_S
    #: Delayed topics (a push sink's retry topic): topic -> the header holding each record's due
    #: time (unix seconds). A queue of one is read only up to its first record not yet due, so
    #: a record waits in the topic, not in a micro-batch that would park it again.
    delayed: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def format_name(self) -> str:
        return f"sluice-topic-reader-{self.name}"


def topic_reader(plan: TopicReaderPlan) -> type[DataSource]:
    """A DataSource class (bound to `plan`) whose stream reader reads topics."""
    return type(
        f"SluiceTopicReader_{abs(hash(plan.format_name))}",
        (_ReaderSource,),
        {"plan": plan, "__module__": __name__},
    )


class _ReaderSource(DataSource):
    plan: TopicReaderPlan

    @classmethod
    def name(cls) -> str:
        return cls.plan.format_name

    def schema(self) -> str:
        return self.plan.downstream_ddl or READ_DDL

    def streamReader(self, schema: Any) -> _TopicReader:
        return _TopicReader(self.plan)


def _split(key: str) -> tuple[str, int]:
    topic, queue = key.rsplit("/", 1)
    return topic, int(queue)


class _TopicReader(DataSourceStreamReader):
    def __init__(self, plan: TopicReaderPlan) -> None:
        self.plan = plan
        self.log = plan.log
        self._initial: dict | None = None
        self._group_offsets: dict[str, int] = {}
        self._failures = 0
        self._outage: RetryWatcher | None = None  # the tasks' notes while planning fails
        self._bells: FileWatch | None = None
        #: per queue of a delayed topic: (offset, due time) of its first record not due yet
        self._held: dict[tuple[str, int], tuple[int, float]] = {}

    def _watch(self) -> FileWatch | None:
        """The topics' doorbells (the embedded log rings one per commit) and the control file
        (an offsets reset): an idle reader wakes when either changes (see `sluice.sdk.wakeup`)."""
        if self._bells is None:
            paths = self.log.doorbells(self.plan.topics)
            if not paths:
                return None
            if self.plan.control is not None:
                paths.append(self.plan.control.path)
            self._bells = FileWatch(paths)
        return self._bells

    def initialOffset(self) -> dict:
        # Spark asks again when it plans batch 0: answer the same both times.
        if self._initial is None:
            self._initial = self._stored_start()
        return self._initial

    def _stored_start(self) -> dict:
        stored = self.plan.positions.load(self.plan.name) if self.plan.positions else {}
        start: dict[str, int] = {}
        for topic in self.plan.topics:
            if not self.log.topic_exists(topic):
                continue
            ends = self.log.offsets(topic) if self.plan.consume_from == "last" else {}
            for queue in range(self.log.queue_count(topic)):
                offset = stored.get(partition_key(self.log.queue_partition(topic, queue)))
                if offset is not None:
                    start[f"{topic}/{queue}"] = int(offset["queueOffset"])
                elif queue in ends:
                    start[f"{topic}/{queue}"] = ends[queue].max_offset
        return {"q": start}

    def getDefaultReadLimit(self) -> Any:
        if self.plan.max_rows:
            return ReadMaxRows(self.plan.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        try:
            wait_s = self.plan.idle_wait_s
            if not self.log.doorbells_ring_for_every_write:
                wait_s = min(wait_s, IDLE_PAUSE_S)  # the bells only hurry the next look
            end = wait_for_new(
                self._watch(),
                start,
                lambda: self._latest(start, limit),
                wait_s,
                unchanged=lambda end: (
                    end["q"] == start.get("q", {}) and not end["r"] and not end["rid"]
                ),
            )
        except BusUnavailable as exc:
            # A broker outage is not the query's failure: plan nothing now and ask again next
            # trigger; after 16 failures in a row, pause 10 s. Every task's status says it
            # retries meanwhile (nothing is read for any of them).
            self._failures += 1
            log.warning(
                "%s: topic offsets unavailable (%d in a row): %s",
                self.plan.name,
                self._failures,
                exc,
            )
            pause = BACKOFF_S if self._failures % BACKOFF_AFTER == 0 else 0.0
            if self._outage is None and self.plan.notes is not None:
                self._outage = self.plan.notes(None)
            if self._outage is not None:
                self._outage.retrying(exc, pause)
            if pause:
                log.warning(
                    "%s: backing off %.0fs after %d failures", self.plan.name, pause, self._failures
                )
                time.sleep(pause)
            return start
        if self._failures:
            log.info(
                "%s: the broker answers again after %d failures", self.plan.name, self._failures
            )
            self._failures = 0
            if self._outage is not None:
                self._outage.settled()
        return end

    def _latest(self, start: dict, limit: Any) -> dict:
        begin: dict[str, int] = start.get("q", {})
        control = self.plan.control.load() if self.plan.control else {"paused": [], "resets": {}}
        done = set(start.get("rid", []))
        resets = {rid: kv for rid, kv in control["resets"].items() if rid not in done}
        reset_at = {key: offset for key, offset in resets.values()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end: dict[str, int] = {}
        explicit: dict[str, int] = {}
        for topic in self.plan.topics:
            if not self.log.topic_exists(topic):
                continue
            for queue, rng in self.log.offsets(topic).items():
                key = f"{topic}/{queue}"
                if key in reset_at:
                    first = explicit[key] = max(rng.min_offset, min(reset_at[key], rng.max_offset))
                elif key in begin:
                    first = begin[key]
                    if first > rng.max_offset:  # never wait there, skipping what comes first
                        raise PositionBeyondEnd(topic, queue, first, rng.max_offset, self.plan.name)
                else:
                    first = explicit[key] = rng.min_offset
                last = first if key in control["paused"] else rng.max_offset
                if topic in self.plan.delayed and last > first:
                    last = self._due_end(topic, queue, first, last)
                if max_rows is not None:
                    last = min(last, first + max_rows)
                end[key] = max(first, last)
        # A queue the broker does not show right now (its topic's route is missing while a
        # broker restarts) keeps its position: it must not come back as a "new" queue read from
        # its first offset.
        for key, offset in begin.items():
            end.setdefault(key, offset)
        # Spark plans a batch once the previous one is done: `start` is what the sink has taken.
        # Spark calls commit() only when there is a next batch, so an idle query shows its lag
        # on the broker through this. Only once the broker answered: a consumer-group commit
        # (Kafka's) waits for it, and the outage must reach the status first.
        self._commit_group(begin)
        return {"q": end, "r": explicit, "rid": sorted(resets)}

    def _due_end(self, topic: str, queue: int, first: int, last: int) -> int:
        """Where reading a delayed topic's queue stops now: at its first record whose due time
        is still ahead (a delay queue: what comes after it waits too, as behind a RocketMQ delay
        level). Scans only what it has not held before; a record whose due header is missing
        or unreadable is due."""
        now = time.time()
        held = self._held.get((topic, queue))
        if held is not None and first <= held[0] < last and held[1] > now:
            return held[0]
        header = self.plan.delayed[topic]
        try:
            # the log's own batches (headers only are looked at), not the reader's rows
            for base, batch in self.log.read(topic, queue, first, last):
                texts = batch.column("headers").to_pylist()
                if "offset" in batch.schema.names:
                    offsets = batch.column("offset").to_pylist()
                else:
                    offsets = list(range(base, base + len(texts)))
                for offset, text in zip(offsets, texts, strict=True):
                    due = _due_time(text, header)
                    if due is not None and due > now:
                        self._held[(topic, queue)] = (offset, due)
                        return offset
        except Exception as exc:  # never fail the query for a look-ahead: read it as before
            log.warning("%s: cannot look ahead in %s/%d: %s", self.plan.name, topic, queue, exc)
        self._held.pop((topic, queue), None)
        return last

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop, explicit = start.get("q", {}), end.get("q", {}), end.get("r", {})
        ranges = []
        for key in sorted(stop):
            first = explicit.get(key, begin.get(key, 0))
            if stop[key] > first:
                topic, queue = _split(key)
                ranges.append((topic, queue, first, stop[key]))
        if self.plan.split_queues and 0 < len(ranges) < self.plan.max_tasks:
            # The sink commits task results in task order: one queue may span several tasks.
            parts = self.plan.max_tasks // len(ranges)
            cut = []
            for topic, queue, first, last in ranges:
                bounds = sorted(
                    {first + (last - first) * k // parts for k in range(parts)} | {last}
                )
                cut.extend((topic, queue, lo, hi) for lo, hi in itertools.pairwise(bounds))
            return [InputPartition([r]) for r in cut]
        groups: dict[int, list[tuple[str, int, int, int]]] = {}
        for index, item in enumerate(ranges):
            groups.setdefault(index % self.plan.max_tasks, []).append(item)
        return [InputPartition(group) for _, group in sorted(groups.items())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.plan.downstream is not None:
            return self.plan.downstream(self._rows(partition))
        return self._rows(partition)

    def _rows(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        the_log = self.plan.log
        ctx = TaskContext.get()
        partition_id = ctx.partitionId() if ctx else 0

        def read(topic: str, queue: int, first: int, stop: int) -> list[pa.RecordBatch]:
            # An exact range reads the same records again: through an outage, just retry (the
            # task reading this partition notes it; not around a `yield`, which would leave
            # the thread's watcher set while suspended).
            with _noting(self.plan.notes, partition_id):
                return retry_outage(
                    f"read of {topic}/{queue} [{first}, {stop})",
                    lambda: list(read_range(the_log, topic, queue, first, stop)),
                    the_log.outage_s,
                    sleep=time.sleep,
                )

        for topic, queue, first, stop in partition.value:
            try:
                chunks = read(topic, queue, first, stop)
            except OffsetOutOfRange as exc:
                # Retention removed the start of the range: deliver what is left, say so.
                log.warning("%s: reading from %s instead (retention)", exc, exc.min_offset)
                chunks = read(topic, queue, exc.min_offset, stop)
            yield from chunks

    def commit(self, end: dict) -> None:
        if end.get("q"):
            if self.plan.positions is not None:
                positions: dict[str, RecordOffset] = {
                    partition_key(self.log.queue_partition(*_split(key))): {"queueOffset": offset}
                    for key, offset in end["q"].items()
                }
                self.plan.positions.save(self.plan.name, positions)
            self._commit_group(end["q"])
        if self.plan.control is not None:
            self.plan.control.acknowledge(end.get("rid", []))

    def stop(self) -> None:
        if self._bells is not None:
            self._bells.close()

    def _commit_group(self, offsets: dict[str, int]) -> None:
        """Show ``offsets`` under the plan's consumer group on the broker (monitoring only)."""
        if not self.plan.group or not offsets or offsets == self._group_offsets:
            return
        try:
            self.log.commit_group_offsets(
                self.plan.group, {_split(key): offset for key, offset in offsets.items()}
            )
        except Exception as exc:  # monitoring only: never fail a committed batch for it
            log.warning("%s: consumer-group offsets not committed: %s", self.plan.name, exc)
        else:
            self._group_offsets = dict(offsets)


_OFFSETS_CACHE: dict[str, pa.Array] = {}


def _arange(n: int) -> pa.Array:
    """0..n-1 as int64, sliced from a cache that grows to the next power of two of the largest
    batch this process has seen: a fixed 1M-entry cache was 8 MiB of private memory in every
    Python worker of a trickled pipeline (found in `/proc/<pid>/mem` of an idle task worker)."""
    cached = _OFFSETS_CACHE.get("a")
    if cached is None or len(cached) < n:
        cached = pa.array(np.arange(max(1024, 1 << (n - 1).bit_length()), dtype=np.int64))
        _OFFSETS_CACHE["a"] = cached
    return cached.slice(0, n)


def _due_time(headers: str | None, name: str) -> float | None:
    """The due time a record's headers (stored JSON text) carry under `name`, or None."""
    if not headers or name not in headers:
        return None
    try:
        return float(json.loads(headers)[name])
    except (ValueError, TypeError, KeyError):
        return None


def read_range(
    the_log: TopicLog, topic: str, queue: int, first: int, stop: int
) -> Iterator[pa.RecordBatch]:
    """Offsets ``[first, stop)`` of one queue as reader rows (``READ_DDL`` columns)."""
    topic_col = pa.scalar(topic, pa.string())
    queue_col = pa.scalar(queue, pa.int32())
    for base, batch in the_log.read(topic, queue, first, stop):
        n = batch.num_rows
        if "offset" in batch.schema.names:
            offsets = batch.column("offset").cast(pa.int64())
        else:
            offsets = pc.add(_arange(n), pa.scalar(base, pa.int64()))
        yield pa.RecordBatch.from_arrays(
            [
                pa.repeat(topic_col, n),
                pa.repeat(queue_col, n),
                offsets,
                batch.column("key"),
                batch.column("value"),
                batch.column("timestamp"),
                batch.column("headers"),
            ],
            names=["topic", "queue_id", "queue_offset", "key", "value", "timestamp", "headers"],
        )
