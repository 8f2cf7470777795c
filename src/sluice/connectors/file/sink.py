"""FileSinkConnector: appends one line per record (`value` + `\\n`) to a file.

Delivery: exactly-once. Each task writes its share of a micro-batch to a staged part file; the
connector's `commit` (driver) appends the parts to the target in task order under a file lock and
records the batch in a small state file next to the target, so a replayed batch is not appended
twice and a commit interrupted half-way is rolled back (truncated) and redone.
Unit of parallelism: one task per group of queues (`max.tasks`); records of one queue stay in order.
A null value is written as an empty line. STRING and BYTES values are written as they are; other
values as their string form.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectRecord,
    SinkConnector,
    SinkTask,
)

CONFIG = ConfigDef(
    ConfigKey("filename", type="path", doc="path of the file to append to"),
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
)

_STALE_PART_S = 3600.0


def _staging_dir(path: str) -> str:
    head, tail = os.path.split(os.path.abspath(path))
    return os.path.join(head, f".{tail}.sluice")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSinkTask(SinkTask):
    """Writes its records of one micro-batch to a staged part file."""

    def start(self, config: Mapping[str, str]) -> None:
        self.path = CONFIG.parse(config)["filename"]
        self._part: str | None = None
        self._out: Any = None
        self._bytes = 0

    def _file(self) -> Any:
        if self._out is None:
            staging = _staging_dir(self.path)
            os.makedirs(staging, exist_ok=True)
            batch = self.context.batch_id
            tag = f"{batch.run}-{batch.number}" if batch else "nobatch"
            self._part = os.path.join(
                staging, f"{tag}-{self.context.task_id}-{uuid.uuid4().hex}.part"
            )
            self._out = open(self._part, "wb")  # noqa: SIM115 - closed in flush()
        return self._out

    def put(self, records: list[ConnectRecord]) -> None:
        out = self._file()
        for record in records:
            value = record.value
            if value is None:
                data = b""
            elif isinstance(value, bytes):
                data = value
            else:
                data = str(value).encode("utf-8")
            out.write(data + b"\n")
            self._bytes += len(data) + 1

    def put_batch(self, batch: pa.RecordBatch) -> None:
        values = batch.column("value")
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.binary())
        if not pa.types.is_binary(values.type):
            return super().put_batch(batch)
        # value + "\n" for every row, built in C++: the result's data buffer is the bytes to write.
        values = pc.fill_null(values, b"")
        lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), b"\n")
        if isinstance(lines, pa.ChunkedArray):
            lines = lines.combine_chunks()
        # A freshly computed array starts at offset 0, so its bytes are data[0:total].
        total = pc.sum(pc.binary_length(lines)).as_py() or 0
        if total:
            self._file().write(memoryview(lines.buffers()[2])[:total])
            self._bytes += total

    def flush(self, batch_id: BatchId) -> Any:
        if self._out is None:
            return None
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        self._out = None
        return {"part": self._part, "bytes": self._bytes}

    def stop(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


class FileSinkConnector(SinkConnector):
    """Appends records to one file, one line each, exactly once per micro-batch."""

    config_def = CONFIG
    task_class = FileSinkTask
    delivery = "exactly-once"
    key_aliases = {"file": "filename"}  # Kafka's FileStreamSinkConnector's name
    ordered_commit = True

    def validate(self, config: Mapping[str, str]) -> None:
        path = CONFIG.parse(config)["filename"]
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ConfigException("filename", f"directory {parent!r} does not exist")
        if os.path.isdir(path):
            raise ConfigException("filename", f"{path!r} is a directory, not a file")
        target = path if os.path.exists(path) else parent
        if not os.access(target, os.W_OK):
            raise ConfigException("filename", f"{target!r} is not writable (permission denied)")

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self.path = os.path.abspath(CONFIG.parse(config)["filename"])

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        parts = [m["part"] for m in messages if m]
        staging = _staging_dir(self.path)
        os.makedirs(staging, exist_ok=True)
        state_path = os.path.join(staging, "state.json")
        with open(os.path.join(staging, "lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = _read_state(state_path)
            done = (
                state.get("run") == batch_id.run
                and state.get("batch", -1) >= batch_id.number
                and not state.get("pending")
            )
            if not done:
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
            for part in parts:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(part)
            _remove_stale_parts(staging)

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        for m in messages:
            if m:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(m["part"])


def _copy(src: int, dst: int) -> None:
    size = os.fstat(src).st_size
    sent = 0
    while sent < size:
        n = os.sendfile(dst, src, sent, size - sent)
        if n == 0:
            break
        sent += n


def _read_state(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _write_state(path: str, batch_id: BatchId, length: int, *, pending: bool) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(
            {"run": batch_id.run, "batch": batch_id.number, "length": length, "pending": pending}, f
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def _remove_stale_parts(staging: str) -> None:
    # Parts of tasks that died before their batch committed are never referenced again.
    cutoff = time.time() - _STALE_PART_S
    for name in os.listdir(staging):
        if name.endswith(".part"):
            full = os.path.join(staging, name)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(full).st_mtime < cutoff:
                    os.remove(full)
