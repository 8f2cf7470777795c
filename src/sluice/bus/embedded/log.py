"""Durable, partitioned, append-only log on a local directory (the embedded topic bus).

On-disk layout
--------------
::

    <root>/<topic>/index.sqlite           SQLite index (WAL mode, synchronous=FULL)
    <root>/<topic>/<queue>/<uuid>.arrow   immutable segment files (Arrow IPC *file* format)
    <root>/<topic>/<queue>/.<uuid>.arrow.tmp   segment being written (never referenced)

A topic has a fixed number of queues.  Each queue is an ordered sequence of records with
offsets ``0, 1, 2, ...``.  A segment file holds a run of consecutive records of one queue; the
``segments`` table maps ``(queue, base_offset)`` to the file that holds offsets
``base_offset .. base_offset + row_count - 1``.  The tables are:

* ``meta``      one row: queue count, creation time, format version.
* ``queues``    one row per queue: ``next_offset``, the offset the next published record gets.
  It only ever grows, so offsets are never reused even after retention removed every segment.
* ``segments``  published segments, keyed by ``(queue, base_offset)``; ``path`` is unique.
* ``commits``   ``(writer_id, batch_id)`` pairs already published, for idempotent replays.
* ``fences``    ``(fence_key, epoch)``: the newest epoch of a fenced writer (a connector under a
  lease generation, in distributed mode). A commit made with ``fence=(key, epoch)`` is refused
  with :class:`WriterFenced` if a newer epoch was seen, and raises the stored one otherwise, in
  the same transaction as the publish, as Kafka fences a transactional producer's epoch.

Writing is two-phase.  :meth:`EmbeddedLog.stage` writes a segment under a temporary name,
fsyncs it, renames it to its final name and fsyncs the directory; the file is now durable but
invisible, because only rows in ``segments`` make data visible.  :meth:`EmbeddedLog.commit`
then publishes any number of staged segments in a single ``BEGIN IMMEDIATE`` transaction that
assigns offsets from ``queues.next_offset``, inserts the ``segments`` rows and the ``commits``
row together.

Crash-safety argument
---------------------
* A segment is referenced by the index only after its bytes *and* its directory entry were
  fsynced, so a committed index row never points at a missing or partial file.
* Visibility, offset assignment and the idempotency record all change in one SQLite
  transaction.  With WAL + ``synchronous=FULL`` that transaction is atomic and durable: after a
  ``kill -9`` at any instant either all segments of a commit are visible (with their commit
  row) or none is.  Files staged but never committed are merely orphans that
  :meth:`EmbeddedLog.remove_orphans` deletes; they can never become visible by accident.
* Offsets are assigned while holding SQLite's write lock, which serialises all writers of a
  topic across processes, so offsets are contiguous and each record is appended exactly once.
* Retention deletes index rows (in a transaction) before unlinking files.  A crash in between
  leaves unreferenced files (orphans), never dangling references.  A reader that already
  listed a segment whose file is gone reports :class:`OffsetOutOfRange`; a reader that already
  memory-mapped it keeps the inode alive until it is done.
* ``remove_orphans`` runs while holding the write lock, and ``commit`` checks that every staged
  file still exists under that same lock, so an orphan sweep and a commit cannot interleave in
  a way that publishes a deleted file.

Damage (files changed behind the log's back, e.g. while the worker was down) is never taken for a
fresh start: a topic is checked when a process first opens it (:meth:`EmbeddedLog._handle`, once
per process and index file, a few indexed lookups and ``stat`` calls, never per append) and
whoever opens or reads it gets :class:`TopicDamaged` naming the file when

* its index is missing, emptied, truncated or unreadable while segment files are there (starting
  it afresh would hand out offsets from 0 again, below every reader's position);
* the last segment of a queue does not end at the queue's next offset, or the first or last
  segment file of a queue is gone or has another size than the index says (truncated);
* a segment being read is gone, has another size than the index says, or is not Arrow data.

Files and folders are created private to the worker's user (0600 and 0700, `sluice._private`).

Concurrency: any number of processes on one host may use the same root.  SQLite connections
are opened lazily and cached per (process, topic); an :class:`EmbeddedLog` is cheap to pickle
and carries only its root path.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from sluice._private import DIR_MODE, open_private, private_dir, private_file
from sluice._sqlite import connect_shared
from sluice.bus.base import (
    OffsetOutOfRange,
    QueueRange,
    StagedSegment,
    TopicDamaged,
    TopicInfo,
    TopicLog,
    UnknownTopic,
    WriterFenced,
    check_commit,
    raise_fence,
)
from sluice.sdk.wakeup import ring

__all__ = [
    "EmbeddedLog",
    "OffsetOutOfRange",
    "QueueRange",
    "StagedSegment",
    "TopicDamaged",
    "TopicInfo",
    "UnknownTopic",
    "WriterFenced",
]

_INDEX_NAME = "index.sqlite"
_FORMAT_VERSION = 1
_MAX_QUEUES = 4096
_SEGMENT_RE = re.compile(r"(\d+)/([0-9a-f]{32})\.arrow")
# '~' cannot occur in a topic name, so a tombstone can never be mistaken for (or collide with)
# a live topic directory.
_TOMBSTONE_MARK = "~deleted~"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    queues INTEGER NOT NULL,
    created_at REAL NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS queues (
    queue INTEGER PRIMARY KEY,
    next_offset INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS segments (
    queue INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    byte_size INTEGER NOT NULL,
    path TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (queue, base_offset)
);
CREATE UNIQUE INDEX IF NOT EXISTS segments_path ON segments (path);
CREATE TABLE IF NOT EXISTS commits (
    writer_id TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    committed_at REAL NOT NULL,
    PRIMARY KEY (writer_id, batch_id)
);
"""

_FENCES = """
CREATE TABLE IF NOT EXISTS fences (
    fence_key TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL
)
"""


# Connections that belonged to a parent process before fork().  SQLite must not use (or close)
# them in the child, so they are parked here forever instead of being garbage collected.
_ABANDONED: list[Any] = []

# Index files (path, device, inode) this process found in agreement with their segment files:
# the open-time check runs once per process and index, not on every handle (Spark's tasks open
# a fresh handle per micro-batch).
_VERIFIED: set[tuple[str, int, int]] = set()
_VERIFIED_LOCK = threading.Lock()


class _Handle:
    """Per-process state of one open topic: connection, its lock, and immutable metadata."""

    __slots__ = ("conn", "dir", "ident", "lock", "queues")

    def __init__(
        self, conn: sqlite3.Connection, topic_dir: Path, ident: tuple[int, int], queues: int
    ) -> None:
        self.conn = conn
        self.dir = topic_dir
        self.ident = ident
        self.queues = queues
        # One connection is shared by the threads of a process; SQLite transactions are
        # per-connection, so a transaction must not interleave with another thread's statements.
        self.lock = threading.RLock()


def _validate_topic(topic: str) -> None:
    if not isinstance(topic, str) or (problem := EmbeddedLog.topic_name_problem(topic)):
        raise ValueError(problem if isinstance(topic, str) else f"invalid topic name {topic!r}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


#: A topic's doorbell: its times change after every commit that published records, so readers
#: waiting for new records wake at once (`doorbells`, `sluice.sdk.wakeup`).
DOORBELL = "doorbell"


def _ring(topic_dir: Path) -> None:
    ring(topic_dir / DOORBELL)


def _segment_files(topic_dir: Path) -> int:
    """How many segment files (``<queue>/<uuid>.arrow``) a topic folder holds (0 if none)."""
    found = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for queue in os.scandir(topic_dir):
            if queue.is_dir(follow_symlinks=False) and queue.name.isdigit():
                with contextlib.suppress(FileNotFoundError):
                    found += sum(1 for f in os.scandir(queue.path) if f.name.endswith(".arrow"))
    return found


def _check_index(topic: str, topic_dir: Path, conn: sqlite3.Connection, queues: int) -> None:
    """Raise :class:`TopicDamaged` unless the index agrees with itself and with the first and
    last segment file of every queue (a few indexed lookups and stats)."""
    index = str(topic_dir / _INDEX_NAME)
    with _transaction(conn, "DEFERRED"):
        nxt = dict(conn.execute("SELECT queue, next_offset FROM queues").fetchall())
        if sorted(nxt) != list(range(queues)):
            raise TopicDamaged(
                topic, index, f"it lists queues {sorted(nxt)} for a topic of {queues} queues"
            )
        ends = []
        for q in range(queues):
            for order in ("ASC", "DESC"):
                row = conn.execute(
                    "SELECT base_offset, row_count, byte_size, path FROM segments "
                    f"WHERE queue = ? ORDER BY base_offset {order} LIMIT 1",
                    (q,),
                ).fetchone()
                if row is not None:
                    ends.append((q, order, *row))
    for q, order, base, rows, size, rel in ends:
        if order == "DESC" and base + rows != nxt[q]:
            raise TopicDamaged(
                topic,
                index,
                f"queue {q}'s last segment ends at offset {base + rows} but its next offset "
                f"is {nxt[q]}",
            )
        problem = _segment_problem(topic_dir / rel, size)
        if problem is not None and _still_listed(conn, rel):  # retention may have removed it
            raise TopicDamaged(topic, str(topic_dir / rel), problem)


def _segment_problem(path: Path, size: int) -> str | None:
    try:
        actual = os.stat(path).st_size
    except FileNotFoundError:
        return "the segment file the index lists is gone"
    if actual != size:
        return f"the segment file has {actual} bytes, the index says {size} (truncated?)"
    return None


def _still_listed(conn: sqlite3.Connection, rel: str) -> bool:
    row = conn.execute("SELECT 1 FROM segments WHERE path = ?", (rel,)).fetchone()
    return row is not None


def _connect(index: Path, *, create: bool) -> sqlite3.Connection:
    # URI mode so that a plain lookup (mode=rw) never creates an index file for a missing
    # topic; quote() matters because '%' is legal in topic names.
    mode = "rwc" if create else "rw"
    return connect_shared(f"file:{quote(str(index))}?mode={mode}", uri=True)


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> Iterator[None]:
    conn.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class EmbeddedLog(TopicLog):
    """A durable, partitioned, append-only log rooted at a local directory.

    Guarantees (see the module docstring for the argument):

    * every published record has exactly one offset; offsets of a queue are contiguous and
      strictly increasing and are never reused, also not after retention;
    * :meth:`commit` publishes all of its segments atomically and at most once per
      ``(writer_id, batch_id)``;
    * after a crash (``kill -9``) at any point, the log reopens with every committed record
      readable and nothing uncommitted visible;
    * several processes on one host may read and write the same topics concurrently.

    Instances are cheap to create and to pickle: they hold only the root path, and open SQLite
    connections lazily, once per (process, topic).
    """

    broker_name = "embedded"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Use ``root`` as the log directory (created on first :meth:`create_topic`)."""
        self._root = Path(root)
        self._reset_process_state()

    # -- process-local state -------------------------------------------------------------

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._handles: dict[str, _Handle] = {}
        self._handles_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Never pickle connections: they are bound to the process (and SQLite's locks to it).
        return {"root": str(self._root)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._root = Path(state["root"])
        self._reset_process_state()

    def __repr__(self) -> str:
        return f"EmbeddedLog({str(self._root)!r})"

    @property
    def root(self) -> Path:
        """The root directory of the log."""
        return self._root

    def close(self) -> None:
        """Close this process's cached SQLite connections (they are reopened on demand)."""
        self._check_fork()
        with self._handles_lock:
            handles, self._handles = self._handles, {}
        for handle in handles.values():
            with handle.lock:
                handle.conn.close()

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            # Inherited through fork(): the parent's connections must not be touched here.
            _ABANDONED.extend(h.conn for h in self._handles.values())
            self._reset_process_state()

    def _topic_dir(self, topic: str) -> Path:
        return self._root / topic

    def _handle(self, topic: str) -> _Handle:
        """Return the cached handle of an existing topic, reopening it if it was replaced."""
        _validate_topic(topic)
        self._check_fork()
        topic_dir = self._topic_dir(topic)
        index = topic_dir / _INDEX_NAME
        # One stat per call detects a topic deleted (and maybe re-created) by any process, so a
        # cached connection never keeps serving an unlinked index.
        try:
            st = os.stat(index)
        except FileNotFoundError:
            self._drop_handle(topic)
            if _segment_files(topic_dir):  # a topic is deleted whole (renamed), never like this
                raise TopicDamaged(
                    topic, str(index), "the index is gone but the topic's segment files are there"
                ) from None
            raise UnknownTopic(topic) from None
        ident = (st.st_dev, st.st_ino)
        handle = self._handles.get(topic)
        if handle is not None and handle.ident == ident:
            return handle
        self._drop_handle(topic)
        try:
            conn = _connect(index, create=False)
        except sqlite3.OperationalError as e:
            if "unable to open" not in str(e):
                raise
            raise UnknownTopic(topic) from None  # removed since the stat
        except sqlite3.DatabaseError as e:  # not a database (any more)
            raise TopicDamaged(topic, str(index), f"the index is unreadable ({e})") from None
        try:
            row = self._open_checked(topic, topic_dir, conn, ident)
        except BaseException:
            conn.close()
            raise
        if row is None:
            conn.close()
            if files := _segment_files(topic_dir):  # segments are staged once the meta is in
                raise TopicDamaged(
                    topic,
                    str(index),
                    f"the index has no topic metadata (emptied or truncated?) but {files} "
                    "segment files are there",
                )
            raise UnknownTopic(topic)
        handle = _Handle(conn, topic_dir, ident, int(row[0]))
        with self._handles_lock:
            other = self._handles.get(topic)
            if other is not None and other.ident == ident:
                conn.close()  # another thread won the race; share its connection
                return other
            self._handles[topic] = handle
        return handle

    @staticmethod
    def _open_checked(
        topic: str, topic_dir: Path, conn: sqlite3.Connection, ident: tuple[int, int]
    ) -> tuple[int] | None:
        """The ``meta`` row of a just opened index (None: not created yet, or emptied), once the
        index was checked against the segment files (once per process and index file)."""
        index = topic_dir / _INDEX_NAME
        try:
            row = conn.execute("SELECT queues FROM meta WHERE id = 0").fetchone()
            if row is None:
                return None
            conn.execute(_FENCES)  # topics created before fencing existed get the table here
            key = (str(index), *ident)
            if key not in _VERIFIED:
                _check_index(topic, topic_dir, conn, int(row[0]))
                with _VERIFIED_LOCK:
                    _VERIFIED.add(key)
            return row
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return None  # index created but create_topic never committed its metadata
            raise  # locked, busy, I/O: not the file's content
        except sqlite3.DatabaseError as e:  # malformed, not a database: truncated or damaged
            raise TopicDamaged(topic, str(index), f"the index is unreadable ({e})") from None

    def _drop_handle(self, topic: str) -> None:
        # Not closed explicitly: another thread may still be using it; it closes when the last
        # reference goes away.
        with self._handles_lock:
            self._handles.pop(topic, None)

    @staticmethod
    def _check_queue(topic: str, handle: _Handle, queue: int) -> None:
        if isinstance(queue, bool) or not isinstance(queue, int) or not 0 <= queue < handle.queues:
            raise ValueError(
                f"invalid queue {queue!r} for topic {topic!r}: "
                f"must be an int in [0, {handle.queues})"
            )

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, topic: str, queues: int = 8, *, exist_ok: bool = True) -> TopicInfo:
        """Create ``topic`` with ``queues`` queues and return its info.

        Safe to race from several processes: exactly one creation wins and every caller sees
        the same queue count.  If the topic already exists, ``exist_ok=True`` returns its info
        unchanged (even if its queue count differs from ``queues``); otherwise
        :class:`FileExistsError` is raised.
        """
        _validate_topic(topic)
        if (
            isinstance(queues, bool)
            or not isinstance(queues, int)
            or not 1 <= queues <= _MAX_QUEUES
        ):
            raise ValueError(f"invalid queue count {queues!r} for topic {topic!r}")
        self._check_fork()
        with contextlib.suppress(UnknownTopic):
            self._handle(topic)
            if not exist_ok:
                raise FileExistsError(f"topic {topic!r} already exists")
            return self.describe(topic)

        private_dir(self._root)
        topic_dir = self._topic_dir(topic)
        try:
            topic_dir.mkdir(DIR_MODE)
            _fsync_dir(self._root)
        except FileExistsError:
            pass  # another process is creating it too; the index transaction decides the winner
        private_file(topic_dir / _INDEX_NAME)  # 0600: SQLite gives its -wal and -shm this mode
        conn = _connect(topic_dir / _INDEX_NAME, create=True)
        try:
            created = False
            with _transaction(conn):
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                row = conn.execute("SELECT queues FROM meta WHERE id = 0").fetchone()
                if row is None:
                    # Queue directories exist before the metadata commits, so a visible topic
                    # always has them (stage() also recreates one if it went missing).
                    for q in range(queues):
                        (topic_dir / str(q)).mkdir(DIR_MODE, exist_ok=True)
                    _fsync_dir(topic_dir)
                    conn.execute(
                        "INSERT INTO meta (id, queues, created_at, version) VALUES (0, ?, ?, ?)",
                        (queues, time.time(), _FORMAT_VERSION),
                    )
                    conn.executemany(
                        "INSERT INTO queues (queue, next_offset) VALUES (?, 0)",
                        [(q,) for q in range(queues)],
                    )
                    created = True
        finally:
            conn.close()
        _fsync_dir(topic_dir)  # make the index file's directory entry durable too
        if not created and not exist_ok:
            raise FileExistsError(f"topic {topic!r} already exists")
        return self.describe(topic)

    def doorbells(self, topics: Sequence[str]) -> list[str]:
        return [str(self._topic_dir(t) / DOORBELL) for t in topics]

    def topic_exists(self, topic: str) -> bool:
        """Whether ``topic`` exists (fully created and not deleted; a damaged topic exists, and
        fails whoever uses it with :class:`TopicDamaged`)."""
        try:
            self._handle(topic)
        except UnknownTopic:
            return False
        except TopicDamaged:
            return True
        return True

    def topics(self) -> list[str]:
        """Names of all existing topics, sorted."""
        try:
            names = [e.name for e in os.scandir(self._root) if e.is_dir()]
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if self.topic_name_problem(name) is not None:
                continue  # tombstones and foreign directories
            if self.topic_exists(name):
                out.append(name)
        return sorted(out)

    def queue_count(self, topic: str) -> int:
        """Number of queues of ``topic`` (fixed at creation); :class:`UnknownTopic` if missing."""
        return self._handle(topic).queues

    def describe(self, topic: str) -> TopicInfo:
        """Name, queue count and per-queue offset ranges of ``topic``."""
        handle = self._handle(topic)
        ranges = self._ranges(handle)
        return TopicInfo(topic, handle.queues, [ranges[q] for q in sorted(ranges)])

    def offsets(self, topic: str) -> dict[int, QueueRange]:
        """Current :class:`QueueRange` of every queue of ``topic``, keyed by queue id.

        The ranges are read in one consistent snapshot.
        """
        return self._ranges(self._handle(topic))

    @staticmethod
    def _ranges(handle: _Handle) -> dict[int, QueueRange]:
        with handle.lock:
            rows = handle.conn.execute(
                "SELECT q.queue, q.next_offset, "
                "(SELECT MIN(s.base_offset) FROM segments s WHERE s.queue = q.queue) "
                "FROM queues q ORDER BY q.queue"
            ).fetchall()
        return {q: QueueRange(q, nxt if lo is None else lo, nxt) for q, nxt, lo in rows}

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and all its data; :class:`UnknownTopic` if it does not exist.

        The topic directory is first renamed to a tombstone (atomic), so the topic disappears
        at once for every process; the tombstone is then removed.  Callers must stop using the
        topic first: a writer that is mid-transaction in another process may lose that write.
        """
        self._handle(topic)  # raises UnknownTopic
        self._drop_handle(topic)
        tomb = self._root / f"{topic}{_TOMBSTONE_MARK}{uuid.uuid4().hex}"
        try:
            os.rename(self._topic_dir(topic), tomb)
        except FileNotFoundError:
            raise UnknownTopic(topic) from None  # deleted concurrently
        _fsync_dir(self._root)
        # Also sweep tombstones left behind by deleters that crashed before finishing.
        for entry in os.scandir(self._root):
            if _TOMBSTONE_MARK in entry.name:
                shutil.rmtree(entry.path, ignore_errors=True)

    # -- writing --------------------------------------------------------------------------

    def stage(self, topic: str, queue: int, data: pa.RecordBatch | pa.Table) -> StagedSegment:
        """Durably write ``data`` as a new, still invisible segment of ``topic``/``queue``.

        When this returns, the segment file is fsynced under its final name, but readers cannot
        see it until :meth:`commit` publishes the returned descriptor.  Segments never committed
        are removed by :meth:`remove_orphans`.  Empty data writes no file at all (committing the
        descriptor is then a no-op).
        """
        handle = self._handle(topic)
        self._check_queue(topic, handle, queue)
        if isinstance(data, pa.RecordBatch):
            batches = [data] if data.num_rows else []
            schema = data.schema
        elif isinstance(data, pa.Table):
            batches = [b for b in data.to_batches() if b.num_rows]
            schema = data.schema
        else:
            raise TypeError(
                f"stage() needs a pyarrow RecordBatch or Table, got {type(data).__name__}"
            )
        name = uuid.uuid4().hex
        rel = f"{queue}/{name}.arrow"
        rows = sum(b.num_rows for b in batches)
        if rows == 0:
            return StagedSegment(topic, queue, rel, 0, 0)

        queue_dir = handle.dir / str(queue)
        tmp = queue_dir / f".{name}.arrow.tmp"
        final = handle.dir / rel
        try:
            try:
                os.close(open_private(tmp))  # 0600; Arrow's own open would take the umask's mode
            except FileNotFoundError:
                # Queue directory missing (e.g. removed by hand).  A non-recursive mkdir cannot
                # resurrect a deleted topic: it fails if the topic directory itself is gone.
                try:
                    queue_dir.mkdir(DIR_MODE, exist_ok=True)
                except FileNotFoundError:
                    raise UnknownTopic(topic) from None
                os.close(open_private(tmp))
            sink = pa.OSFile(str(tmp), "wb")
            with sink:
                with pa.ipc.new_file(sink, schema) as writer:
                    for batch in batches:
                        writer.write_batch(batch)
                size = sink.tell()
            # fsync through a second descriptor: fsync flushes the inode, whichever fd wrote it.
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
            _fsync_dir(queue_dir)
        except BaseException:
            _unlink_quiet(tmp)
            _unlink_quiet(final)
            raise
        return StagedSegment(topic, queue, rel, rows, size)

    def commit(
        self,
        writer_id: str,
        batch_id: int,
        segments: Sequence[StagedSegment],
        *,
        fence: tuple[str, int] | None = None,
    ) -> bool:
        """Atomically publish ``segments`` once per ``(writer_id, batch_id)``.

        With ``fence=(key, epoch)`` the commit is refused (:class:`WriterFenced`) when a newer
        epoch was recorded for ``key`` (see :meth:`fence`), checked in the same transaction.

        All segments must belong to one topic (:class:`ValueError` otherwise).  In one
        transaction each non-empty segment, in list order, gets the current end offset of its
        queue as base offset (so segments of one commit for the same queue are consecutive), and
        ``(writer_id, batch_id)`` is recorded.  Returns True if published.  If that pair was
        already committed to the topic nothing is published, the staged files (unless they are
        the very files already published) are deleted, and False is returned; this makes a
        replayed micro-batch harmless.  Empty segments are skipped.  An empty ``segments`` list
        names no topic, so nothing is recorded and True is returned.
        """
        segs = list(segments)
        if not segs:
            return True
        offsets = self._publish(writer_id, batch_id, segs, fence)
        return offsets is not None

    def fence(self, topic: str, key: str, epoch: int) -> int:
        """Record ``epoch`` as the newest of writer ``key`` on ``topic`` (never lowers it):
        from now on commits with an older epoch are refused. Returns the stored epoch."""
        handle = self._handle(topic)
        with handle.lock, _transaction(handle.conn):
            return self._raise_fence(handle.conn, topic, key, epoch)

    @staticmethod
    def _raise_fence(conn: sqlite3.Connection, topic: str, key: str, epoch: int) -> int:
        raise_fence(conn, key, epoch, topic)
        return epoch

    def _publish(
        self,
        writer_id: str,
        batch_id: int,
        segs: list[StagedSegment],
        fence: tuple[str, int] | None = None,
    ) -> list[int | None] | None:
        """Commit ``segs``; return their base offsets (None for empty ones), None if a replay."""
        topic = check_commit(writer_id, batch_id, segs)
        handle = self._handle(topic)
        for seg in segs:
            self._check_queue(topic, handle, seg.queue)
            m = _SEGMENT_RE.fullmatch(seg.path)
            # The path is data from another process; never let it point outside the queue dir.
            if m is None or int(m.group(1)) != seg.queue or seg.rows < 0:
                raise ValueError(f"malformed staged segment for topic {topic!r}: {seg!r}")

        conn = handle.conn
        now = time.time()
        to_delete: list[Path] = []
        result: list[int | None] | None = []
        with handle.lock, _transaction(conn):
            if fence is not None:
                self._raise_fence(conn, topic, fence[0], fence[1])
            replay = conn.execute(
                "SELECT 1 FROM commits WHERE writer_id = ? AND batch_id = ?",
                (writer_id, batch_id),
            ).fetchone()
            if replay is not None:
                result = None
                for seg in segs:
                    # A replay may carry the very descriptors that were published the first
                    # time; those files are live data and must survive.
                    live = conn.execute(
                        "SELECT 1 FROM segments WHERE path = ?", (seg.path,)
                    ).fetchone()
                    if live is None:
                        to_delete.append(handle.dir / seg.path)
            else:
                nxt = dict(conn.execute("SELECT queue, next_offset FROM queues").fetchall())
                rows = []
                for seg in segs:
                    path = handle.dir / seg.path
                    if seg.rows == 0:
                        to_delete.append(path)
                        result.append(None)
                        continue
                    # Checked under the write lock, which remove_orphans also holds while it
                    # deletes, so a file verified here cannot vanish before COMMIT.
                    try:
                        size = os.stat(path).st_size
                    except FileNotFoundError:
                        raise ValueError(
                            f"staged segment {seg.path!r} of topic {topic!r} no longer exists "
                            "(removed as an orphan?)"
                        ) from None
                    if size != seg.bytes:
                        raise ValueError(
                            f"staged segment {seg.path!r} of topic {topic!r} has {size} bytes, "
                            f"descriptor says {seg.bytes}"
                        )
                    base = nxt[seg.queue]
                    nxt[seg.queue] = base + seg.rows
                    rows.append((seg.queue, base, seg.rows, seg.bytes, seg.path, now))
                    result.append(base)
                try:
                    conn.executemany(
                        "INSERT INTO segments "
                        "(queue, base_offset, row_count, byte_size, path, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        rows,
                    )
                except sqlite3.IntegrityError as e:
                    if "segments.path" not in str(e):
                        raise
                    raise ValueError(
                        f"a staged segment of topic {topic!r} was already published "
                        "under another (writer_id, batch_id)"
                    ) from None
                touched = {r[0] for r in rows}
                conn.executemany(
                    "UPDATE queues SET next_offset = ? WHERE queue = ?",
                    [(nxt[q], q) for q in touched],
                )
                conn.execute(
                    "INSERT INTO commits (writer_id, batch_id, committed_at) VALUES (?, ?, ?)",
                    (writer_id, batch_id, now),
                )
        if result:
            _ring(handle.dir)
        # Unreferenced files can be deleted at leisure; a crash here only leaves orphans.
        for path in to_delete:
            _unlink_quiet(path)
        return result

    def discard(self, segments: Sequence[StagedSegment]) -> None:
        """Delete the staged segment files of an aborted micro-batch, except those a commit
        published: Spark aborts a batch also when a query stop (a config change, a pause, a
        delete) cut off the answer of a commit that had published, and those files are the
        topic's data. Under the write lock, as in `_publish`, so the two cannot interleave."""
        by_topic: dict[str, list[StagedSegment]] = {}
        for seg in segments:
            by_topic.setdefault(seg.topic, []).append(seg)
        for topic, segs in by_topic.items():
            handle = self._handle(topic)
            with handle.lock, _transaction(handle.conn):
                for seg in segs:
                    live = handle.conn.execute(
                        "SELECT 1 FROM segments WHERE path = ?", (seg.path,)
                    ).fetchone()
                    if live is None:
                        _unlink_quiet(handle.dir / seg.path)

    def is_committed(self, writer_id: str, batch_id: int, topic: str) -> bool:
        """Whether ``(writer_id, batch_id)`` has been committed to ``topic``."""
        handle = self._handle(topic)
        with handle.lock:
            row = handle.conn.execute(
                "SELECT 1 FROM commits WHERE writer_id = ? AND batch_id = ?",
                (writer_id, batch_id),
            ).fetchone()
        return row is not None

    def append(self, topic: str, queue: int, data: pa.RecordBatch | pa.Table) -> int:
        """Durably append ``data`` to ``topic``/``queue`` and return its first offset.

        Equivalent to :meth:`stage` + :meth:`commit` under a fresh unique writer id.  For empty
        data nothing is written and the queue's current ``max_offset`` is returned.
        """
        seg = self.stage(topic, queue, data)
        if seg.rows == 0:
            return self.offsets(topic)[queue].max_offset
        offsets = self._publish(f"append-{uuid.uuid4().hex}", 0, [seg])
        assert offsets is not None and offsets[0] is not None  # fresh writer id: never a replay
        return offsets[0]

    # -- reading --------------------------------------------------------------------------

    def read(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Iterate ``(offset of first row, batch)`` over offsets ``start <= o < end``.

        The batches cover exactly ``[start, min(end, max_offset))`` in order, without gaps, as
        zero-copy slices of memory-mapped segment files (``max_offset`` as of this call).
        Raises :class:`OffsetOutOfRange` right away if ``start < min_offset`` or
        ``start > max_offset``; ``start == max_offset`` or ``end <= start`` yields nothing.  If
        retention removes a not-yet-opened segment during iteration, the iterator raises
        :class:`OffsetOutOfRange` at that point.
        """
        handle = self._handle(topic)
        self._check_queue(topic, handle, queue)
        conn = handle.conn
        with handle.lock, _transaction(conn, "DEFERRED"):
            nxt, lo = conn.execute(
                "SELECT next_offset, "
                "(SELECT MIN(base_offset) FROM segments WHERE queue = ?) "
                "FROM queues WHERE queue = ?",
                (queue, queue),
            ).fetchone()
            lo = nxt if lo is None else lo
            if start < lo or start > nxt:
                raise OffsetOutOfRange(topic, queue, start, lo, nxt)
            stop = min(end, nxt)
            if stop <= start:
                return iter(())
            # The segment holding `start` is the last one based at or below it; the PK index on
            # (queue, base_offset) answers both parts without a scan.
            segs = conn.execute(
                "SELECT base_offset, path, byte_size FROM segments WHERE queue = ? AND "
                "base_offset >= "
                "(SELECT MAX(base_offset) FROM segments WHERE queue = ? AND base_offset <= ?) "
                "AND base_offset < ? ORDER BY base_offset",
                (queue, queue, start, stop),
            ).fetchall()
        return self._iter_segments(topic, queue, handle, segs, start, stop)

    def _iter_segments(
        self,
        topic: str,
        queue: int,
        handle: _Handle,
        segs: list[tuple[int, str, int]],
        start: int,
        stop: int,
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        for base, rel, size in segs:
            path = handle.dir / rel
            try:
                source = pa.memory_map(str(path), "r")
            except FileNotFoundError:
                with handle.lock:
                    listed = _still_listed(handle.conn, rel)
                if listed:  # not retention: the file went missing behind the log's back
                    raise TopicDamaged(
                        topic, str(path), "the segment file the index lists is gone"
                    ) from None
                # Retention won the race for this segment since our snapshot.
                rng = self.offsets(topic)[queue]
                raise OffsetOutOfRange(
                    topic, queue, max(base, start), rng.min_offset, rng.max_offset
                ) from None
            # Closing the map early is safe: batches keep the mapped region alive themselves.
            with source:
                if source.size() != size:
                    raise TopicDamaged(
                        topic,
                        str(path),
                        f"the segment file has {source.size()} bytes, the index says {size} "
                        "(truncated?)",
                    )
                try:
                    reader = pa.ipc.open_file(source)
                except (pa.ArrowInvalid, OSError) as exc:
                    why = f"not a readable segment ({exc})"
                    raise TopicDamaged(topic, str(path), why) from None
                pos = base
                for i in range(reader.num_record_batches):
                    if pos >= stop:
                        break
                    batch = reader.get_batch(i)
                    n = batch.num_rows
                    if pos + n > start:
                        lo = max(start - pos, 0)
                        hi = min(stop - pos, n)
                        if hi > lo:
                            yield (
                                pos + lo,
                                batch if lo == 0 and hi == n else batch.slice(lo, hi - lo),
                            )
                    pos += n

    # -- maintenance ----------------------------------------------------------------------

    def apply_retention(
        self,
        topic: str,
        *,
        max_age_ms: int | None = None,
        max_bytes: int | None = None,
        now: float | None = None,
    ) -> int:
        """Delete the oldest whole segments of each queue of ``topic``; return how many.

        First every leading segment published more than ``max_age_ms`` before ``now``
        (default: current time) is removed, then further oldest segments while the queue's
        total segment bytes exceed ``max_bytes``.  Only a prefix of each queue is ever removed,
        so retained offsets stay contiguous; ``min_offset`` advances while ``max_offset`` (the
        next offset to write) never changes, even if every segment goes.  Index rows are deleted
        in one transaction before any file is unlinked.
        """
        if max_age_ms is not None and max_age_ms < 0:
            raise ValueError(f"max_age_ms must be >= 0, got {max_age_ms}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        handle = self._handle(topic)
        if max_age_ms is None and max_bytes is None:
            return 0
        now = time.time() if now is None else now
        cutoff = None if max_age_ms is None else now - max_age_ms / 1000.0
        conn = handle.conn
        doomed: list[str] = []
        with handle.lock, _transaction(conn):
            for q in range(handle.queues):
                segs = conn.execute(
                    "SELECT base_offset, byte_size, created_at, path FROM segments "
                    "WHERE queue = ? ORDER BY base_offset",
                    (q,),
                ).fetchall()
                total = sum(s[1] for s in segs)
                cut = 0
                if cutoff is not None:
                    # Stop at the first young segment: removing only a prefix keeps offsets
                    # contiguous even if the wall clock once stepped backwards.
                    while cut < len(segs) and segs[cut][2] < cutoff:
                        total -= segs[cut][1]
                        cut += 1
                if max_bytes is not None:
                    while cut < len(segs) and total > max_bytes:
                        total -= segs[cut][1]
                        cut += 1
                if cut:
                    conn.execute(
                        "DELETE FROM segments WHERE queue = ? AND base_offset <= ?",
                        (q, segs[cut - 1][0]),
                    )
                    doomed.extend(s[3] for s in segs[:cut])
        for rel in doomed:
            _unlink_quiet(handle.dir / rel)
        return len(doomed)

    def remove_orphans(self, topic: str, older_than_s: float = 3600) -> int:
        """Delete segment files of ``topic`` that no commit references; return how many.

        Orphans are staged-but-never-committed segments, leftovers of interrupted writes
        (``*.tmp``) and files whose index rows were removed just before a crash.  Only files
        last modified at least ``older_than_s`` seconds ago are touched, so segments staged
        recently for a commit still in flight survive; with ``older_than_s=0`` a concurrent
        uncommitted stage *is* removed and its commit will fail.
        """
        handle = self._handle(topic)
        cutoff = time.time() - older_than_s
        removed = 0
        conn = handle.conn
        # Hold the write lock while deleting so that no commit can publish a file between our
        # "unreferenced" check and the unlink (commit re-checks file existence under the lock).
        with handle.lock, _transaction(conn):
            live = {r[0] for r in conn.execute("SELECT path FROM segments")}
            for q in range(handle.queues):
                qdir = handle.dir / str(q)
                try:
                    entries = list(os.scandir(qdir))
                except FileNotFoundError:
                    continue
                for entry in entries:
                    if not entry.name.endswith((".arrow", ".arrow.tmp")):
                        continue
                    if f"{q}/{entry.name}" in live:
                        continue
                    try:
                        if entry.stat().st_mtime > cutoff:
                            continue
                        os.unlink(entry.path)
                    except FileNotFoundError:
                        continue
                    removed += 1
        return removed
