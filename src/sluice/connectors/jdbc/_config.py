"""Configuration of the JDBC connectors: keys and typed settings.

Options arrive as strings; `SourceSettings.parse` / `SinkSettings.parse` turn them into typed
settings and raise `ConfigException` naming the key. The `connection.*` keys and URLs are the
SQL connectors' shared part (`sluice.connectors._sql.connection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.connectors._sql.connection import CONNECTION_KEYS, Connection, parse_connection
from sluice.connectors._sql.names import TableName
from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
)

MODES = ("bulk", "incrementing", "timestamp", "timestamp+incrementing")
INSERT_MODES = ("insert", "upsert", "update")
PK_MODES = ("none", "record_key", "record_value")

#: Keys the stored positions depend on: a cursor stored under one mode is no cursor of another.
SOURCE_POSITION_KEYS = ("mode", "incrementing.column.name", "timestamp.column.name")

SOURCE_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("mode", doc="bulk, incrementing, timestamp or timestamp+incrementing"),
    ConfigKey("incrementing.column.name", default="", doc="strictly increasing column"),
    ConfigKey("timestamp.column.name", type="list", default=[], doc="last-modified column(s)"),
    ConfigKey("table.whitelist", type="list", default=[], doc="tables to copy: db.table,…"),
    ConfigKey("table.blacklist", type="list", default=[], doc="tables to skip"),
    ConfigKey("query", default="", doc="a SELECT to copy instead of tables"),
    ConfigKey(
        "poll.interval.ms", type="int", default=5000, min=0, doc="idle look-ups; bulk reloads"
    ),
    ConfigKey("batch.max.rows", type="int", default=50_000, min=1, doc="rows per fetch, at most"),
    ConfigKey("topic.prefix", default="", doc="topic = prefix + table name"),
    ConfigKey("connect.topicname", default="", doc="one topic for every table"),
    ConfigKey("timestamp.delay.interval.ms", type="int", default=0, min=0, doc="settle time"),
    ConfigKey("timestamp.initial", type="int", default=None, doc="epoch ms to start at; -1 = now"),
    ConfigKey("validate.non.null", type="bool", default=True, doc="require NOT NULL cursors"),
)

SINK_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("insert.mode", default="insert", doc="insert, upsert or update"),
    ConfigKey("pk.mode", default="none", doc="none, record_key or record_value"),
    ConfigKey("pk.fields", type="list", default=[], doc="primary key field names"),
    ConfigKey("delete.enabled", type="bool", default=False, doc="tombstone → DELETE"),
    ConfigKey("auto.create", type="bool", default=False, doc="CREATE TABLE when missing"),
    ConfigKey("auto.evolve", type="bool", default=False, doc="ALTER TABLE ADD missing columns"),
    ConfigKey("table.name.format", default="${topic}", doc="target table; ${topic} is replaced"),
    ConfigKey("batch.size", type="int", default=3000, min=1, doc="rows per statement"),
    ConfigKey("fields.whitelist", type="list", default=[], doc="value fields to write"),
    ConfigKey("max.retries", type="int", default=10, min=0, doc="retries of a failed write"),
    ConfigKey("retry.backoff.ms", type="int", default=3000, min=0, doc="wait between retries"),
    ConfigKey("errors.retry.timeout", type="int", default=0, min=-1, doc="ms; -1 = forever"),
    ConfigKey("errors.retry.delay.max.ms", type="int", default=60_000, min=0, doc="backoff cap"),
)


@dataclass(frozen=True)
class SourceSettings:
    """The typed JDBC source configuration."""

    connection: Connection
    mode: str
    incrementing_column: str
    timestamp_columns: tuple[str, ...]
    whitelist: tuple[TableName, ...]
    blacklist: tuple[TableName, ...]
    query: str
    poll_interval_ms: int
    batch_max_rows: int
    topic_prefix: str
    topic: str
    delay_ms: int
    timestamp_initial: int | None
    validate_non_null: bool

    @staticmethod
    def parse(config: Mapping[str, Any]) -> SourceSettings:
        keys = SOURCE_CONFIG.parse(config)
        mode = keys["mode"].strip().lower()
        if mode not in MODES:
            raise ConfigException("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        inc = keys["incrementing.column.name"].strip()
        ts = tuple(keys["timestamp.column.name"])
        if "timestamp" in mode and not ts:
            raise ConfigException(
                "timestamp.column.name", f"required key is missing (mode={mode} needs it)"
            )
        query = keys["query"].strip()
        white = tuple(TableName.parse(t) for t in keys["table.whitelist"])
        black = tuple(TableName.parse(t) for t in keys["table.blacklist"])
        if query and (white or black):
            raise ConfigException(
                "query", "cannot be combined with table.whitelist or table.blacklist"
            )
        if white and black:
            raise ConfigException("table.blacklist", "cannot be combined with table.whitelist")
        topic = keys["connect.topicname"].strip()
        if query and not (topic or keys["topic.prefix"]):
            raise ConfigException(
                "connect.topicname",
                "required key is missing (a query needs a topic)",
                suggestion="set connect.topicname, or topic.prefix (the whole topic name "
                "in query mode)",
            )
        initial = keys["timestamp.initial"]
        if initial is not None and initial < -1:
            raise ConfigException(
                "timestamp.initial", f"must be -1 (now) or epoch milliseconds, got {initial}"
            )
        return SourceSettings(
            connection=parse_connection(config),
            mode=mode,
            incrementing_column=inc,
            timestamp_columns=ts,
            whitelist=white,
            blacklist=black,
            query=query,
            poll_interval_ms=keys["poll.interval.ms"],
            batch_max_rows=keys["batch.max.rows"],
            topic_prefix=keys["topic.prefix"],
            topic=topic,
            delay_ms=keys["timestamp.delay.interval.ms"],
            timestamp_initial=initial,
            validate_non_null=keys["validate.non.null"],
        )

    @property
    def uses_incrementing(self) -> bool:
        return "incrementing" in self.mode

    @property
    def uses_timestamp(self) -> bool:
        return "timestamp" in self.mode


@dataclass(frozen=True)
class SinkSettings:
    """The typed JDBC sink configuration."""

    connection: Connection
    insert_mode: str
    pk_mode: str
    pk_fields: tuple[str, ...]
    delete_enabled: bool
    auto_create: bool
    auto_evolve: bool
    table_format: str
    batch_size: int
    fields_whitelist: tuple[str, ...]
    max_retries: int
    retry_backoff_ms: int
    retry_timeout_ms: int
    retry_delay_max_ms: int

    @staticmethod
    def parse(config: Mapping[str, Any]) -> SinkSettings:
        keys = SINK_CONFIG.parse(config)
        insert_mode = keys["insert.mode"].strip().lower()
        if insert_mode not in INSERT_MODES:
            raise ConfigException(
                "insert.mode", f"must be one of {', '.join(INSERT_MODES)}, got {insert_mode!r}"
            )
        pk_mode = keys["pk.mode"].strip().lower()
        if pk_mode not in PK_MODES:
            raise ConfigException(
                "pk.mode", f"must be one of {', '.join(PK_MODES)}, got {pk_mode!r}"
            )
        if insert_mode in ("upsert", "update") and pk_mode == "none":
            raise ConfigException(
                "pk.mode",
                f"insert.mode={insert_mode} needs a primary key",
                suggestion="set pk.mode=record_value (with pk.fields) or record_key",
            )
        if keys["delete.enabled"] and pk_mode != "record_key":
            raise ConfigException(
                "delete.enabled",
                "needs pk.mode=record_key (a tombstone has only its key)",
            )
        table_format = keys["table.name.format"].strip()
        return SinkSettings(
            connection=parse_connection(config),
            insert_mode=insert_mode,
            pk_mode=pk_mode,
            pk_fields=tuple(keys["pk.fields"]),
            delete_enabled=keys["delete.enabled"],
            auto_create=keys["auto.create"],
            auto_evolve=keys["auto.evolve"],
            table_format=table_format,
            batch_size=keys["batch.size"],
            fields_whitelist=tuple(keys["fields.whitelist"]),
            max_retries=keys["max.retries"],
            retry_backoff_ms=keys["retry.backoff.ms"],
            retry_timeout_ms=keys["errors.retry.timeout"],
            retry_delay_max_ms=keys["errors.retry.delay.max.ms"],
        )

    def table_for(self, topic: str) -> TableName:
        """The target table of a record from `topic` (`table.name.format`)."""
        return TableName.parse(self.table_format.replace("${topic}", topic))
