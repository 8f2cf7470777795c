"""Tests for sluice.bus.embedded.log.EmbeddedLog (real files under tmp_path)."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sqlite3
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sluice.bus.embedded.log import (
    EmbeddedLog,
    OffsetOutOfRange,
    QueueRange,
    StagedSegment,
    TopicInfo,
    UnknownTopic,
)

SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64()), ("payload", pa.binary())])


def _rows(writer: int, first: int, n: int) -> pa.RecordBatch:
    seqs = list(range(first, first + n))
    return pa.record_batch(
        [
            pa.array([writer] * n, pa.int64()),
            pa.array(seqs, pa.int64()),
            pa.array([b"p%d" % s for s in seqs], pa.binary()),
        ],
        schema=SCHEMA,
    )


def _read_all(
    log: EmbeddedLog, topic: str, queue: int, start: int, end: int
) -> list[tuple[int, int]]:
    """Read [start, end) and return (writer, seq) per row, checking offsets are contiguous."""
    out: list[tuple[int, int]] = []
    expected = start
    for offset, batch in log.read(topic, queue, start, end):
        assert offset == expected, "batches must be contiguous and in order"
        assert batch.num_rows > 0
        expected += batch.num_rows
        out.extend(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True))
    return out


def _seqs(log: EmbeddedLog, topic: str, queue: int, start: int, end: int) -> list[int]:
    return [s for _, s in _read_all(log, topic, queue, start, end)]


def _segment_files(topic_dir: Path) -> set[str]:
    return {
        f"{p.parent.name}/{p.name}"
        for p in topic_dir.glob("*/*")
        if p.name.endswith((".arrow", ".arrow.tmp"))
    }


def _indexed_paths(topic_dir: Path) -> set[str]:
    conn = sqlite3.connect(topic_dir / "index.sqlite")
    try:
        return {r[0] for r in conn.execute("SELECT path FROM segments")}
    finally:
        conn.close()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    lg = EmbeddedLog(tmp_path / "bus")
    yield lg
    lg.close()


# -- append / read ------------------------------------------------------------------------


def test_append_offsets_contiguous_and_exact_range_reads(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=3)
    sizes = [5, 1, 7, 3, 10]
    bases = []
    seq = 0
    for n in sizes:
        bases.append(log.append("t", 1, _rows(0, seq, n)))
        seq += n
    assert bases == [0, 5, 6, 13, 16]
    assert log.offsets("t")[1] == QueueRange(1, 0, 26)
    # Other queues are untouched.
    assert log.offsets("t")[0] == QueueRange(0, 0, 0)
    assert log.offsets("t")[2] == QueueRange(2, 0, 0)

    everything = list(range(26))
    # Every sub-range, including ones starting/ending inside segments and spanning several.
    for start in range(27):
        for end in range(start, 30):
            assert _seqs(log, "t", 1, start, end) == everything[start:end], (start, end)


def test_read_across_record_batches_inside_one_segment(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    table = pa.Table.from_batches([_rows(0, 0, 4), _rows(0, 4, 0), _rows(0, 4, 6)])
    assert log.append("t", 0, table) == 0
    assert log.append("t", 0, _rows(0, 10, 5)) == 10
    assert _seqs(log, "t", 0, 2, 13) == list(range(2, 13))
    assert _seqs(log, "t", 0, 4, 10) == list(range(4, 10))
    # The payload column comes back intact, too.
    got = [b for _, b in log.read("t", 0, 3, 5)]
    assert pa.Table.from_batches(got).column("payload").to_pylist() == [b"p3", b"p4"]


def test_read_empty_ranges_and_out_of_range(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=2)
    log.append("t", 0, _rows(0, 0, 10))
    assert list(log.read("t", 0, 10, 20)) == []  # start == max_offset
    assert list(log.read("t", 0, 4, 4)) == []  # empty range
    assert list(log.read("t", 0, 6, 2)) == []  # end before start
    assert list(log.read("t", 1, 0, 5)) == []  # queue never written
    assert _seqs(log, "t", 0, 7, 1_000) == [7, 8, 9]  # end clamped to max_offset
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read("t", 0, 11, 20)
    err = exc.value
    assert (err.topic, err.queue, err.offset, err.min_offset, err.max_offset) == ("t", 0, 11, 0, 10)
    assert "'t'" in str(err) and "11" in str(err)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 1, 1, 2)
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 0, -1, 2)


def test_append_empty_data_publishes_nothing(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    log.append("t", 0, _rows(0, 0, 3))
    assert log.append("t", 0, _rows(0, 0, 0)) == 3
    assert log.append("t", 0, pa.Table.from_batches([], schema=SCHEMA)) == 3
    assert log.offsets("t")[0].max_offset == 3
    with pytest.raises(TypeError):
        log.append("t", 0, [1, 2, 3])  # type: ignore[arg-type]


def test_threads_sharing_one_instance(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    errors: list[BaseException] = []

    def work(writer: int) -> None:
        try:
            for i in range(25):
                log.append("t", 0, _rows(writer, 2 * i, 2))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = _read_all(log, "t", 0, 0, 10**9)
    assert Counter(rows) == Counter((w, s) for w in range(4) for s in range(50))
    assert log.offsets("t")[0].max_offset == 200


# -- two-phase commit ---------------------------------------------------------------------


def test_stage_is_invisible_until_commit(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=2)
    seg = log.stage("t", 1, _rows(0, 0, 4))
    assert isinstance(seg, StagedSegment)
    assert (seg.topic, seg.queue, seg.rows) == ("t", 1, 4)
    assert (log.root / "t" / seg.path).stat().st_size == seg.bytes
    assert pickle.loads(pickle.dumps(seg)) == seg
    assert log.offsets("t")[1] == QueueRange(1, 0, 0)
    assert list(log.read("t", 1, 0, 10)) == []
    assert not log.is_committed("w", 0, "t")

    assert log.commit("w", 0, [seg]) is True
    assert log.is_committed("w", 0, "t")
    assert log.offsets("t")[1] == QueueRange(1, 0, 4)
    assert _seqs(log, "t", 1, 0, 10) == [0, 1, 2, 3]


def test_commit_is_idempotent_per_writer_and_batch(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    topic_dir = log.root / "t"
    first = log.stage("t", 0, _rows(0, 0, 5))
    assert log.commit("w", 7, [first]) is True

    # Replay of the micro-batch with freshly staged data: nothing published, files removed.
    again = log.stage("t", 0, _rows(0, 0, 5))
    assert (topic_dir / again.path).exists()
    assert log.commit("w", 7, [again]) is False
    assert not (topic_dir / again.path).exists()
    assert log.offsets("t")[0].max_offset == 5

    # Replay with the very same descriptors must not delete the published file.
    assert log.commit("w", 7, [first]) is False
    assert (topic_dir / first.path).exists()
    assert _seqs(log, "t", 0, 0, 100) == [0, 1, 2, 3, 4]

    # Another batch id (or writer) is a different commit.
    assert log.commit("w", 8, [log.stage("t", 0, _rows(0, 5, 2))]) is True
    assert log.commit("v", 7, [log.stage("t", 0, _rows(0, 7, 1))]) is True
    assert _seqs(log, "t", 0, 0, 100) == list(range(8))
    # is_committed is per topic.
    log.create_topic("other", queues=1)
    assert log.is_committed("w", 7, "t") and not log.is_committed("w", 7, "other")


def test_discard_after_the_commit_published_keeps_the_data(log: EmbeddedLog) -> None:
    """Spark aborts a micro-batch whose commit published but whose answer a query stop cut off
    (PUT …/config while records flow): the abort must not delete the published files (it did:
    the sink then failed for good with OffsetOutOfRange inside the retained range)."""
    log.create_topic("t", queues=1)
    published, staged = log.stage("t", 0, _rows(0, 0, 3)), log.stage("t", 0, _rows(0, 3, 2))
    assert log.commit("w", 0, [published]) is True
    log.discard([published, staged])
    assert _seqs(log, "t", 0, 0, 100) == [0, 1, 2]
    assert not (log.root / "t" / staged.path).exists()  # the unpublished one is gone


def test_segments_of_one_commit_get_consecutive_offsets_in_list_order(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=2)
    log.append("t", 0, _rows(9, 0, 2))
    a = log.stage("t", 0, _rows(1, 0, 3))
    b = log.stage("t", 1, _rows(2, 0, 4))
    c = log.stage("t", 0, _rows(3, 0, 2))
    empty = log.stage("t", 0, _rows(4, 0, 0))
    # Staged in a different order from the commit order, to show list order wins.
    d = log.stage("t", 0, _rows(5, 0, 1))
    assert empty.rows == 0
    assert log.commit("w", 1, [c, a, empty, b, d]) is True
    rows = _read_all(log, "t", 0, 0, 100)
    assert [w for w, _ in rows] == [9, 9, 3, 3, 1, 1, 1, 5]
    assert [w for w, _ in _read_all(log, "t", 1, 0, 100)] == [2, 2, 2, 2]
    assert log.offsets("t") == {0: QueueRange(0, 0, 8), 1: QueueRange(1, 0, 4)}


def test_commit_validation(log: EmbeddedLog) -> None:
    log.create_topic("a", queues=1)
    log.create_topic("b", queues=1)
    sa = log.stage("a", 0, _rows(0, 0, 1))
    sb = log.stage("b", 0, _rows(0, 0, 1))
    with pytest.raises(ValueError, match="one topic"):
        log.commit("w", 0, [sa, sb])
    assert not log.is_committed("w", 0, "a")
    assert log.offsets("a")[0].max_offset == 0

    # A path that escapes the queue directory is refused.
    evil = StagedSegment("a", 0, "../../etc/passwd", 1, 1)
    with pytest.raises(ValueError, match="malformed"):
        log.commit("w", 0, [evil])

    # Publishing the same staged file under two batch ids is refused atomically.
    assert log.commit("w", 1, [sa])
    with pytest.raises(ValueError, match="already published"):
        log.commit("w", 2, [log.stage("a", 0, _rows(0, 1, 1)), sa])
    assert not log.is_committed("w", 2, "a")
    assert log.offsets("a")[0].max_offset == 1

    # An empty commit names no topic: nothing happens.
    assert log.commit("w", 3, []) is True


def test_commit_of_a_removed_orphan_fails_and_publishes_nothing(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    seg = log.stage("t", 0, _rows(0, 0, 3))
    assert log.remove_orphans("t", older_than_s=3600) == 0  # too young to be an orphan
    assert log.remove_orphans("t", older_than_s=0) == 1
    with pytest.raises(ValueError, match="no longer exists"):
        log.commit("w", 0, [seg])
    assert not log.is_committed("w", 0, "t")
    assert log.offsets("t")[0].max_offset == 0


# -- retention ----------------------------------------------------------------------------


def test_retention_by_age(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=2)
    for i in range(3):
        log.append("t", 0, _rows(0, 10 * i, 10))
    log.append("t", 1, _rows(1, 0, 10))
    t_mid = time.time()
    for i in range(3, 5):
        log.append("t", 0, _rows(0, 10 * i, 10))

    assert log.apply_retention("t", max_age_ms=1000, now=t_mid - 10) == 0
    assert log.apply_retention("t") == 0  # no limits, no-op

    # Cut-off exactly at t_mid: the three early segments of queue 0 and the one of queue 1 go.
    assert log.apply_retention("t", max_age_ms=1000, now=t_mid + 1.0) == 4
    assert log.offsets("t") == {0: QueueRange(0, 30, 50), 1: QueueRange(1, 10, 10)}
    assert len(list((log.root / "t" / "0").glob("*.arrow"))) == 2
    assert list((log.root / "t" / "1").glob("*.arrow")) == []
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read("t", 0, 29, 50)
    assert exc.value.min_offset == 30
    assert _seqs(log, "t", 0, 30, 50) == list(range(30, 50))
    assert list(log.read("t", 1, 10, 20)) == []
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 1, 0, 20)

    # Offsets continue where they were, also for a queue that lost every segment.
    assert log.append("t", 0, _rows(0, 50, 5)) == 50
    assert log.append("t", 1, _rows(1, 10, 5)) == 10
    assert log.offsets("t") == {0: QueueRange(0, 30, 55), 1: QueueRange(1, 10, 15)}
    assert _seqs(log, "t", 1, 10, 15) == list(range(10, 15))


def test_retention_by_bytes(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    segs = []
    for i in range(5):
        seg = log.stage("t", 0, _rows(0, 10 * i, 10))
        assert log.commit("w", i, [seg])
        segs.append(seg)
    keep = segs[-2].bytes + segs[-1].bytes
    assert log.apply_retention("t", max_bytes=keep + 1) == 3
    assert log.offsets("t")[0] == QueueRange(0, 30, 50)
    assert _indexed_paths(log.root / "t") == {segs[3].path, segs[4].path}
    assert _segment_files(log.root / "t") == {segs[3].path, segs[4].path}
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 0, 0, 10)

    assert log.apply_retention("t", max_bytes=keep) == 0  # not over the limit
    assert log.apply_retention("t", max_bytes=0) == 2
    assert log.offsets("t")[0] == QueueRange(0, 50, 50)
    assert log.append("t", 0, _rows(0, 50, 3)) == 50
    assert _seqs(log, "t", 0, 50, 60) == [50, 51, 52]
    # Retention does not forget commits: a replay is still recognised.
    assert log.commit("w", 0, [log.stage("t", 0, _rows(0, 0, 1))]) is False
    with pytest.raises(ValueError):
        log.apply_retention("t", max_bytes=-1)


def test_retention_during_iteration_raises_out_of_range(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    log.append("t", 0, _rows(0, 0, 5))
    log.append("t", 0, _rows(0, 5, 5))
    it = log.read("t", 0, 0, 10)
    offset, batch = next(it)
    assert (offset, batch.num_rows) == (0, 5)
    assert log.apply_retention("t", max_bytes=0) == 2
    with pytest.raises(OffsetOutOfRange) as exc:
        next(it)
    assert exc.value.offset == 5 and exc.value.min_offset == 10
    # The batch already handed out stays valid although its file is gone.
    assert batch.column(1).to_pylist() == [0, 1, 2, 3, 4]


# -- multi-process ------------------------------------------------------------------------


def _writer_proc(root: str, topic: str, writer: int, batches: int, rows: int, barrier) -> None:
    log = EmbeddedLog(root)
    barrier.wait(timeout=120)
    for i in range(batches):
        log.append(topic, 0, _rows(writer, i * rows, rows))


def test_concurrent_writers_in_two_processes(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=2)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    batches, rows = 150, 3
    procs = [
        ctx.Process(target=_writer_proc, args=(str(log.root), "t", w, batches, rows, barrier))
        for w in (1, 2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]

    total = 2 * batches * rows
    assert log.offsets("t")[0] == QueueRange(0, 0, total)
    got = _read_all(log, "t", 0, 0, total + 10)  # also checks contiguous offsets
    expected = [(w, s) for w in (1, 2) for s in range(batches * rows)]
    assert Counter(got) == Counter(expected)
    assert len(got) == total
    # Each writer's own appends keep their order.
    for w in (1, 2):
        mine = [s for ww, s in got if ww == w]
        assert mine == sorted(mine)


def _create_proc(root: str, topic: str, queues: int, barrier, out) -> None:
    try:
        log = EmbeddedLog(root)
        barrier.wait(timeout=120)
        out.put(log.create_topic(topic, queues=queues).queues)
    except BaseException:
        # Report instead of dying silently, so the parent fails fast with the cause.
        out.put(traceback.format_exc())
        raise


def test_create_topic_race_between_processes(tmp_path: Path) -> None:
    root = str(tmp_path / "bus")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [ctx.Process(target=_create_proc, args=(root, "t", q, barrier, out)) for q in (3, 5)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120), out.get(timeout=120)]
    assert all(isinstance(r, int) for r in results), results
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert results[0] == results[1] and results[0] in (3, 5)
    log = EmbeddedLog(root)
    assert log.queue_count("t") == results[0]
    # Only the winner creates queue directories.
    queue_dirs = {p.name for p in (tmp_path / "bus" / "t").iterdir() if p.is_dir()}
    assert queue_dirs == {str(q) for q in range(results[0])}


def _crash_proc(root: str, topic: str, writer: str, rows: int, ready) -> None:
    log = EmbeddedLog(root)
    log.stage(topic, 0, _rows(99, 0, 3))  # deliberately never committed
    batch = 0
    while True:
        segs = [log.stage(topic, q, _rows(q, batch * rows, rows)) for q in (0, 1)]
        log.commit(writer, batch, segs)
        batch += 1
        if batch == 15:
            ready.set()


def test_crash_during_writes_keeps_log_consistent(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    EmbeddedLog(root).create_topic("t", queues=2)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    rows = 4
    proc = ctx.Process(target=_crash_proc, args=(str(root), "t", "crashy", rows, ready))
    proc.start()
    try:
        assert ready.wait(timeout=120), "child never committed enough batches"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL

    log = EmbeddedLog(root)  # a fresh opener, as after a restart
    try:
        ranges = log.offsets("t")
        committed = ranges[0].max_offset // rows
        assert committed >= 15
        # Both queues were published by the same commits: all or nothing.
        assert ranges == {
            0: QueueRange(0, 0, committed * rows),
            1: QueueRange(1, 0, committed * rows),
        }
        for q in (0, 1):
            got = _read_all(log, "t", q, 0, 10**9)
            assert got == [(q, s) for s in range(committed * rows)]
        assert log.is_committed("crashy", committed - 1, "t")
        assert not log.is_committed("crashy", committed, "t")

        topic_dir = root / "t"
        indexed = _indexed_paths(topic_dir)
        orphans = _segment_files(topic_dir) - indexed
        assert orphans, "the deliberately uncommitted segment must be on disk"
        assert log.remove_orphans("t") == 0  # all younger than an hour
        assert log.remove_orphans("t", older_than_s=0) == len(orphans)
        assert _segment_files(topic_dir) == indexed
        # The log keeps working after the crash.
        assert log.append("t", 0, _rows(0, committed * rows, 1)) == committed * rows
    finally:
        log.close()


# -- topics, validation, errors -----------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "x" * 128, "tö", "a~b", 5])
def test_bad_topic_names_rejected(log: EmbeddedLog, name: object) -> None:
    for call in (
        lambda: log.create_topic(name),  # type: ignore[arg-type]
        lambda: log.topic_exists(name),  # type: ignore[arg-type]
        lambda: log.append(name, 0, _rows(0, 0, 1)),  # type: ignore[arg-type]
        lambda: log.read(name, 0, 0, 1),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError) as exc:
            call()
        assert repr(name) in str(exc.value)
    assert not log.root.exists() or list(log.root.iterdir()) == []


def test_good_topic_names_accepted(log: EmbeddedLog) -> None:
    names = ["a", "x" * 127, "A.b_c-d%2F", ".hidden", "0"]
    for n in names:
        log.create_topic(n, queues=1)
        log.append(n, 0, _rows(0, 0, 1))
    assert log.topics() == sorted(names)
    assert (log.root / "A.b_c-d%2F" / "index.sqlite").exists()


@pytest.mark.parametrize("queue", [-1, 3, 100, "0", True, 1.0])
def test_bad_queue_ids_rejected(log: EmbeddedLog, queue: object) -> None:
    log.create_topic("topic-q", queues=3)
    calls = (
        lambda: log.append("topic-q", queue, _rows(0, 0, 1)),  # type: ignore[arg-type]
        lambda: log.stage("topic-q", queue, _rows(0, 0, 1)),  # type: ignore[arg-type]
        lambda: log.read("topic-q", queue, 0, 1),  # type: ignore[arg-type]
    )
    for call in calls:
        with pytest.raises(ValueError) as exc:
            call()
        assert "'topic-q'" in str(exc.value) and repr(queue) in str(exc.value)
    assert log.offsets("topic-q") == {q: QueueRange(q, 0, 0) for q in range(3)}


def test_unknown_topic(log: EmbeddedLog) -> None:
    log.create_topic("present", queues=1)
    calls = (
        lambda: log.queue_count("missing"),
        lambda: log.describe("missing"),
        lambda: log.offsets("missing"),
        lambda: log.append("missing", 0, _rows(0, 0, 1)),
        lambda: log.stage("missing", 0, _rows(0, 0, 1)),
        lambda: log.read("missing", 0, 0, 1),
        lambda: log.is_committed("w", 0, "missing"),
        lambda: log.apply_retention("missing", max_bytes=0),
        lambda: log.remove_orphans("missing"),
        lambda: log.delete_topic("missing"),
    )
    for call in calls:
        with pytest.raises(UnknownTopic) as exc:
            call()
        assert isinstance(exc.value, KeyError)
        assert "'missing'" in str(exc.value)
        assert str(pickle.loads(pickle.dumps(exc.value))) == str(exc.value)
    assert not log.topic_exists("missing")
    assert not (log.root / "missing").exists()  # lookups never create anything


def test_create_topic_existing(log: EmbeddedLog) -> None:
    info = log.create_topic("t", queues=4)
    assert info == TopicInfo("t", 4, [QueueRange(q, 0, 0) for q in range(4)])
    log.append("t", 2, _rows(0, 0, 3))
    again = log.create_topic("t", queues=8)
    assert again.queues == 4 and again.ranges[2] == QueueRange(2, 0, 3)
    with pytest.raises(FileExistsError, match="'t'"):
        log.create_topic("t", queues=4, exist_ok=False)
    with pytest.raises(ValueError):
        log.create_topic("u", queues=0)
    assert log.queue_count("t") == 4
    assert sorted(p.name for p in (log.root / "t").iterdir() if p.is_dir()) == ["0", "1", "2", "3"]


def test_half_created_topic_is_not_listed_and_can_be_completed(log: EmbeddedLog) -> None:
    # What a crash between mkdir and the metadata commit leaves behind.
    (log.root / "half").mkdir(parents=True)
    sqlite3.connect(log.root / "half" / "index.sqlite").close()
    assert not log.topic_exists("half")
    assert log.topics() == []
    with pytest.raises(UnknownTopic):
        log.append("half", 0, _rows(0, 0, 1))
    assert log.create_topic("half", queues=2).queues == 2
    assert log.append("half", 1, _rows(0, 0, 1)) == 0


def test_delete_and_recreate_topic_seen_by_other_instance(log: EmbeddedLog) -> None:
    other = EmbeddedLog(log.root)
    log.create_topic("t", queues=2)
    log.append("t", 0, _rows(0, 0, 5))
    assert other.offsets("t")[0].max_offset == 5  # caches a connection in `other`
    log.delete_topic("t")
    assert not (log.root / "t").exists()
    assert list(log.root.iterdir()) == []  # tombstone removed too
    assert not other.topic_exists("t")
    with pytest.raises(UnknownTopic):
        other.offsets("t")
    log.create_topic("t", queues=3)
    assert other.queue_count("t") == 3
    assert other.offsets("t")[0] == QueueRange(0, 0, 0)
    other.close()


def test_missing_queue_directory_is_recreated_but_deleted_topic_is_not(
    log: EmbeddedLog,
) -> None:
    log.create_topic("t", queues=2)
    (log.root / "t" / "1").rmdir()
    assert log.append("t", 1, _rows(0, 0, 2)) == 0
    assert _seqs(log, "t", 1, 0, 2) == [0, 1]
    log.delete_topic("t")
    with pytest.raises(UnknownTopic):
        log.stage("t", 1, _rows(0, 0, 2))
    assert not (log.root / "t").exists()


def test_pickled_log_works_and_carries_no_connection(log: EmbeddedLog) -> None:
    log.create_topic("t", queues=1)
    log.append("t", 0, _rows(0, 0, 2))  # opens and caches a connection
    data = pickle.dumps(log)
    assert b"Connection" not in data and len(data) < 200
    clone = pickle.loads(data)
    assert clone.root == log.root
    assert clone.append("t", 0, _rows(0, 2, 2)) == 2
    assert _seqs(log, "t", 0, 0, 10) == [0, 1, 2, 3]
    clone.close()
