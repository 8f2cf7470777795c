"""ParquetSinkConnector: writes records as partitioned Parquet (or JSON lines) files in a folder.

Delivery: exactly-once per micro-batch. Each task writes its rows of a micro-batch into staged
files (`<staging.dir>/<run>-<batch>-<task>-<uuid>/…`, fsynced) and returns their names. The
connector's commit (driver) then, under a file lock, records the batch's moves (staged → final)
in `state.json` as *pending*, renames each file to its final name, and records the batch *done*.
Final names are keyed by the batch: `<partition dirs>/part-<run>-<batch>-<task>-<n>.parquet`.
A replayed micro-batch whose batch is done writes nothing; one whose commit was cut short by a
crash finishes the recorded moves (roll forward: the staged files are complete and fsynced) and
drops its new copies. So every record lands in exactly one file, once.

What readers see: each file appears whole, by one atomic `rename` on the same file system, and
nothing of an uncommitted batch is ever in the table folder (staging lives beside it, not inside,
so no reader's directory listing finds it). A batch that spans several files appears file by
file within its commit (a few milliseconds): plain files have no multi-file atomic step that
Spark, pyarrow and DuckDB all honour. Spark's own `_spark_metadata` log is honoured by Spark
only, and is an internal format. Where a reader must never see part of a micro-batch, use
`DeltaSinkConnector` or `IcebergSinkConnector`, whose commits are atomic for every engine.

Layout: hive-style partition folders (`region=eu/dt=2026-11-24/`), values escaped as Spark
escapes them; partition columns are left out of the files, as Spark and pyarrow expect. A file
is closed and the next one begun when it reaches `file.max.bytes`. A new field in the records
becomes a new column in the files written from then on: read with schema merging (Spark
`mergeSchema=true`, `pyarrow.dataset` with a unified schema, DuckDB `union_by_name=true`).

Keys (besides the row and partition keys of `sluice.connectors.lake`): `path` (the table
folder), `format` (`parquet` | `json`: JSON lines, one object per record), `file.max.bytes`
(default 128 MiB), `parquet.compression` (`snappy`), `staging.dir` (default
`.<folder>.sluice` beside the table folder; must be on the same file system).
Unit of parallelism: one task per group of queues (`max.tasks`).

Example::

    {"connector.class": "ParquetSinkConnector", "connect.topicnames": "orders",
     "path": "/lake/orders", "partition.fields": "region", "partition.time.format": "%Y-%m-%d"}
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.connectors.lake._config import PARQUET_CONFIG, RowSettings
from sluice.connectors.lake._rows import RollInterval
from sluice.connectors.lake._staging import STALE_S, RowsTask, check_writable
from sluice.sdk import (
    BatchId,
    ConfigException,
    Delivery,
    SinkConnector,
)
from sluice.sdk.durable import fsync_dir, read_state, write_state

#: characters Spark escapes in partition values (`ExternalCatalogUtils.escapePathName`)
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^")
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _staging(values: Mapping[str, Any]) -> str:
    if values["staging.dir"]:
        return os.path.abspath(values["staging.dir"])
    head, tail = os.path.split(os.path.abspath(values["path"]))
    return os.path.join(head, f".{tail}.sluice")


def _escape(value: Any) -> str:
    if value is None:
        return _NULL_PARTITION
    text = value.isoformat() if isinstance(value, (dt.datetime, dt.date, dt.time)) else str(value)
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 0x20 else c for c in text)


def _groups(table: pa.Table, columns: list[str]) -> Iterator[tuple[str, pa.Table]]:
    """(relative folder, rows without the partition columns) per partition of `table`."""
    if not columns:
        yield "", table
        return
    combos = table.select(columns).group_by(columns, use_threads=False).aggregate([])
    data = table.drop_columns(columns)
    for combo in combos.to_pylist():
        mask = None
        for name in columns:
            col = table.column(name)
            value = combo[name]
            hit = pc.is_null(col) if value is None else pc.equal(col, pa.scalar(value, col.type))
            hit = pc.fill_null(hit, False)
            mask = hit if mask is None else pc.and_(mask, hit)
        folder = "/".join(f"{_escape(name)}={_escape(combo[name])}" for name in columns)
        yield folder, data.filter(mask)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


class _File:
    """One open output file of one partition (Parquet or JSON lines)."""

    def __init__(self, path: str, schema: pa.Schema, fmt: str, compression: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path, self.schema = path, schema
        self._out = pa.OSFile(path, "wb")
        self._parquet = (
            pq.ParquetWriter(self._out, schema, compression=compression)
            if fmt == "parquet"
            else None
        )

    def write(self, rows: pa.Table) -> int:
        if self._parquet is not None:
            self._parquet.write_table(rows)
        else:
            lines = "".join(
                json.dumps(r, ensure_ascii=False, default=_json_default) + "\n"
                for r in rows.to_pylist()
            )
            self._out.write(lines.encode())
        return self._out.tell()

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        self._out.flush()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # the commit may rename it into the table at once
        finally:
            os.close(fd)
        self._out.close()


class ParquetSinkTask(RowsTask):
    """Writes its rows of each micro-batch into staged files, one or more per partition."""

    def start(self, config: Mapping[str, str]) -> None:
        values = PARQUET_CONFIG.parse(config)
        self.settings = RowSettings.of(values)
        self.format = values["format"]
        self.ext = "parquet" if self.format == "parquet" else "json"
        self.compression = values["parquet.compression"]
        self.max_bytes = values["file.max.bytes"]
        self.staging = _staging(values)
        self._open: dict[str, _File] = {}
        self._moves: list[tuple[str, str]] = []  # (staged path, path relative to the table)
        self._folder: str | None = None

    def put_rows(self, rows: pa.Table) -> None:
        for folder, part in _groups(rows, self.settings.partition_by):
            out = self._open.get(folder)
            if out is not None and not out.schema.equals(part.schema):
                self._finish(folder)  # another shape within one micro-batch: another file
                out = None
            if out is None:
                out = self._new_file(folder, part.schema)
            if out.write(part) >= self.max_bytes:
                self._finish(folder)

    def _new_file(self, folder: str, schema: pa.Schema) -> _File:
        b = self.context.batch_id
        if self._folder is None:
            tag = f"{b.run}-{b.number}" if b else "nobatch"
            self._folder = os.path.join(
                self.staging, f"{tag}-{self.context.task_id}-{uuid.uuid4().hex}"
            )
        run, number = (b.run, b.number) if b else ("norun", 0)
        name = (
            f"part-{run}-{number:08d}-{self.context.task_id:03d}-{len(self._moves):04d}.{self.ext}"
        )
        relative = f"{folder}/{name}" if folder else name
        staged = os.path.join(self._folder, relative)
        self._open[folder] = _File(staged, schema, self.format, self.compression)
        self._moves.append((staged, relative))
        return self._open[folder]

    def _finish(self, folder: str) -> None:
        self._open.pop(folder).close()

    def flush(self, batch_id: BatchId) -> Any:
        for folder in list(self._open):
            self._finish(folder)
        if not self._moves:
            return None
        message = {"folder": self._folder, "moves": self._moves}
        self._moves, self._folder = [], None
        return message

    def stop(self) -> None:
        for out in self._open.values():
            with contextlib.suppress(OSError):
                out.close()
        self._open.clear()


class ParquetSinkConnector(RollInterval, SinkConnector):
    """Writes records as partitioned Parquet or JSON lines files, exactly once per micro-batch."""

    config_def = PARQUET_CONFIG
    task_class = ParquetSinkTask
    guarantee = Delivery.EXACTLY_ONCE

    def validate(self, config: Mapping[str, str]) -> None:
        values = PARQUET_CONFIG.parse(config)
        RowSettings.of(values)
        path = values["path"]
        if os.path.isfile(path):
            raise ConfigException("path", f"{path!r} is a file, not a folder")
        check_writable("path", path)
        check_writable("staging.dir", _staging(values))

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        values = PARQUET_CONFIG.parse(config)
        self.path = os.path.abspath(values["path"])
        self.staging = _staging(values)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        staged = [m for m in messages if m]
        moves = [(src, os.path.join(self.path, rel)) for m in staged for src, rel in m["moves"]]
        os.makedirs(self.staging, exist_ok=True)
        state_path = os.path.join(self.staging, "state.json")
        with open(os.path.join(self.staging, "lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = read_state(state_path)
            if state.get("pending"):
                _move(state["pending"])  # a commit cut short: finish it (roll forward)
                finished = state["pending"]
                state["pending"] = None
                write_state(state_path, state)
                for src, _ in finished:  # the cut commit's (now empty) task folders
                    top = os.path.relpath(src, self.staging).split(os.sep)[0]
                    if top not in (os.curdir, os.pardir):
                        shutil.rmtree(os.path.join(self.staging, top), ignore_errors=True)
            done = state.get("run") == batch_id.run and state.get("batch", -1) >= batch_id.number
            if not done and moves:
                state = {"run": batch_id.run, "batch": batch_id.number, "pending": moves}
                write_state(state_path, state)
                _move(moves)
                state["pending"] = None
                write_state(state_path, state)
            elif not done:
                write_state(state_path, {"run": batch_id.run, "batch": batch_id.number})
        self.abort(batch_id, staged)
        _remove_stale(self.staging)

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        pending = read_state(os.path.join(self.staging, "state.json")).get("pending") or []
        keep = {os.path.dirname(src) for src, _ in pending}
        for m in messages:
            # a commit cut short keeps its files until the next commit finishes its moves
            if m and not any(k.startswith(m["folder"] + os.sep) or k == m["folder"] for k in keep):
                shutil.rmtree(m["folder"], ignore_errors=True)


def _move(moves: list[tuple[str, str]] | list[list[str]]) -> None:
    """Rename staged files to their final names (again after a crash: done ones are skipped)."""
    folders = set()
    for src, dst in moves:
        if os.path.exists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
            folders.add(os.path.dirname(dst))
    for folder in folders:
        fsync_dir(folder)


def _remove_stale(staging: str) -> None:
    # Folders of tasks that died before their batch committed are never referenced again.
    cutoff = time.time() - STALE_S
    for entry in os.scandir(staging):
        if entry.is_dir() and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry.path, ignore_errors=True)
