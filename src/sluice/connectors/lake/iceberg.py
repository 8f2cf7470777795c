"""IcebergSinkConnector: appends records to an Apache Iceberg table through `pyiceberg`, with a
SQL catalog (SQLite by default, PostgreSQL when several workers share it).

Delivery: exactly-once, one snapshot per micro-batch. Tasks stage their rows (Arrow IPC under
`staging.dir`); the connector's commit (driver) appends them in one transaction whose snapshot
summary carries `sluice.app` (`sluice:<connector>:<run>`) and `sluice.batch` (the micro-batch
number). Before appending, the commit looks for the newest snapshot of that app in the table's
history: a micro-batch Spark replays after a crash finds itself there and appends nothing. The
catalog's compare-and-swap of the metadata pointer is the atomic step: readers see whole snapshots.
Unit of parallelism: one task per group of queues (`max.tasks`) stages rows; one commit per batch.

Keys (besides the row and partition keys of `sluice.connectors.lake`): `iceberg.table`
(`namespace.table`, created with the first batch), `iceberg.warehouse` (a local folder for data
and metadata), `iceberg.catalog.uri` (a SQLAlchemy URL: default
`sqlite:///<warehouse>/catalog.sqlite`; `postgresql://user:pass@host/db` uses psycopg 3,
`mysql+pymysql://…` PyMySQL; its query parameters reach the driver under the worker's client
policy, as a JDBC URL's do),
`iceberg.catalog.name` (`sluice`), `file.max.bytes` (the table's
`write.target-file-size-bytes`, default 128 MiB), `staging.dir` (default
`<warehouse>/.sluice-staging/<table>`). Partition columns get identity transforms when the table
is created. A new field becomes a new optional column (`union_by_name`).

Example::

    {"connector.class": "IcebergSinkConnector", "connect.topicnames": "orders",
     "iceberg.warehouse": "/lake/warehouse", "iceberg.table": "shop.orders",
     "partition.fields": "region"}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa

from sluice.connectors.lake._config import ICEBERG_CONFIG, RowSettings
from sluice.connectors.lake._rows import lake_types
from sluice.connectors.lake._staging import (
    StagingTask,
    TableSinkConnector,
    check_writable,
    remove_stale,
)
from sluice.sdk import (
    MYSQL_CLIENT,
    POSTGRESQL_CLIENT,
    SQLITE_CLIENT,
    BatchId,
    ClientOption,
    ConfigException,
    ConnectException,
    redact_url,
    refuse_unsafe,
    url_options,
)
from sluice.sdk.extras import ICEBERG, require


def _staging(values: Mapping[str, Any]) -> str:
    if values["staging.dir"]:
        return os.path.abspath(values["staging.dir"])
    warehouse = os.path.abspath(values["iceberg.warehouse"])
    return os.path.join(warehouse, ".sluice-staging", values["iceberg.table"])


def _catalog_uri(values: Mapping[str, Any]) -> str:
    uri = values["iceberg.catalog.uri"]
    if not uri:
        return f"sqlite:///{os.path.abspath(values['iceberg.warehouse'])}/catalog.sqlite"
    if uri.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + uri.split("://", 1)[1]  # the driver sluice ships
    return uri


def catalog_client_options(uri: str) -> list[ClientOption]:
    """The query parameters of catalog URL `uri` that reach its driver (libpq, PyMySQL or
    sqlite3; a SQLite URL's file is checked against `file.allowed.dirs` by the worker). A
    database sluice ships no driver for is a ConfigException: its options are not known here."""
    key = "iceberg.catalog.uri"
    try:
        parts = urlsplit(uri)
        params = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigException(key, f"cannot parse {redact_url(uri)!r}: {exc}") from None
    database = parts.scheme.split("+", 1)[0].lower()
    family = {
        "sqlite": SQLITE_CLIENT,
        "postgresql": POSTGRESQL_CLIENT,
        "postgres": POSTGRESQL_CLIENT,
        "mysql": MYSQL_CLIENT,
    }.get(database)
    if family is None:
        raise ConfigException(
            key,
            f"unsupported catalog database {parts.scheme!r} in {redact_url(uri)!r}",
            suggestion="use sqlite:///…, postgresql://… or mysql+pymysql://…",
        )
    return url_options(family, key, params)


def open_catalog(values: Mapping[str, Any]) -> Any:
    """The SQL catalog of `values`; a URL it cannot use is a ConfigException naming the key."""
    require(ICEBERG, "IcebergSinkConnector")
    from pyiceberg.catalog.sql import SqlCatalog

    folder = os.path.abspath(values["iceberg.warehouse"])
    uri = _catalog_uri(values)
    refuse_unsafe(catalog_client_options(uri))
    for attempt in range(3):
        try:
            os.makedirs(folder, exist_ok=True)
            return SqlCatalog(values["iceberg.catalog.name"], uri=uri, warehouse="file://" + folder)
        except Exception as exc:  # SQLAlchemy: bad URL, missing driver, unreachable server
            # A new catalog's tables are created on first use without IF NOT EXISTS: another
            # process creating them at the same moment makes ours fail. They exist now: again.
            if "already exists" in str(exc) and attempt < 2:
                continue
            raise ConfigException(
                "iceberg.catalog.uri", f"cannot open the catalog at {redact_url(uri)!r}: {exc}"
            ) from None
    raise AssertionError("unreachable")


class IcebergSinkTask(StagingTask):
    """Stages its share of each micro-batch for the connector's Iceberg commit."""

    config_def = ICEBERG_CONFIG

    def staging_dir(self, values: Mapping[str, Any]) -> str:
        return _staging(values)


class IcebergSinkConnector(TableSinkConnector):
    """Appends each micro-batch to an Iceberg table as one snapshot, exactly once."""

    config_def = ICEBERG_CONFIG
    task_class = IcebergSinkTask
    requires = (ICEBERG,)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters of `iceberg.catalog.uri` (none for the default SQLite one)."""
        uri = config.get("iceberg.catalog.uri", "").strip()
        return catalog_client_options(uri) if uri else []

    def validate(self, config: Mapping[str, str]) -> None:
        values = ICEBERG_CONFIG.parse(config)
        RowSettings.of(values)
        check_writable("iceberg.warehouse", values["iceberg.warehouse"])
        check_writable("staging.dir", _staging(values))
        open_catalog(values)

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        values = ICEBERG_CONFIG.parse(config)
        self.values = values
        self.identifier = values["iceberg.table"]
        self.settings = RowSettings.of(values)
        self.staging = _staging(values)
        self._catalog: Any = None

    def _table(self, schema: pa.Schema | None = None) -> Any:
        """The table, created from `schema` (with its partitions) if it does not exist yet."""
        from pyiceberg.exceptions import NoSuchTableError

        if self._catalog is None:
            self._catalog = open_catalog(self.values)
        try:
            return self._catalog.load_table(self.identifier)
        except NoSuchTableError:
            if schema is None:
                return None
        namespace = self.identifier.rsplit(".", 1)[0]
        self._catalog.create_namespace_if_not_exists(namespace)
        table = self._catalog.create_table_if_not_exists(
            self.identifier,
            schema=schema,
            properties={"write.target-file-size-bytes": str(self.values["file.max.bytes"])},
        )
        if self.settings.partition_by and table.spec().is_unpartitioned():
            with table.update_spec() as spec:
                for name in self.settings.partition_by:
                    spec.add_identity(name)
            table = self._catalog.load_table(self.identifier)
        return table

    def committed(self, app: str, batch_id: BatchId) -> bool:
        table = self._table()
        if table is None:
            return False
        # newest first: the first snapshot of this app holds its last committed batch
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number, reverse=True):
            summary = snapshot.summary
            if summary is not None and summary.get("sluice.app") == app:
                return int(summary["sluice.batch"]) >= batch_id.number
        return False

    def publish(self, rows: pa.Table, app: str, batch_id: BatchId) -> None:
        rows = lake_types(rows)
        try:
            table = self._table(rows.schema)
            with table.transaction() as tx:
                with tx.update_schema() as update:
                    update.union_by_name(rows.schema)
                tx.append(
                    rows,
                    snapshot_properties={"sluice.app": app, "sluice.batch": str(batch_id.number)},
                )
        except Exception as exc:  # pyiceberg and the catalog's driver raise many types
            raise ConnectException(
                f"iceberg.table: appending micro-batch {batch_id} to {self.identifier!r}: {exc}"
            ) from exc
        remove_stale(self.staging, ".arrow")
