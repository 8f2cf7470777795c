"""`sluice.sdk.StagedAppend`: exactly-once appends to one file, without Spark or a connector."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sluice.sdk import BatchId, StagedAppend


def _stage(target: StagedAppend, batch: BatchId, data: bytes, task: int = 0) -> dict:
    part = target.stage(batch, task)
    part.write(data)
    return part.close()


def test_parts_are_appended_in_task_order_once_per_batch(tmp_path: Path) -> None:
    target = StagedAppend(str(tmp_path / "out.jsonl"))
    b0 = BatchId("run", 0)
    first = [_stage(target, b0, b'{"a":1}\n', 0), None, _stage(target, b0, b'{"b":2}\n', 2)]
    assert first[0]["bytes"] == 8
    target.commit(b0, first)
    target.commit(b0, [_stage(target, b0, b"again\n")])  # a replayed commit: skipped
    assert (tmp_path / "out.jsonl").read_bytes() == b'{"a":1}\n{"b":2}\n'
    state = json.loads((tmp_path / ".out.jsonl.sluice" / "state.json").read_text())
    assert state == {"run": "run", "batch": 0, "length": 16, "pending": False}
    assert not list((tmp_path / ".out.jsonl.sluice").glob("*.part"))  # replay's part removed too


def test_a_half_done_append_is_rolled_back_and_redone(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    target = StagedAppend(str(path))
    target.commit(BatchId("r", 0), [_stage(target, BatchId("r", 0), b"one\n")])
    message = _stage(target, BatchId("r", 1), b"two\n")
    (tmp_path / ".out.bin.sluice" / "state.json").write_text(
        json.dumps({"run": "r", "batch": 1, "length": 4, "pending": True})
    )
    with open(path, "ab") as f:
        f.write(b"tw")  # the crash left half of batch 1 behind
    target.commit(BatchId("r", 1), [message])
    assert path.read_bytes() == b"one\ntwo\n"


def test_abort_discard_and_stale_parts_leave_nothing_behind(tmp_path: Path) -> None:
    target = StagedAppend(str(tmp_path / "t.txt"))
    staging = tmp_path / ".t.txt.sluice"
    target.abort([_stage(target, BatchId("r", 0), b"x\n"), None])
    target.stage(BatchId("r", 0), 1).discard()
    stale = target.stage(BatchId("old", 0), 3)
    stale.close()
    os.utime(stale.path, (0, 0))  # a part of a task that died long ago
    target.commit(BatchId("r", 0), [])
    assert sorted(p.name for p in staging.iterdir()) == ["lock", "state.json"]
    assert (tmp_path / "t.txt").read_bytes() == b""
