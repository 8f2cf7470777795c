"""What the CDC source connectors share: the connector side (keys into a JDBC connection, the
snapshot-mode refusal, schemas, the task plan) and small helpers. Each database's module adds how
it reads its log."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sluice.connectors.cdc._envelope import envelope_schema
from sluice.connectors.cdc._snapshot import check_mode
from sluice.sdk import ConfigException, ReadLimit, RecordPartition, Schema, SourceConnector

PLAN_KEY = "cdc.task.plan"


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
    key as JSON text."""

    def check_snapshot_mode(self, values: Mapping[str, Any]) -> None:
        check_mode(values["snapshot.mode"])

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
