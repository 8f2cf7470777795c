"""DeltaSinkConnector: appends records to a Delta Lake table through delta-rs (`deltalake`, no JVM).

Delivery: exactly-once, one table version per micro-batch. Tasks stage their rows (Arrow IPC under
`staging.dir`); the connector's commit (driver) writes them with one `write_deltalake` call whose
commit carries a transaction action (`txn`, Delta's idempotent-writer record) with the app id
`sluice:<connector>:<run>` and the micro-batch number as its version. Before writing, the commit
reads that app id's version from the table (`DeltaTable.transaction_version`): a micro-batch Spark
replays after a crash finds itself there and writes nothing. Readers see whole versions only (the
Delta log is the atomic step).
Unit of parallelism: one task per group of queues (`max.tasks`) stages rows; one commit per batch.

Keys (besides the row and partition keys of `sluice.connectors.lake`): `delta.table.path` (a
local folder; created with the first batch), `file.max.bytes` (target size of a data file,
default 128 MiB), `staging.dir` (default `.<table>.sluice-staging` beside the table).
Partition columns are fixed when the table is created. A new field in the records becomes a new
nullable column (`schema_mode="merge"`).

Example::

    {"connector.class": "DeltaSinkConnector", "connect.topicnames": "orders",
     "delta.table.path": "/lake/orders", "partition.time.format": "%Y-%m-%d"}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sluice.connectors.lake._config import DELTA_CONFIG, RowSettings
from sluice.connectors.lake._rows import lake_types
from sluice.connectors.lake._staging import (
    StagingTask,
    TableSinkConnector,
    check_writable,
    remove_stale,
)
from sluice.sdk import BatchId, ConfigException, ConnectException
from sluice.sdk.extras import DELTA, require


def _deltalake() -> Any:
    return require(DELTA, "DeltaSinkConnector")


def _staging(values: Mapping[str, Any]) -> str:
    if values["staging.dir"]:
        return os.path.abspath(values["staging.dir"])
    head, tail = os.path.split(os.path.abspath(values["delta.table.path"]))
    return os.path.join(head, f".{tail}.sluice-staging")


class DeltaSinkTask(StagingTask):
    """Stages its share of each micro-batch for the connector's Delta commit."""

    config_def = DELTA_CONFIG

    def staging_dir(self, values: Mapping[str, Any]) -> str:
        return _staging(values)


class DeltaSinkConnector(TableSinkConnector):
    """Appends each micro-batch to a Delta table as one version, exactly once."""

    config_def = DELTA_CONFIG
    task_class = DeltaSinkTask
    requires = (DELTA,)

    def validate(self, config: Mapping[str, str]) -> None:
        values = DELTA_CONFIG.parse(config)
        settings = RowSettings.of(values)
        path = values["delta.table.path"]
        check_writable("delta.table.path", path)
        check_writable("staging.dir", _staging(values))
        deltalake = _deltalake()
        if deltalake.DeltaTable.is_deltatable(path):
            existing = deltalake.DeltaTable(path).metadata().partition_columns
            if list(existing) != settings.partition_by:
                raise ConfigException(
                    "partition.fields",
                    f"the table at {path!r} is partitioned by {list(existing)}, not by "
                    f"{settings.partition_by}",
                )
        elif os.path.exists(path) and os.listdir(path):
            raise ConfigException("delta.table.path", f"{path!r} is a folder but not a Delta table")

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        values = DELTA_CONFIG.parse(config)
        self.path = os.path.abspath(values["delta.table.path"])
        self.settings = RowSettings.of(values)
        self.file_bytes = values["file.max.bytes"]
        self.staging = _staging(values)

    def committed(self, app: str, batch_id: BatchId) -> bool:
        deltalake = _deltalake()
        if not deltalake.DeltaTable.is_deltatable(self.path):
            return False
        done = deltalake.DeltaTable(self.path).transaction_version(app)
        return done is not None and done >= batch_id.number

    def publish(self, rows: pa.Table, app: str, batch_id: BatchId) -> None:
        deltalake = _deltalake()
        properties = deltalake.CommitProperties(
            app_transactions=[deltalake.Transaction(app, batch_id.number)],
            custom_metadata={"sluice.batch": str(batch_id)},
        )
        try:
            deltalake.write_deltalake(
                self.path,
                lake_types(rows),
                mode="append",
                partition_by=self.settings.partition_by or None,
                schema_mode="merge",
                target_file_size=self.file_bytes,
                commit_properties=properties,
            )
        except Exception as exc:  # delta-rs raises several unrelated types
            raise ConnectException(
                f"delta.table.path: writing micro-batch {batch_id} to {self.path!r}: {exc}"
            ) from exc
        remove_stale(self.staging, ".arrow")
