"""What the Delta and Iceberg sinks share: tasks stage rows, the driver commits a table version.

Each task writes its rows of a micro-batch to one Arrow IPC file in the staging folder and returns
its name; `TableSinkConnector.commit` (driver) reads the batch's files, asks `committed` whether
the table already holds this batch (a replay after a crash), and if not `publish`es them as one
table version, then removes the staged files. The table format's own commit is the atomic step;
the batch id recorded with it is what makes a replay a no-op.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from sluice.connectors.lake._config import RowSettings
from sluice.connectors.lake._rows import RollInterval, to_rows
from sluice.sdk import (
    BatchId,
    ConfigDef,
    ConfigException,
    ConnectRecord,
    Delivery,
    SinkConnector,
    SinkTask,
)
from sluice.sdk._arrow import batch_from_records

#: a staged file older than this belongs to a task that died before its batch committed
STALE_S = 3600.0


def app_id(connector: str, run: str) -> str:
    """The writer id recorded with each version: one per connector and run of its query."""
    return f"sluice:{connector}:{run}"


def remove_stale(folder: str, suffix: str) -> None:
    """Remove staged files no commit will ever reference (their task died)."""
    cutoff = time.time() - STALE_S
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            if entry.name.endswith(suffix):
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat().st_mtime < cutoff:
                        os.remove(entry.path)


def check_writable(key: str, folder: str) -> None:
    """Raise a ConfigException naming `key` unless `folder` exists or can be made, writable."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigException(key, f"{probe!r} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigException(key, f"{probe!r} is not writable (permission denied)")


class RowsTask(SinkTask):
    """A lake sink task: turns each part of the sink frame into table rows for `put_rows`."""

    settings: RowSettings

    def put(self, records: list[ConnectRecord]) -> None:
        if records:
            self.put_batch(batch_from_records(records))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self.put_rows(to_rows(batch, self.settings))

    @abstractmethod
    def put_rows(self, rows: pa.Table) -> None:
        """Write (or stage) these rows of the current micro-batch (executor)."""


class StagingTask(RowsTask):
    """Stages its rows of each micro-batch in one Arrow IPC file (executor)."""

    #: the connector's config definition (set by each sink)
    config_def: ClassVar[ConfigDef]

    def start(self, config: Mapping[str, str]) -> None:
        values = self.config_def.parse(config)
        self.settings = RowSettings.of(values)
        self.staging = self.staging_dir(values)
        self._writer: pa.RecordBatchStreamWriter | None = None
        self._files: list[str] = []
        self._rows = 0

    @abstractmethod
    def staging_dir(self, values: Mapping[str, Any]) -> str:
        """Where this sink stages its files."""

    def put_rows(self, rows: pa.Table) -> None:
        if self._writer is not None and not self._schema.equals(rows.schema):
            self._close()  # another shape within one micro-batch: another file
        if self._writer is None:
            os.makedirs(self.staging, exist_ok=True)
            b = self.context.batch_id
            tag = f"{b.run}-{b.number}" if b else "nobatch"
            name = f"{tag}-{self.context.task_id}-{uuid.uuid4().hex}.arrow"
            self._files.append(os.path.join(self.staging, name))
            self._writer = pa.ipc.new_stream(self._files[-1], rows.schema)
            self._schema = rows.schema
        self._writer.write_table(rows)
        self._rows += rows.num_rows

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def flush(self, batch_id: BatchId) -> Any:
        self._close()
        if not self._files:
            return None
        # No fsync: a staged file lost in a crash belongs to a batch Spark has not committed, and
        # Spark runs that batch again, so it is staged again.
        message = {
            "files": self._files,
            "rows": self._rows,
            "app": app_id(self.context.connector_name, batch_id.run),
        }
        self._files, self._rows = [], 0
        return message

    def stop(self) -> None:
        self._close()


class TableSinkConnector(RollInterval, SinkConnector):
    """Commits each micro-batch's staged rows as one table version, exactly once (driver)."""

    guarantee = Delivery.EXACTLY_ONCE

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    @abstractmethod
    def committed(self, app: str, batch_id: BatchId) -> bool:
        """True if the table holds batch `batch_id` of writer `app` (or a later one)."""

    @abstractmethod
    def publish(self, rows: pa.Table, app: str, batch_id: BatchId) -> None:
        """Write `rows` as one table version recording (`app`, `batch_id.number`)."""

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        staged = [m for m in messages if m]
        if not staged:
            return
        files = [f for m in staged for f in m["files"]]
        app = staged[0]["app"]
        if not self.committed(app, batch_id):
            self.publish(read_staged(files), app, batch_id)
        self.abort(batch_id, staged)

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        for m in messages:
            for f in (m or {}).get("files", ()):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f)


def read_staged(files: list[str]) -> pa.Table:
    """One table of the staged files, their schemas merged (a field one task lacks is null)."""
    tables = []
    for path in files:
        with pa.OSFile(path) as source:
            tables.append(pa.ipc.open_stream(source).read_all())
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")
