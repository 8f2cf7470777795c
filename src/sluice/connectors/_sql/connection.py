"""Where and how to connect to a database: the `connection.*` keys every SQL connector (JDBC,
CDC) declares, parsed into a picklable `Connection`.

Connection URLs may be JDBC URLs (`jdbc:mysql://host:3306/db`, `jdbc:mariadb://…`,
`jdbc:postgresql://host:5432/db?user=u`) or SQLAlchemy URLs (`postgresql://…`,
`mysql+pymysql://…`); both become a SQLAlchemy URL on the one driver sluice ships for each
database (psycopg 3, PyMySQL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.sdk import (
    ClientOption,
    ConfigDef,
    ConfigException,
    ConfigKey,
    redact_url,
    refuse_unsafe,
    url_options,
)

#: The `connection.*` keys, declared by every SQL connector.
CONNECTION_KEYS = (
    ConfigKey("connection.url", doc="jdbc:mysql://host:3306/db, jdbc:postgresql://host/db, …"),
    ConfigKey("connection.user", default="", doc="database user (overrides the URL's)"),
    ConfigKey(
        "connection.password",
        type="password",
        default="",
        doc="database password (overrides the URL's)",
    ),
    ConfigKey(
        "connection.attempts", type="int", default=3, min=1, doc="tries to open a connection"
    ),
    ConfigKey(
        "connection.backoff.ms", type="int", default=10_000, min=0, doc="wait between tries (ms)"
    ),
)


@dataclass(frozen=True)
class Connection:
    """Where and how to connect: a SQLAlchemy URL split into picklable parts."""

    dialect: str  # "postgresql" | "mysql"
    host: str
    port: int | None
    database: str
    user: str
    password: str
    options: tuple[tuple[str, str], ...] = ()
    attempts: int = 3
    backoff_ms: int = 10_000

    @property
    def driver(self) -> str:
        from sluice.connectors._sql.dialects import dialect_for

        return dialect_for(self.dialect).driver

    def describe(self) -> str:
        """The URL without its password, for messages."""
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{self.dialect}://{user}{self.host}{port}/{self.database}"

    def sqlalchemy_url(self) -> Any:
        from sqlalchemy.engine import URL

        # libpq `options` are merged with sluice's own session options when connecting
        from sluice.connectors._sql.dialects import dialect_for

        query = {k: v for k, v in self.options if k != "options"}
        dialect_for(self.dialect).default_query(query)
        return URL.create(
            self.driver,
            username=self.user or None,
            password=self.password or None,
            host=self.host or None,
            port=self.port,
            database=self.database or None,
            query=query,
        )


def connection_client_options(config: Mapping[str, Any]) -> list[ClientOption]:
    """The URL parameters of `connection.url` that reach the database driver (libpq, PyMySQL),
    for the worker's client policy (`Connector.client_options`)."""
    return _client_options(parse_connection(config, checked=False))


def _client_options(connection: Connection) -> list[ClientOption]:
    from sluice.connectors._sql.dialects import dialect_for

    family = dialect_for(connection.dialect).client_family
    return url_options(family, "connection.url", connection.options)


def parse_connection(config: Mapping[str, Any], *, checked: bool = True) -> Connection:
    """The connection described by `connection.url` (+ user, password, attempts, backoff).
    `checked`: a URL parameter that no client policy allows (one that loads code, as libpq's
    ``sslkey=engine:key``, or lets the server read the worker's files, as ``local_infile``) is
    a `ConfigException` naming `connection.url`."""
    from sluice.connectors._sql.dialects import dialect_for_scheme

    keys = ConfigDef(*CONNECTION_KEYS).parse(config)
    raw = keys["connection.url"].strip()
    url = raw[5:] if raw.lower().startswith("jdbc:") else raw
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigException(
            "connection.url", f"cannot parse {redact_url(raw)!r}: {exc}"
        ) from None
    dialect = dialect_for_scheme(parts.scheme.lower())
    if dialect is None:
        raise ConfigException(
            "connection.url",
            f"unsupported database or driver {parts.scheme!r} in {redact_url(raw)!r}",
            suggestion="use jdbc:mysql://, jdbc:mariadb://, jdbc:postgresql:// or a "
            "postgresql+psycopg:// / mysql+pymysql:// SQLAlchemy URL",
        )
    if "," in parts.netloc:
        raise ConfigException("connection.url", "several hosts (failover URLs) are not supported")
    if not parts.hostname:
        raise ConfigException("connection.url", f"no host in {redact_url(raw)!r}")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    user = keys["connection.user"] or params.pop("user", "") or unquote(parts.username or "")
    password = (
        keys["connection.password"] or params.pop("password", "") or unquote(parts.password or "")
    )
    params.pop("user", None)
    params.pop("password", None)
    options = dialect.url_options(params, jdbc=raw.lower().startswith("jdbc:"))
    connection = Connection(
        dialect=dialect.name,
        host=parts.hostname,
        port=port,
        database=unquote(parts.path.lstrip("/")),
        user=user,
        password=password,
        options=tuple(options),
        attempts=keys["connection.attempts"],
        backoff_ms=keys["connection.backoff.ms"],
    )
    if checked:
        refuse_unsafe(_client_options(connection))
    return connection
