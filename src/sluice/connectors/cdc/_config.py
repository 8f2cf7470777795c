"""The keys of the CDC connectors: what both take (`connection.*` or Debezium's `database.*`,
`topic.prefix`, `topic.delimiter`, `table.exclude.list`, `snapshot.mode`, and `errors.retry.*`
with the default of riding out a database outage for good), each database's own
(`MYSQL_CONFIG`, `POSTGRES_CONFIG`), and which of the key families a config named its server
with (`TypedKeys`), so that a problem is reported under the key that was typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.sdk import ConfigDef, ConfigException, ConfigKey

#: `errors.retry.*` as a CDC connector reads them: how long it rides out a database outage.
RETRY_KEYS = ConfigDef(
    ConfigKey("errors.retry.timeout", type="int", default=-1, min=-1, doc="ms; -1 = forever"),
    ConfigKey("errors.retry.delay.max.ms", type="int", default=60_000, min=0, doc="backoff cap"),
)


def config_def(url: str, port: int, unit: str, *specific: ConfigKey) -> ConfigDef:
    """The keys every CDC connector has (`connection.*`, Debezium's `database.*`, `topic.prefix`,
    `table.exclude.list`, `snapshot.mode`) around the database's `specific` ones; `url` is the
    JDBC URL form, `unit` what holds a table (`database`, `schema`)."""
    return ConfigDef(
        ConfigKey("connection.url", default=None, doc=url),
        ConfigKey("connection.user", default="", doc="user"),
        ConfigKey("connection.password", type="password", default="", doc="password"),
        ConfigKey("database.hostname", default=None, doc="host (instead of connection.url)"),
        ConfigKey("database.port", type="int", default=port, doc="port"),
        ConfigKey("database.user", default=None, doc="user"),
        ConfigKey("database.password", type="password", default=None, doc="password"),
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


@dataclass(frozen=True)
class TypedKeys:
    """The keys a config names the server, the user and the password with (`connection.*` or
    Debezium's `database.*`): a problem with one is reported under the key that was typed."""

    server: str = "connection.url"
    user: str = "connection.user"
    password: str = "connection.password"

    @staticmethod
    def of(config: Mapping[str, str]) -> TypedKeys:
        if str(config.get("connection.url") or "").strip():
            return TypedKeys()
        return TypedKeys("database.hostname", "database.user", "database.password")

    def retyped(self, exc: ConfigException) -> ConfigException:
        """`exc` (the JDBC connection's, naming `connection.*`) naming the keys typed."""
        names = {
            "connection.url": self.server,
            "connection.user": self.user,
            "connection.password": self.password,
        }
        if all(k == v for k, v in names.items()):
            return exc

        def swap(text: str) -> str:
            return re.sub(
                r"\bconnection\.(url|user|password)\b",
                lambda m: names[m.group(0)],
                text,
            )

        message = exc.message.removeprefix(f"{exc.key}: ")
        suggestion = swap(exc.suggestion) if exc.suggestion else None
        return ConfigException(names.get(exc.key, exc.key), message, suggestion=suggestion)


#: the MySQL/MariaDB source's keys
MYSQL_CONFIG = config_def(
    "jdbc:mysql://host:port/database",
    3306,
    "database",
    ConfigKey("database.server.id", type="int", default=None, min=1, doc="replica server id"),
    ConfigKey("table.include.list", type="list", doc="database.table, …"),
)

#: the PostgreSQL source's keys
POSTGRES_CONFIG = config_def(
    "jdbc:postgresql://host:port/database",
    5432,
    "schema",
    ConfigKey("database.dbname", default=None, doc="database"),
    ConfigKey("table.include.list", type="list", default=[], doc="schema.table, …"),
    ConfigKey("slot.name", default="sluice", pattern=r"[a-z0-9_]{1,63}", doc="replication slot"),
    ConfigKey("publication.name", default="sluice_publication", doc="publication"),
)
