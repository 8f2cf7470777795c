"""Exactly-once appends to a broker: the commit journal, and the driver-side commit.

Used by the Kafka and RocketMQ backends (:class:`ExternalLog`). A micro-batch reaches a broker
topic one of two ways:

**From the executors** (every topic write inside a Spark micro-batch: source queries, a sink's
dead-letter and own topics). Each task sends its *part* of the micro-batch — (writer, batch,
task) — to the broker itself, through the backend's :meth:`ExternalLog.part_writer`; how a part is
made exactly-once is the backend's (Kafka: a transaction per part with a batch marker inside,
:mod:`sluice.bus.kafka._log`; RocketMQ: sends keyed by the part and counted on replay,
:mod:`sluice.bus.rocketmq._log`). The journal (below) serves them in three ways:

* the ``parts`` table: per part and topic, what a backend needs to find a part's prefix again
  after a crash (RocketMQ: ``starts``, the attempt that owns the part, ``pending``/``sent``);
* per part, the row ``topic = ''`` that says the task *finished* its part: a task whose records
  must follow its predecessor's in a queue (see :mod:`sluice.bus.spark`) waits for it;
* the writers' ``fences``: a task checks its writer's lease generation before it sends.

The driver's :meth:`ExternalLog.commit_parts` only records ``done`` for (writer, batch, topic),
checked against the lease generation in the same transaction (a fenced writer's micro-batch
fails), forgets the parts of the writer's older batches (Spark replays only its last one), and
waits until readers see the parts. Executors reach the journal where the driver does: a
SQLite file under the bus's state directory, which is under ``storePathRootDir`` (shared with
the executors on a cluster, checked at worker start), or the PostgreSQL cluster store.

**From the driver** (a write outside a Spark micro-batch, e.g. the contract tests calling the
topic writer directly: no batch id is known on the executor side). The staged rows are sent
by the driver's commit in three steps:

1. **Stage** (``stage_for``): a task's rows for one queue are written to an Arrow file under
   ``<state>/staging/`` (a backend may store them already encoded as messages). The broker has
   not seen them: a staged but uncommitted batch is invisible.
2. **Journal** (driver, ``commit``): before anything is sent, one SQLite row keyed by
   ``(writer_id, batch_id, topic)`` records ``pending`` and, for each queue the batch writes, the
   queue's end offset *before* the batch (``starts``).
3. **Send, then mark done**: each queue's rows are sent in order (per queue, one ordered stream:
   Kafka's transactional producer, RocketMQ batch sends one after the other), every message
   tagged with a header/user property ``sluice.writer = <digest of the writer id>``; when the
   broker has acknowledged all of them *and they are readable*, the row becomes ``done``.

Replaying a micro-batch (Spark re-runs it after a crash) therefore finds one of three states:

* no row — nothing was sent: publish as above;
* ``done`` — everything was sent: publish nothing (the staged rows are deleted);
* ``pending`` — the previous attempt died while sending. Because a queue's messages of one batch
  are sent in order and the broker keeps that order without gaps, what reached queue *q* is a
  *prefix* of what was meant for it. Counting this writer's messages from ``starts[q]`` on gives
  that prefix's length *n*; only rows ``n…`` are sent. All of them belong to this batch: a writer
  (one connector run) commits one batch at a time, Spark commits batch *B+1* only after *B*, and
  every earlier batch was readable below ``starts[q]`` before this one began. Messages of other
  writers in between are not counted (they have other tags). The tag names only the writer, so
  executors can encode complete messages before the batch id is known.

Fencing (distributed mode): a commit made with ``fence=(connector, lease generation)`` is checked
against the newest generation recorded in the journal's ``fences`` table (:meth:`ExternalLog.fence`,
called by the worker that took the lease over) before anything else, in the same SQLite
transaction as the ``pending`` row and as the ``done`` row, and (RocketMQ) before each round trip
of the send. So a worker that lost a connector's lease cannot start a commit, and one that was
paused in the middle of a send stops at its next round trip; Kafka also fences the paused one's
open transaction in the broker (:mod:`sluice.bus.kafka._log`). RocketMQ has no producer epoch:
its one unfenced window is a single round trip of a writer paused between its check and its send.

So every record is appended exactly once, provided the replay produces the same rows per queue
(Spark's offset log makes the batch's input range identical; sources and routing are
deterministic). Unlike the embedded log, a batch whose commit was interrupted is *partly* visible
until its replay completes it; it is never rolled back, only rolled forward.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from sluice._private import private_dir
from sluice._sqlite import connect_shared, create_database
from sluice.bus.base import (
    STORED_SCHEMA,
    BusError,
    StagedSegment,
    TopicLog,
    WriterFenced,
    WrittenPart,
    check_commit,
    raise_fence,
    retry_outage,
)
from sluice.bus.facade import Bus
from sluice.sdk.wakeup import ring

log = logging.getLogger(__name__)

#: The header (Kafka) / user property (RocketMQ) that tags each message with its writer.
WRITER_TAG = "sluice.writer"
_JOURNAL_KEEP_S = 24 * 3600  # done rows older than this go (the newest per writer always stays)

_FENCES = """
CREATE TABLE IF NOT EXISTS fences (
    fence_key TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL
)
"""
_PARTS = """
CREATE TABLE IF NOT EXISTS parts (
    writer_id TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    task INTEGER NOT NULL,
    topic TEXT NOT NULL,
    state TEXT NOT NULL,
    owner TEXT NOT NULL,
    starts TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (writer_id, batch_id, task, topic)
)
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS writes (
    writer_id TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    topic TEXT NOT NULL,
    state TEXT NOT NULL,
    starts TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (writer_id, batch_id, topic)
)
"""


def attempt_id() -> str:
    """Who writes a part: host, process and a random suffix (the journal's ``owner``)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


def writer_tag(writer_id: str) -> str:
    """The tag every message of ``writer_id`` carries (short: it is on every message)."""
    return hashlib.sha1(writer_id.encode()).hexdigest()[:16]


class CommitJournal:
    """The ``pending``/``done`` rows of step 2 (SQLite, safe for several processes), and the
    writers' fences (distributed mode: the newest lease generation of each connector)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: Any = None
        self._pid = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _db(self) -> Any:
        if self._conn is None or self._pid != os.getpid():
            private_dir(os.path.dirname(self.path))
            create_database(self.path, f"{_SCHEMA};\n{_FENCES}")  # 0600, never without tables
            conn = connect_shared(self.path)
            conn.execute(_SCHEMA)
            conn.execute(_FENCES)
            conn.execute(_PARTS)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` as the newest of writer ``key``; older epochs' commits are refused."""
        self._write(lambda db: raise_fence(db, key, epoch, "*"))

    def check_fence(self, fence: tuple[str, int] | None, topic: str) -> None:
        """Raise :class:`WriterFenced` if ``fence`` was superseded (a read: records nothing)."""
        if fence is None:
            return
        with self._lock:
            row = (
                self._db()
                .execute("SELECT epoch FROM fences WHERE fence_key = ?", (fence[0],))
                .fetchone()
            )
        if row is not None and int(row[0]) > fence[1]:
            raise WriterFenced(fence[0], fence[1], int(row[0]), topic)

    def _write(self, change: Callable[[Any], None]) -> None:
        """Run ``change(db)`` in one ``BEGIN IMMEDIATE`` transaction."""
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                change(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def get(self, writer_id: str, batch_id: int, topic: str) -> tuple[str, dict[int, int]] | None:
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT state, starts FROM writes "
                    "WHERE writer_id = ? AND batch_id = ? AND topic = ?",
                    (writer_id, batch_id, topic),
                )
                .fetchone()
            )
        if row is None:
            return None
        return row[0], {int(q): int(o) for q, o in json.loads(row[1]).items()}

    def put(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        state: str,
        starts: Mapping[int, int],
        fence: tuple[str, int] | None = None,
    ) -> None:
        """Write the row; with ``fence``, only if it was not superseded (same transaction)."""

        def change(db: Any) -> None:
            if fence is not None:
                raise_fence(db, fence[0], fence[1], topic)
            db.execute(
                "INSERT INTO writes (writer_id, batch_id, topic, state, starts, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (writer_id, batch_id, topic) DO UPDATE "
                "SET state = excluded.state, updated_at = excluded.updated_at",
                (writer_id, batch_id, topic, state, json.dumps(dict(starts)), time.time()),
            )

        self._write(change)

    def prune(self, older_than_s: float = _JOURNAL_KEEP_S) -> int:
        """Forget old ``done`` rows (a replay only ever concerns a writer's latest batches)
        and parts rows of writers idle that long (a connector deleted mid-batch)."""
        cutoff = time.time() - older_than_s
        with self._lock:
            db = self._db()
            db.execute("DELETE FROM parts WHERE updated_at < ?", (cutoff,))
            cur = db.execute(
                "DELETE FROM writes WHERE state = 'done' AND updated_at < ? AND batch_id < "
                "(SELECT MAX(batch_id) FROM writes w WHERE w.writer_id = writes.writer_id)",
                (cutoff,),
            )
            return cur.rowcount

    # -- parts (writes from the executors) -------------------------------------------------------
    def claim_part(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        topic: str,
        owner: str,
        starts: Mapping[int, int],
        fence: tuple[str, int] | None = None,
    ) -> tuple[str, dict[int, int]]:
        """Make ``owner`` (an attempt) the owner of a part's ``topic`` row, in one transaction
        with the fence check. Returns ``("new", starts)`` when there was no row (it is written
        ``pending`` with ``starts``), ``("pending", stored starts)`` when an earlier attempt
        began the part, ``("sent", stored starts)`` when one finished it."""
        found: list[tuple[str, dict[int, int]]] = []

        def change(db: Any) -> None:
            if fence is not None:
                raise_fence(db, fence[0], fence[1], topic)
            row = db.execute(
                "SELECT state, starts FROM parts "
                "WHERE writer_id = ? AND batch_id = ? AND task = ? AND topic = ?",
                (writer_id, batch_id, task, topic),
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO parts (writer_id, batch_id, task, topic, state, owner, starts, "
                    "updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?)",
                    (
                        writer_id,
                        batch_id,
                        task,
                        topic,
                        owner,
                        json.dumps(dict(starts)),
                        time.time(),
                    ),
                )
                found.append(("new", dict(starts)))
                return
            stored = {int(q): int(o) for q, o in json.loads(row[1]).items()}
            if row[0] != "sent":
                db.execute(
                    "UPDATE parts SET owner = ?, updated_at = ? "
                    "WHERE writer_id = ? AND batch_id = ? AND task = ? AND topic = ?",
                    (owner, time.time(), writer_id, batch_id, task, topic),
                )
            found.append((row[0], stored))

        self._write(change)
        return found[0]

    def part_owner(self, writer_id: str, batch_id: int, task: int, topic: str) -> str | None:
        """The attempt that owns a part's ``topic`` row (None: no row)."""
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT owner FROM parts "
                    "WHERE writer_id = ? AND batch_id = ? AND task = ? AND topic = ?",
                    (writer_id, batch_id, task, topic),
                )
                .fetchone()
            )
        return None if row is None else str(row[0])

    def finish_part(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        topic: str,
        owner: str,
        fence: tuple[str, int] | None = None,
    ) -> None:
        """Mark a part's ``topic`` row ``sent`` (``topic=''``: the task finished its part,
        written if missing); refused with :class:`PartTakenOver` when another attempt owns it
        now."""

        def change(db: Any) -> None:
            if fence is not None:
                raise_fence(db, fence[0], fence[1], topic or "*")
            key = (writer_id, batch_id, task, topic)
            row = db.execute(
                "SELECT owner FROM parts "
                "WHERE writer_id = ? AND batch_id = ? AND task = ? AND topic = ?",
                key,
            ).fetchone()
            if row is not None and topic and row[0] != owner:
                raise PartTakenOver(writer_id, batch_id, task, topic)
            db.execute(
                "INSERT INTO parts (writer_id, batch_id, task, topic, state, owner, starts, "
                "updated_at) VALUES (?, ?, ?, ?, 'sent', ?, '{}', ?) "
                "ON CONFLICT (writer_id, batch_id, task, topic) DO UPDATE "
                "SET state = 'sent', updated_at = excluded.updated_at",
                (*key, owner, time.time()),
            )

        self._write(change)

    def task_finished(self, writer_id: str, batch_id: int, task: int) -> bool:
        """Whether task ``task`` finished its part of the batch (``finish_part`` with
        ``topic=''``)."""
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT 1 FROM parts WHERE writer_id = ? AND batch_id = ? AND task = ? "
                    "AND topic = '' AND state = 'sent'",
                    (writer_id, batch_id, task),
                )
                .fetchone()
            )
        return row is not None

    def forget_parts(self, writer_id: str, before_batch: int) -> None:
        """Drop the parts rows of the writer's batches before ``before_batch`` (committed in
        Spark's log already: never replayed)."""
        with self._lock:
            self._db().execute(
                "DELETE FROM parts WHERE writer_id = ? AND batch_id < ?", (writer_id, before_batch)
            )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


class PartTakenOver(BusError):
    """A task attempt's part was taken over by a newer attempt of the same task (Spark ran the
    task again): this one must send nothing more."""

    def __init__(self, writer_id: str, batch_id: int, task: int, topic: str) -> None:
        super().__init__(
            f"part of task {task} of writer {writer_id!r} batch {batch_id} (topic {topic!r}) "
            "was taken over by a newer attempt of the task"
        )
        self.args_ = (writer_id, batch_id, task, topic)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args_)


class ExternalLog(TopicLog):
    """A :class:`TopicLog` on a broker: staging and commit journal here, sending in subclasses.

    ``state_dir`` is a local (or, in a cluster, shared) directory for staged rows and the journal.
    Subclasses implement admin, ``read`` and the three broker steps of a commit:
    :meth:`_end_offsets`, :meth:`_count_tagged` and :meth:`_send`.
    """

    #: This worker's commits ring the topics' doorbells; other writers (other workers, any
    #: producer of the broker) do not, so a reader still looks at the broker regularly.
    doorbells_ring_for_every_write = False

    def __init__(self, state_dir: str | os.PathLike[str], *, outage_s: float = 300.0) -> None:
        self.state_dir = os.path.abspath(os.fspath(state_dir))
        self.outage_s = outage_s
        self._journal = CommitJournal(os.path.join(self.state_dir, "writes.sqlite"))

    # -- doorbells -------------------------------------------------------------------------------
    def _bell(self, topic: str) -> str:
        return os.path.join(self.state_dir, "bells", quote(topic, safe=""))

    def doorbells(self, topics: Sequence[str]) -> list[str]:
        try:
            private_dir(os.path.join(self.state_dir, "bells"))
        except OSError as exc:  # a hint only: the reader then looks every IDLE_PAUSE_S
            log.warning("no doorbells for topics %s: %s", list(topics), exc)
            return []
        return [self._bell(t) for t in topics]

    def __getstate__(self) -> dict[str, Any]:
        # Clients and connections belong to a process: ship only what reopens them.
        state = self.__dict__.copy()
        state["_clients"] = None
        return state

    def set_journal(self, journal: Any) -> None:
        """Use ``journal`` (same methods as :class:`CommitJournal`, picklable) instead of the
        SQLite file under ``state_dir``: the cluster store's, in distributed mode."""
        self._journal = journal

    # -- staging ---------------------------------------------------------------------------------
    def _staging(self) -> Path:
        return Path(self.state_dir) / "staging"

    def stage(self, topic: str, queue: int, data: pa.RecordBatch | pa.Table) -> StagedSegment:
        """Stage rows with no writer tag; use :meth:`stage_for` (the topic writer does)."""
        return self.stage_for("", topic, queue, data)

    def stage_for(
        self, writer_id: str, topic: str, queue: int, data: pa.RecordBatch | pa.Table
    ) -> StagedSegment:
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if table.num_rows:
            table = table.select(STORED_SCHEMA.names).cast(STORED_SCHEMA)
        return self._write_staged(writer_id, topic, queue, table)

    def _write_staged(
        self, writer_id: str, topic: str, queue: int, table: pa.Table
    ) -> StagedSegment:
        """Keep ``table`` (whatever this backend stages) in a staging file."""
        rel = f"{uuid.uuid4().hex}.arrow"
        if table.num_rows == 0:
            return StagedSegment(topic, queue, rel, 0, 0, writer_id)
        folder = self._staging()
        folder.mkdir(parents=True, exist_ok=True)
        # No fsync: if the machine dies before the commit, Spark replays the batch and stages it
        # again; if the commit finds the file gone it fails and the replay re-stages.
        with pa.OSFile(str(folder / rel), "wb") as sink:
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            size = sink.tell()
        return StagedSegment(topic, queue, rel, table.num_rows, size, writer_id)

    def _load(self, seg: StagedSegment) -> pa.Table:
        if "/" in seg.path or seg.path.startswith("."):
            raise ValueError(f"malformed staged segment {seg!r}")
        try:
            with pa.memory_map(str(self._staging() / seg.path), "r") as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            raise ValueError(
                f"staged rows {seg.path!r} of topic {seg.topic!r} no longer exist "
                "(removed as an orphan?)"
            ) from None

    def discard(self, segments: Sequence[StagedSegment]) -> None:
        for seg in segments:
            if seg.rows:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._staging() / seg.path)

    @abstractmethod
    def check(self) -> None:
        """Raise `BusUnavailable`, naming the address key, unless the broker answers."""

    def remove_orphans(self, older_than_s: float = 3600.0) -> int:
        """Delete staged files no commit took (their writer died); return how many."""
        cutoff = time.time() - older_than_s
        removed = 0
        try:
            entries = list(os.scandir(self._staging()))
        except FileNotFoundError:
            return 0
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime <= cutoff:
                    os.remove(entry.path)
                    removed += 1
        return removed

    def prune_journal(self) -> int:
        return self._journal.prune()

    # -- commit ----------------------------------------------------------------------------------
    def commit(
        self,
        writer_id: str,
        batch_id: int,
        segments: Sequence[StagedSegment],
        *,
        fence: tuple[str, int] | None = None,
    ) -> bool:
        segs = list(segments)
        if not segs:
            return True
        topic = check_commit(writer_id, batch_id, segs)
        for seg in segs:
            if seg.rows and seg.writer != writer_id:
                # its messages carry another writer's tag: a replay could not count them
                raise ValueError(
                    f"segment staged for writer {seg.writer!r} committed as {writer_id!r}"
                )
        # Through a broker outage the commit is simply tried again: an attempt that sent part of
        # the batch left it `pending`, so the next one counts what arrived and sends the rest.
        return retry_outage(
            f"commit of {writer_id} batch {batch_id} to topic {topic!r}",
            lambda: self._commit(writer_id, batch_id, topic, segs, fence),
            self.outage_s,
            sleep=self._pause,
        )

    def _pause(self, seconds: float) -> None:
        """Wait between attempts through an outage (a seam for tests)."""
        time.sleep(seconds)

    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` as the newest of writer ``key`` in the journal (see :meth:`commit`)."""
        self._journal.fence(key, epoch)

    def _commit(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        segs: list[StagedSegment],
        fence: tuple[str, int] | None = None,
    ) -> bool:
        self._journal.check_fence(fence, topic)
        entry = self._journal.get(writer_id, batch_id, topic)
        if entry is not None and entry[0] == "done":
            self.discard(segs)
            return False
        per_queue: dict[int, list[pa.Table]] = {}
        for seg in segs:
            if seg.rows:
                per_queue.setdefault(seg.queue, []).append(self._load(seg))
        tables = {q: pa.concat_tables(parts) for q, parts in per_queue.items()}
        tag = writer_tag(writer_id)
        if entry is None:
            starts = self._end_offsets(topic, sorted(tables)) if tables else {}
            self._journal.put(writer_id, batch_id, topic, "pending", starts, fence)
            done = dict.fromkeys(tables, 0)
        else:
            # An earlier attempt died while sending: count what of this batch each queue has.
            self._before_recount(topic)
            starts = entry[1]
            done = {
                q: self._count_tagged(topic, q, starts[q], tag) if q in starts else 0
                for q in tables
            }
            log.info(
                "replaying commit of %s batch %s to %r: %s of %s rows per queue already there",
                writer_id,
                batch_id,
                topic,
                done,
                {q: t.num_rows for q, t in tables.items()},
            )
        todo = {q: t.slice(done[q]) for q, t in tables.items() if done[q] < t.num_rows}
        if todo:
            self._send(topic, todo, tag, lambda: self._journal.check_fence(fence, topic))
        self._journal.put(writer_id, batch_id, topic, "done", starts, fence)
        self.discard(segs)
        ring(self._bell(topic))
        return True

    # -- parts: writes from the executors ------------------------------------------------------
    def task_finished(self, writer_id: str, batch_id: int, task: int) -> bool:
        return self._journal.task_finished(writer_id, batch_id, task)

    def commit_parts(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        parts: Sequence[WrittenPart],
        *,
        fence: tuple[str, int] | None = None,
    ) -> None:
        """Record the micro-batch ``done`` for ``topic`` (fenced), forget the parts rows of the
        writer's older batches, and wait (bounded, see :meth:`_await_parts`) until readers see
        what the parts wrote."""
        ends: dict[int, int] = {}
        for part in parts:
            for queue, end in part.ends.get(topic, {}).items():
                ends[queue] = max(ends.get(queue, 0), end)
        self._journal.put(writer_id, batch_id, topic, "done", {}, fence)
        self._journal.forget_parts(writer_id, batch_id)
        if ends:
            self._await_parts(topic, ends)
            ring(self._bell(topic))

    def _await_parts(self, topic: str, ends: Mapping[int, int]) -> None:
        """Hook: wait until readers can read every queue of ``topic`` up to ``ends`` (the
        parts were acknowledged by the broker already)."""

    def is_committed(self, writer_id: str, batch_id: int, topic: str) -> bool:
        """Whether ``(writer_id, batch_id)`` was completely published to ``topic``."""
        entry = self._journal.get(writer_id, batch_id, topic)
        return entry is not None and entry[0] == "done"

    def _before_recount(self, topic: str) -> None:
        """Hook: wait until everything an earlier attempt sent to ``topic`` is countable (sends
        still in flight, or stored but not yet readable, would otherwise be sent twice)."""

    @abstractmethod
    def _end_offsets(self, topic: str, queues: list[int]) -> dict[int, int]:
        """The current end offset (next offset to be written) of each of ``queues``."""

    @abstractmethod
    def _count_tagged(self, topic: str, queue: int, start: int, tag: str) -> int:
        """How many messages from ``start`` to the end of the queue carry ``tag``."""

    @abstractmethod
    def _send(
        self, topic: str, tables: Mapping[int, pa.Table], tag: str, check: Callable[[], None]
    ) -> None:
        """Send each queue's staged rows in order, tagged ``tag``; return once the broker
        acknowledged all of them and they are readable; raise (without having skipped any row of
        a queue) otherwise. ``check`` raises :class:`WriterFenced` once the writer's lease
        generation was superseded: a backend whose broker cannot fence a producer calls it
        before each round trip."""

    def close(self) -> None:
        self._journal.close()


def headers_without_tag(pairs: Iterator[tuple[str, str]] | list[tuple[str, str]]) -> str | None:
    """A record's headers as JSON object text (what the reader outputs), minus the writer tag."""
    headers = {k: v for k, v in pairs if k != WRITER_TAG}
    return json.dumps(headers, sort_keys=True) if headers else None


class ExternalBus(Bus):
    """Base of the buses on a broker (Kafka, RocketMQ): their log stages batches locally and
    commits them through a journal, so both clean up the same way. Retention is the broker's."""

    log: ExternalLog

    def check(self) -> None:
        """Raise `BusUnavailable` (naming the address key) unless the broker answers."""
        self.log.check()

    def maintain(
        self,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        orphan_age_s: float = 3600.0,
    ) -> dict[str, int]:
        """Remove staged rows of writers that died and old journal rows; topic retention is set
        on the broker, not by sluice."""
        removed = self.log.remove_orphans(orphan_age_s)
        self.log.prune_journal()
        return {"segments_expired": 0, "orphans_removed": removed}

    def fence(self, key: str, epoch: int) -> None:
        """Record ``epoch`` in the commit journal (one row per writer key, for every topic)."""
        self.log.fence(key, epoch)

    def keep_journal(self, journal: Any) -> None:
        self.log.set_journal(journal)
