"""What the CDC source connectors share: the connector side (the common keys, keys into a JDBC
connection, the snapshot-mode refusal, schemas, the task plan), the task side (the plan, the
captured tables and their rows' column checks, the change records) and small helpers. Each
database's module adds how it reads its log and decodes its values."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime
from typing import Any

from sluice.connectors.cdc._envelope import envelope_schema, key_text, source_block
from sluice.connectors.cdc._snapshot import SnapshotTask, check_mode
from sluice.connectors.jdbc._config import (
    Connection,
    connection_client_options,
    parse_connection,
)
from sluice.sdk import (
    ClientOption,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectException,
    ConnectRecord,
    ReadLimit,
    RecordPartition,
    ReplayableSourceTask,
    Schema,
    SourceConnector,
)

PLAN_KEY = "cdc.task.plan"


def config_def(url: str, port: int, unit: str, *specific: ConfigKey) -> ConfigDef:
    """The keys every CDC connector has (`connection.*`, Debezium's `database.*`, `topic.prefix`,
    `table.exclude.list`, `snapshot.mode`) around the database's `specific` ones; `url` is the
    JDBC URL form, `unit` what holds a table (`database`, `schema`)."""
    return ConfigDef(
        ConfigKey("connection.url", default=None, doc=url),
        ConfigKey("connection.user", default="", doc="user"),
        ConfigKey("connection.password", default="", doc="password"),
        ConfigKey("database.hostname", default=None, doc="host (instead of connection.url)"),
        ConfigKey("database.port", type="int", default=port, doc="port"),
        ConfigKey("database.user", default=None, doc="user"),
        ConfigKey("database.password", default=None, doc="password"),
        ConfigKey(
            "topic.prefix",
            pattern=r"[a-zA-Z0-9_.-]{1,80}",
            doc=f"topics are <topic.prefix>.<{unit}>.<table>",
        ),
        # Debezium's key; `_` makes names the RocketMQ bus takes (its broker refuses '.')
        ConfigKey(
            "topic.delimiter",
            default=".",
            pattern=r"[a-zA-Z0-9_.-]{1,4}",
            doc="what joins the prefix, the schema or database and the table in a topic name",
        ),
        *specific,
        ConfigKey("table.exclude.list", type="list", default=[], doc=f"{unit}.table, …"),
        ConfigKey("snapshot.mode", default="initial", doc="initial | when_needed | never"),
    )


def connection_config(
    values: Mapping[str, Any], raw: Mapping[str, str], url: str | None
) -> dict[str, str]:
    """The JDBC connector's `connection.*` keys, from `connection.url` or the Debezium key family
    (`url` is the JDBC URL those keys make; None when `database.hostname` is not set)."""
    if values["connection.url"]:
        return {k: v for k, v in raw.items() if k.startswith("connection.")}
    if url is None:
        raise ConfigException("connection.url", "set connection.url or database.hostname")
    return {
        "connection.url": url,
        "connection.user": values["database.user"] or values["connection.user"],
        "connection.password": values["database.password"] or values["connection.password"],
    }


def partition(prefix: str, table: str) -> RecordPartition:
    """A captured table's partition (one per table: its position moves with the log's)."""
    return {"server": prefix, "table": table}


def sql_error(exc: BaseException) -> str:
    """The first line of a database error (the driver's, under SQLAlchemy's wrapper)."""
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


class CdcSourceConnector(SourceConnector):
    """A change-data-capture connector: one task reads the log of the tables `start` described
    (`self.tables`, see `describe_table`); records are Debezium envelopes keyed by the primary
    key as JSON text. A database's connector sets `config_def` and fills in `jdbc_url` and
    `setup`."""

    config_def: ConfigDef

    @abstractmethod
    def jdbc_url(self, values: Mapping[str, Any]) -> str | None:
        """The JDBC URL the `database.*` keys make (None without `database.hostname`); raises
        a `ConfigException` naming a key the database needs beside it."""

    @abstractmethod
    def setup(self, db: Any, conn: Any) -> list[dict[str, Any]]:
        """Check the server and the user's rights, prepare the log (a slot, a publication) and
        describe the captured tables (`describe_table`), on a connection to the database."""

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """`connection.url`'s parameters that reach the driver (the worker's client policy
        applies to them as to the JDBC connectors'; the `database.*` keys make a URL without)."""
        values = cls.config_def.parse(config)
        return connection_client_options(connection_config(values, config, cls().jdbc_url(values)))

    def check_values(self, values: Mapping[str, Any]) -> None:
        """Checks of the parsed keys beyond the connection (`validate`)."""
        check_mode(values["snapshot.mode"])

    def _connection(self, config: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        values = self.config_def.parse(config)
        return values, connection_config(values, config, self.jdbc_url(values))

    def validate(self, config: Mapping[str, str]) -> None:
        values, connection = self._connection(config)
        parse_connection(connection)
        self.check_values(values)

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors.jdbc._db import Database

        super().start(config)
        self.values, self.connection = self._connection(config)
        db = Database(parse_connection(self.connection))
        with db.connect() as conn:
            self.tables = self.setup(db, conn)
            conn.commit()

    def key_schema(self) -> Schema:
        return Schema.string()

    def value_schemas(self) -> list[tuple[RecordPartition, Schema]]:
        return [
            (
                partition(self.values["topic.prefix"], t["table"]),
                envelope_schema(t["topic"], [(n, Schema.from_json(s)) for n, s in t["columns"]]),
            )
            for t in self.tables
        ]

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=200_000)

    def task_plan(self) -> dict[str, Any]:
        """What the task needs beyond the connection and the tables."""
        return {}

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        plan = {
            "prefix": self.values["topic.prefix"],
            "snapshot": self.values["snapshot.mode"],
            **self.task_plan(),
            "tables": self.tables,
        }
        return [{**self.connection, PLAN_KEY: json.dumps(plan)}]


class CdcTable:
    """One captured table as a task knows it (from the plan: `describe_table`'s dict)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.name: str = data["table"]
        self.topic: str = data["topic"]
        self.pk: list[str] = data["pk"]
        self.columns = [(n, Schema.from_json(s)) for n, s in data["columns"]]
        self.schemas = dict(self.columns)
        #: the database (MySQL) or schema (PostgreSQL) and the table's own name
        self.space, self.short = self.name.split(".", 1)

    def check_columns(self, names: Collection[str], where: str, *, partial: bool = False) -> None:
        """Fail naming the columns if a logged row's `names` do not fit the connector's schema:
        a column it does not know, or (unless `partial`, a key-only image) a required one
        missing."""
        extra = [n for n in names if n not in self.schemas]
        if extra:
            raise ConnectException(
                f"{where}: table {self.name} now has column(s) {extra} that the connector's "
                "schema does not know (ALTER TABLE … ADD COLUMN while running)",
                suggestion="restart the connector: it reads the table's columns again at start",
            )
        missing = (
            [] if partial else [n for n, s in self.columns if n not in names and not s.optional]
        )
        if missing:
            raise ConnectException(
                f"{where}: table {self.name} has no column(s) {missing} in the log, which the "
                "connector's schema requires (a DROP or RENAME COLUMN)",
                suggestion="restart the connector to register the new schema",
            )


class CdcTask(SnapshotTask, ReplayableSourceTask):
    """The task side of a CDC connector: reads the plan (`start`, then `configure` with the
    database's part of it), owns one partition per table, and builds the change records."""

    connector_name: str  # the `source.connector` value: "mysql", "postgresql"
    table_class: type[CdcTable] = CdcTable

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors.jdbc._db import Database

        plan = json.loads(config[PLAN_KEY])
        self.prefix: str = plan["prefix"]
        self.snapshot_mode = plan.get("snapshot", "never")
        self.tables = {t["table"]: self.table_class(t) for t in plan["tables"]}
        self.connection: Connection = parse_connection(config)
        self.db = Database(self.connection)
        self._asked: set[str] = set()
        self.configure(plan)

    @abstractmethod
    def configure(self, plan: dict[str, Any]) -> None:
        """Take the database's part of the plan (`CdcSourceConnector.task_plan`)."""

    def partitions(self) -> list[RecordPartition]:
        return [partition(self.prefix, name) for name in self.tables]

    def source(self, table: CdcTable, **known: Any) -> dict[str, Any]:
        """A `source` block of one of `table`'s events (`known`: `ts_ms`, `lsn`, `gtid`, …)."""
        return source_block(self.connector_name, self.prefix, table.space, table.short, **known)

    def change_records(
        self, table: CdcTable, op: str, before: Any, after: Any, at: tuple[dict, datetime, int]
    ) -> Iterator[ConnectRecord]:
        """The records of one row change (`at`: its source block, commit time and the event's
        `ts_ms`). An update that changes the primary key is a delete of the old key and a
        create of the new one, as Debezium emits it."""
        source, ts, now = at

        def record(op: str, b: Any, a: Any) -> ConnectRecord:
            return ConnectRecord(
                value={"before": b, "after": a, "source": source, "op": op, "ts_ms": now},
                key=key_text(a if a is not None else b, table.pk),
                topic=table.topic,
                timestamp=ts,
            )

        if (
            op == "u"
            and before is not None
            and after is not None
            and any(before.get(k) != after.get(k) for k in table.pk)
        ):
            yield record("d", before, None)
            yield record("c", None, after)
        else:
            yield record(op, before, after)
