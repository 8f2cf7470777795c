"""Damaged store files fail loudly, naming the file; store files are private to the worker's user.

Real files of a real (stopped) store: an embedded log and the SQLite stores are written, closed,
damaged the way a full disk, a bad restore or a careless `truncate` leaves them, and opened again
as a new process would (the open-time check runs once per process and index file: the tests
forget what this process checked, `_fresh_process`).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from sluice._sqlite import create_database, database_problem
from sluice.bus.embedded import log as log_module
from sluice.bus.embedded.log import EmbeddedLog, TopicDamaged, UnknownTopic
from sluice.push import PushBoard
from sluice.rest._auth import add_credential
from sluice.sdk import ConfigException
from sluice.store._sqlite_file import prepare_store_root
from sluice.store.configs import SqliteConfigStore
from sluice.store.positions import SqlitePositionStore

ROWS = pa.table(
    {
        "key": pa.array([b"k"] * 3, pa.binary()),
        "value": pa.array([b"a", b"b", b"c"], pa.binary()),
        "timestamp": pa.array([0, 0, 0], pa.timestamp("ms")),
        "headers": pa.array(["{}"] * 3, pa.string()),
    }
)


def _fresh_process(root: Path) -> EmbeddedLog:
    """The log as a process that never opened it sees it (what a restarted worker does)."""
    log_module._VERIFIED.clear()
    return EmbeddedLog(root)


def _topic(root: Path, segments: int = 2) -> EmbeddedLog:
    log = EmbeddedLog(root)
    log.create_topic("t", queues=2)
    for _ in range(segments):
        log.append("t", 0, ROWS)
    log.append("t", 1, ROWS)
    log.close()
    return log


def _segments(root: Path, queue: int) -> list[Path]:
    """The segment files of a queue of topic `t`, in offset order (as the index lists them)."""
    db = sqlite3.connect(root / "t" / "index.sqlite")
    try:
        rows = db.execute(
            "SELECT path FROM segments WHERE queue = ? ORDER BY base_offset", (queue,)
        ).fetchall()
    finally:
        db.close()
    return [root / "t" / rel for (rel,) in rows]


def _damaged(call, *words: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(TopicDamaged) as caught:
        call()
    text = str(caught.value)
    for word in words:
        assert word in text, text
    return text


@pytest.mark.parametrize("damage", ["emptied", "removed", "garbage", "half"])
def test_a_damaged_index_fails_every_open_naming_it_and_is_never_started_afresh(
    tmp_path: Path, damage: str
) -> None:
    root = tmp_path / "bus"
    _topic(root)
    index = root / "t" / "index.sqlite"
    if damage == "emptied":
        index.write_bytes(b"")
    elif damage == "removed":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(b"not a database at all" * 300)
    else:
        data = index.read_bytes()
        index.write_bytes(data[: len(data) // 2])
    log = _fresh_process(root)
    words = ("'t'", str(index) if damage != "half" else "index.sqlite")
    _damaged(lambda: log.offsets("t"), *words)
    _damaged(lambda: log.read("t", 0, 0, 6), *words)
    # a writer must not create it again from offset 0 (the sinks' positions are further on)
    _damaged(lambda: log.create_topic("t", queues=2), *words)
    _damaged(lambda: log.append("t", 0, ROWS), *words)
    assert log.topic_exists("t") and log.topics() == ["t"]  # it exists: it is damaged
    assert len(list((root / "t" / "0").glob("*.arrow"))) == 2  # and nothing of it was touched
    from sluice.bus.embedded import EmbeddedBus

    bus = EmbeddedBus(root)
    assert bus.maintain(retention_ms=0, orphan_age_s=0) == {
        "segments_expired": 0,
        "orphans_removed": 0,
    }
    assert len(list((root / "t" / "0").glob("*.arrow"))) == 2


def test_an_index_being_created_is_still_an_unknown_topic(tmp_path: Path) -> None:
    """An index without metadata and without segment files is a topic whose creation was cut
    off (or is under way in another process): not damage, the next create finishes it."""
    root = tmp_path / "bus"
    (root / "t" / "0").mkdir(parents=True)
    (root / "t" / "index.sqlite").write_bytes(b"")
    log = _fresh_process(root)
    with pytest.raises(UnknownTopic):
        log.offsets("t")
    log.create_topic("t", queues=2)
    assert log.append("t", 0, ROWS) == 0


def test_a_truncated_or_missing_segment_fails_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    _topic(root, segments=3)
    last = _segments(root, 0)[-1]
    # the last segment of a queue: found when the topic is opened
    last.write_bytes(last.read_bytes()[:100])
    log = _fresh_process(root)
    _damaged(lambda: log.offsets("t"), str(last), "truncated")
    last.unlink()
    _damaged(lambda: _fresh_process(root).offsets("t"), str(last), "gone")
    # one in the middle: found when it is read (the open-time check reads no more than the ends)
    root2 = tmp_path / "bus2"
    _topic(root2, segments=3)
    middle = _segments(root2, 0)[1]
    middle.write_bytes(middle.read_bytes()[:-10])
    log = _fresh_process(root2)
    assert [o for o, _ in log.read("t", 0, 0, 3)] == [0]  # the first segment is whole
    _damaged(lambda: list(log.read("t", 0, 0, 9)), str(middle), "truncated")
    middle.unlink()
    _damaged(lambda: list(_fresh_process(root2).read("t", 0, 3, 9)), str(middle), "gone")


def test_an_index_that_disagrees_with_itself_fails(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    _topic(root)
    db = sqlite3.connect(root / "t" / "index.sqlite")
    db.execute("DELETE FROM segments WHERE queue = 0 AND base_offset = 3")  # the last one
    db.commit()
    db.close()
    _damaged(lambda: _fresh_process(root).offsets("t"), "queue 0", "next offset is 6")


def test_retention_is_not_damage(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    _topic(root)
    log = _fresh_process(root)
    assert log.apply_retention("t", max_age_ms=0, now=1e12) == 3  # every segment
    log = _fresh_process(root)
    assert log.offsets("t")[0].min_offset == log.offsets("t")[0].max_offset == 6
    assert log.append("t", 0, ROWS) == 6


#: a worker's stores written by a process that then exits (SQLite folds its log into the files)
_WRITE_STORES = """
import sys
from sluice.push import PushBoard
from sluice.store.configs import SqliteConfigStore
from sluice.store.positions import SqlitePositionStore
root = sys.argv[1]
SqlitePositionStore(root + "/positions.sqlite").save(
    "c", {f"p{i}": {"queueOffset": i} for i in range(500)}
)
SqliteConfigStore(root + "/configs.sqlite").put("c", {"connector.class": "X"}, "STARTED")
PushBoard(root + "/push.sqlite").set_settings("c", {"concurrency": 4})
"""


@pytest.mark.parametrize("name", ["positions.sqlite", "configs.sqlite", "push.sqlite"])
@pytest.mark.parametrize("damage", ["emptied", "half", "garbage"])
def test_a_damaged_store_file_stops_the_worker_naming_it(
    tmp_path: Path, name: str, damage: str
) -> None:
    root = tmp_path / "store"
    subprocess.run([sys.executable, "-c", _WRITE_STORES, str(root)], check=True, timeout=60)
    prepare_store_root(root)  # whole: fine
    path = root / name
    assert not Path(f"{path}-wal").exists()  # stopped
    if damage == "emptied":
        path.write_bytes(b"")
    elif damage == "half":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(os.urandom(8192))
    with pytest.raises(ConfigException) as caught:
        prepare_store_root(root)
    assert caught.value.key == "storePathRootDir"
    assert str(path) in str(caught.value) and "damaged" in str(caught.value), caught.value


def test_a_store_file_is_never_there_without_its_tables(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite")
    assert create_database(path, "CREATE TABLE IF NOT EXISTS a (x INTEGER)")
    assert not create_database(path, "CREATE TABLE IF NOT EXISTS a (x INTEGER)")
    assert database_problem(path) is None
    assert sorted(os.listdir(tmp_path)) == ["s.sqlite"]  # no temporary file left
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


def test_store_files_are_private_to_the_worker_user(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: what was created 0644 / 0755 before
    try:
        root = tmp_path / "store"
        root.mkdir(mode=0o755)
        prepare_store_root(root)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700  # tightened
        # every store kept open while the files are read: one collected closes its database,
        # and SQLite removes the -wal and -shm files under the walk
        configs = SqliteConfigStore(root / "configs.sqlite")
        configs.put("c", {"k": "v"}, "STARTED")
        positions = SqlitePositionStore(root / "positions.sqlite")
        positions.save("c", {"p": {"queueOffset": 1}})
        board = PushBoard(str(root / "push.sqlite"))
        board.set_settings("c", {"concurrency": 2})
        log = EmbeddedLog(root / "bus")
        log.create_topic("t", queues=2)
        log.append("t", 1, ROWS)
        modes = _modes(root)
        assert configs and board  # (still open above)
        assert modes["configs.sqlite"] == modes["positions.sqlite"] == 0o600, modes
        assert modes["bus/t/index.sqlite"] == 0o600 and modes["bus/t"] == 0o700, modes
        for path, mode in modes.items():
            if Path(root / path).is_dir():
                assert mode == 0o700, (path, oct(mode))
            else:  # the stores' files, their -wal and -shm, the segments
                assert mode == 0o600, (path, oct(mode))
        # the REST credentials file, even over a leftover temporary file
        users = tmp_path / "users"
        (tmp_path / "users.tmp").write_text("")
        os.chmod(tmp_path / "users.tmp", 0o644)
        add_credential(str(users), "alice", "admin", "pw")
        assert stat.S_IMODE(users.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_a_reader_past_the_end_of_its_queue_fails_naming_topic_and_queue(tmp_path: Path) -> None:
    """The topic reader's planning (what Spark asks every trigger), on a real log: a position
    past a queue's end is not waited at (that skipped what was written below it)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from sluice.bus.base import PositionBeyondEnd
    from sluice.bus.spark import TopicReaderPlan, _TopicReader

    root = tmp_path / "bus"
    _topic(root)  # queue 0 ends at 6, queue 1 at 3
    reader = _TopicReader(TopicReaderPlan("sink-x", EmbeddedLog(root), ("t",)))
    at_end = {"q": {"t/0": 6, "t/1": 3}}
    assert reader.latestOffset(at_end, ReadAllAvailable())["q"] == at_end["q"]
    with pytest.raises(PositionBeyondEnd) as caught:
        reader.latestOffset({"q": {"t/0": 6, "t/1": 17}}, ReadAllAvailable())
    text = str(caught.value)
    assert "topic 't' queue 1" in text and "sink-x" in text and "(3)" in text, text
