"""Exactly-once appends to one file, for any sink whose target is "append bytes to a file".

A sink writing lines, CSV, JSON lines or Avro blocks to a file extends `AppendSinkConnector` and
`AppendSinkTask` (set `target` in `start`, call `append(data)` from `put`): that is the whole
exactly-once machinery (the file sink is the example). The protocol underneath, usable alone:

1. **Executor, per task and micro-batch** — `StagedAppend.stage(batch_id, task_id)` opens a part
   file in a staging folder beside the target (`.<name>.sluice/`); the task writes its bytes
   there and `StagedPart.close()` fsyncs it and returns the commit message for `flush` to return.
2. **Driver, once per micro-batch** — `StagedAppend.commit(batch_id, messages)` appends the parts
   to the target in task order under a file lock, bracketed by a small state file
   (`state.json`: run, batch, length before the append, pending). A batch already appended is
   skipped (Spark replays commits after a crash); an append interrupted half-way is rolled back
   by truncating to the recorded length, then redone.

Parts of tasks that died before their batch committed are removed after an hour.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any, BinaryIO, ClassVar

from sluice.sdk._connector import BatchId, Delivery, SinkConnector, SinkTask
from sluice.sdk.durable import read_state, write_state

_STALE_PART_S = 3600.0


class StagedPart:
    """One task's bytes of one micro-batch, written to a part file (executor)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = 0
        self._out: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()/discard()

    def write(self, data: bytes | memoryview) -> None:
        self._out.write(data)
        self.size += len(data)

    def close(self) -> dict[str, Any]:
        """Make the part durable; the result is the commit message `SinkTask.flush` returns."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        return {"part": self.path, "bytes": self.size}

    def discard(self) -> None:
        """Close without keeping the part (the task stopped before its flush)."""
        self._out.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)


class StagedAppend:
    """The staged-parts + state-file append protocol for one target file (see module doc).

    Picklable (it holds only the path): build it in the connector's and the task's `start`.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        head, tail = os.path.split(self.path)
        self.staging = os.path.join(head, f".{tail}.sluice")

    def stage(self, batch_id: BatchId | None, task_id: int) -> StagedPart:
        """A new part for this task's share of `batch_id` (executor)."""
        os.makedirs(self.staging, exist_ok=True)
        tag = f"{batch_id.run}-{batch_id.number}" if batch_id else "nobatch"
        name = f"{tag}-{task_id}-{uuid.uuid4().hex}.part"
        return StagedPart(os.path.join(self.staging, name))

    def commit(self, batch_id: BatchId, messages: Sequence[Any]) -> None:
        """Append the parts named by `messages` (`StagedPart.close()` results, None for a task
        that wrote nothing) in order, exactly once per `batch_id` (driver)."""
        parts = [m["part"] for m in messages if m]
        os.makedirs(self.staging, exist_ok=True)
        state_path = os.path.join(self.staging, "state.json")
        with open(os.path.join(self.staging, "lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = read_state(state_path)
            done = (
                state.get("run") == batch_id.run
                and state.get("batch", -1) >= batch_id.number
                and not state.get("pending")
            )
            if not done:
                self._append(parts, batch_id, state, state_path)
            self.abort(messages)
            _remove_stale_parts(self.staging)

    def abort(self, messages: Sequence[Any]) -> None:
        """Remove the parts of a micro-batch that will not be committed (driver)."""
        for m in messages:
            if m:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(m["part"])

    def _append(self, parts: list[str], batch_id: BatchId, state: dict, state_path: str) -> None:
        # Not O_APPEND: sendfile() refuses append-mode targets; we seek to the end instead.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        with os.fdopen(fd, "wb") as out:
            if state.get("pending"):
                out.truncate(state["length"])  # roll back a half-done append
            length = out.seek(0, os.SEEK_END)
            _write_state(state_path, batch_id, length, pending=True)
            for part in parts:
                with open(part, "rb") as src:
                    _copy(src.fileno(), out.fileno())
            out.flush()
            os.fsync(out.fileno())
            _write_state(state_path, batch_id, out.tell(), pending=False)


class AppendSinkTask(SinkTask):
    """A sink task appending bytes to `target` (set it in `start`): `append` stages them, `flush`
    returns the part for the connector's commit, `stop` drops an unflushed part. Executor."""

    target: StagedAppend
    _part: StagedPart | None = None

    def append(self, data: bytes | memoryview) -> None:
        """Add `data` to this task's share of the current micro-batch."""
        if self._part is None:
            self._part = self.target.stage(self.context.batch_id, self.context.task_id)
        self._part.write(data)

    def flush(self, batch_id: BatchId) -> Any:
        part, self._part = self._part, None
        return part.close() if part is not None else None

    def stop(self) -> None:
        if self._part is not None:
            self._part.discard()
            self._part = None


class AppendSinkConnector(SinkConnector):
    """A sink connector committing its `AppendSinkTask`s' parts to `target` (set it in `start`)
    exactly once per micro-batch, in task order (so one queue may span several tasks)."""

    target: StagedAppend
    ordered_commit: ClassVar[bool] = True
    guarantee = Delivery.EXACTLY_ONCE

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        self.target.commit(batch_id, messages)

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        self.target.abort(messages)


def _copy(src: int, dst: int) -> None:
    size = os.fstat(src).st_size
    sent = 0
    while sent < size:
        n = os.sendfile(dst, src, sent, size - sent)
        if n == 0:
            break
        sent += n


def _write_state(path: str, batch_id: BatchId, length: int, *, pending: bool) -> None:
    write_state(
        path,
        {"run": batch_id.run, "batch": batch_id.number, "length": length, "pending": pending},
    )


def _remove_stale_parts(staging: str) -> None:
    # Parts of tasks that died before their batch committed are never referenced again.
    cutoff = time.time() - _STALE_PART_S
    for name in os.listdir(staging):
        if name.endswith(".part"):
            full = os.path.join(staging, name)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(full).st_mtime < cutoff:
                    os.remove(full)
