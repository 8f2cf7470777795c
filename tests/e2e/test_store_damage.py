"""A real worker whose store is damaged while it is down fails loudly, never silently.

A file source (`src-1` → `topic-1`) and a file pipeline (`src-2` → `topic-2` → `sink-2`) run and
deliver; the worker stops; then, as a bad restore, a full disk or a careless hand would: topic-1's
index is emptied, topic-2 is emptied (its folder removed: `src-2` re-creates it from offset 0,
below `sink-2`'s position).
New lines arrive; the worker starts again. Before, it started without a word: new records got
offsets 0.. below the sink's position and were never delivered, the sink RUNNING with lag 0. Now
every connector on a damaged topic is FAILED with a message naming the file, or the topic and
queue. Last, an emptied `positions.sqlite` stops the worker at start, naming the file. The
store's files are private to the worker's user. (Truncated segments, half indexes and the other
store files: tests/unit/test_store_damage.py, on the same real files without Spark.)
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import wait_until, whole_lines
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def _lines(path: Path) -> list[str]:
    return whole_lines(path)


def _status(worker: WorkerProcess, name: str) -> tuple[str, str]:
    """The connector's state and every trace its status shows."""
    status = worker.get(f"/v1/connectors/{name}/status").json()
    traces = [status["connector"].get("trace") or ""]
    traces += [t.get("trace") or "" for t in status.get("tasks", [])]
    return status["connector"]["state"], "\n".join(traces)


def _failed_with(worker: WorkerProcess, name: str, *words: str) -> str:
    found: dict[str, str] = {}

    def failed() -> bool:
        state, trace = _status(worker, name)
        found["state"], found["trace"] = state, trace
        return state == "FAILED" and all(w in trace for w in words)

    wait_until(failed, 240, f"{name} FAILED naming {words}", every=1.0)
    return found["trace"]


def _check_private(store: Path) -> None:
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    sqlite = [p for p in store.rglob("*") if ".sqlite" in p.name and p.is_file()]
    segments = list((store / "bus").rglob("*.arrow"))
    assert {p.name for p in sqlite} >= {"configs.sqlite", "positions.sqlite", "index.sqlite"}
    assert segments
    for path in sqlite + segments:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in (store / "bus").rglob("*"):
        if path.is_dir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_damage_done_while_the_worker_was_down_fails_loudly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in (1, 2):
        (data / f"in-{i}.txt").write_text("".join(f"old-{i}-{n}\n" for n in range(3)))
    # one micro-batch a second: three queries on a shared, loaded machine
    worker = WorkerProcess(tmp_path / "worker", extra_conf={"offsetCommitIntervalMsConfig": "1000"})
    worker.wait_boot(worker.launch(), timeout=420)  # a loaded machine boots slowly
    try:
        worker.file_pipeline(data, 2)
        worker.post_connector(
            "src-1",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(data / "in-1.txt"),
                "connect.topicname": "topic-1",
            },
        )
        wait_until(lambda: len(_lines(data / "out-2.txt")) == 3, 300, "out-2")

        def count(topic: str) -> int:
            queues = worker.get(f"/v1/topics/{topic}").json().get("queues", [])
            return sum(q["max_offset"] - q["min_offset"] for q in queues)

        def committed() -> int:
            offsets = worker.get("/v1/connectors/sink-2/offsets").json()["offsets"]
            return sum(int(o["offset"]["queueOffset"]) for o in offsets)

        wait_until(lambda: count("topic-1") == 3, 300, "3 records in topic-1")
        wait_until(lambda: committed() == 3, 120, "sink-2's positions stored")
    finally:
        assert worker.terminate() == 0, worker.log.read_text()[-3000:]
    store = tmp_path / "worker" / "store"
    _check_private(store)

    index = store / "bus" / "topic-1" / "index.sqlite"
    for leftover in (Path(f"{index}-wal"), Path(f"{index}-shm")):
        leftover.unlink(missing_ok=True)
    index.write_bytes(b"")
    shutil.rmtree(store / "bus" / "topic-2")
    for i in (1, 2):
        with (data / f"in-{i}.txt").open("a") as f:
            f.write("".join(f"new-{i}-{n}\n" for n in range(2)))

    worker.wait_boot(worker.launch(), timeout=420)  # a loaded machine boots slowly
    try:
        _failed_with(worker, "src-1", str(index), "is damaged")
        trace = _failed_with(worker, "sink-2", "topic 'topic-2' queue", "beyond the queue's end")
        assert "sink-2" in trace
        # src-2 re-created topic-2 and wrote the new lines there; none reached the sink
        wait_until(lambda: count("topic-2") == 2, 240, "the new lines in the new topic-2")
        assert _lines(data / "out-2.txt") == [f"old-2-{n}" for n in range(3)]
        assert "is damaged" in worker.log.read_text()
    finally:
        assert worker.terminate() == 0, worker.log.read_text()[-3000:]

    # an emptied position store: the worker does not start (it would replay or skip everything)
    positions = store / "positions.sqlite"
    for leftover in (Path(f"{positions}-wal"), Path(f"{positions}-shm")):
        leftover.unlink(missing_ok=True)
    positions.write_bytes(b"")
    before = worker.log.read_text()
    worker.launch()
    assert worker.proc is not None
    assert worker.proc.wait(120) == 2
    said = worker.log.read_text()[len(before) :]
    assert f"{positions} is damaged" in said and "storePathRootDir" in said, said
    assert "Traceback" not in said, said
