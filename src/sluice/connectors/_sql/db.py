"""Connections (SQLAlchemy Core engines), retries, error messages, and catalog queries.

One engine per database and process, created on first use and kept for the life of the process:
Spark reuses its Python workers, so a task started for the next micro-batch finds its connection
pool warm. `pool_pre_ping` replaces connections that died while the database was away.

Statements go through `Connection.exec_driver_sql` with `%s` parameters (both drivers use that
style): values are always bound, identifiers always quoted by the dialect (`%` doubled).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from sluice.connectors._sql.connection import Connection
from sluice.connectors._sql.dialect import ColumnInfo, Dialect
from sluice.connectors._sql.dialects import dialect_for
from sluice.connectors._sql.names import TableName
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk.retry import Backoff, retry

if TYPE_CHECKING:
    import sqlalchemy

log = logging.getLogger(__name__)

T = TypeVar("T")

_ENGINES: dict[Connection, Any] = {}
_ENGINES_LOCK = threading.Lock()

_INSTALL_HINT = "the JDBC connectors need SQLAlchemy, psycopg and PyMySQL: pip install sluice"


def _engine(connection: Connection, dialect: Dialect) -> sqlalchemy.Engine:
    with _ENGINES_LOCK:
        engine = _ENGINES.get(connection)
        if engine is None:
            try:
                from sqlalchemy import create_engine
            except ImportError as exc:  # pragma: no cover - they are dependencies of sluice
                raise ConnectException(str(exc), suggestion=_INSTALL_HINT) from exc
            connect_args = dialect.connect_args()
            extra = [v for k, v in connection.options if k == "options"]
            if extra:
                # libpq `options` from the URL (search_path, …) and ours (TimeZone) go together
                connect_args["options"] = " ".join([*extra, connect_args.get("options", "")])
            engine = create_engine(
                connection.sqlalchemy_url(),
                pool_pre_ping=True,
                pool_size=2,
                max_overflow=8,
                pool_recycle=1800,
                connect_args=connect_args,
            )
            _ENGINES[connection] = engine
        return engine


def error_text(exc: BaseException) -> str:
    """The database's own message, without SQLAlchemy's wrapping and statement dump."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):  # PyMySQL: (code, message)
        return f"{args[1]} (MySQL error {args[0]})"
    text = str(orig).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # psycopg puts hints and the statement position on further lines; keep the first two.
    return " ".join(lines[:2]) if lines else type(orig).__name__


def _error_code(exc: BaseException) -> str | int | None:
    """The server's error code: MySQL's number, else PostgreSQL's SQLSTATE."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return getattr(orig, "sqlstate", None) or _pg_connect_state(str(orig))


# psycopg reports failures while connecting without a SQLSTATE: recognise the server's message.
_PG_CONNECT_STATES = (
    ("password authentication failed", "28P01"),
    ('role "', "28000"),
    ("no pg_hba.conf entry", "28000"),
    ('database "', "3D000"),
)


def _pg_connect_state(message: str) -> str | None:
    if "FATAL" not in message:
        return None
    for text, state in _PG_CONNECT_STATES:
        if text in message and (state != "3D000" or "does not exist" in message):
            return state
    return None


def permanent_connect_failure(exc: BaseException) -> bool:
    """Wrong credentials or database: trying again cannot help."""
    return _error_code(exc) in (1044, 1045, 1049, 1698, "28P01", "28000", "3D000")


class Database:
    """One database: connects with `connection.attempts` tries, translates errors."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.dialect = dialect_for(connection.dialect)

    def describe(self) -> str:
        return self.connection.describe()

    def is_transient(self, exc: BaseException) -> bool:
        return self.dialect.is_transient(exc)

    # -- connections ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def connect(self, *, attempts: int | None = None) -> Iterator[sqlalchemy.Connection]:
        """A connection (autobegun transaction, rolled back unless committed).

        Opening it is tried `connection.attempts` times, `connection.backoff.ms` apart, while the
        failure is transient; then `RetriableException` (still unreachable) or `ConnectException`.
        """
        conn = self._open(self.connection.attempts if attempts is None else attempts)
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _open(self, attempts: int) -> sqlalchemy.Connection:
        from sqlalchemy.exc import DBAPIError

        engine = _engine(self.connection, self.dialect)

        def transient(exc: BaseException) -> bool:
            return (
                isinstance(exc, DBAPIError)
                and not permanent_connect_failure(exc)
                and self.is_transient(exc)
            )

        def give_up(exc: BaseException, retries: int, spent_s: float) -> NoReturn:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            raise RetriableException(
                f"cannot connect to {self.describe()}{tries}: {error_text(exc)}",
                suggestion="check that the database is running and reachable "
                "(connection.url, connection.attempts, connection.backoff.ms)",
            ) from None

        def warn(exc: BaseException, number: int, wait_s: float) -> None:
            log.warning(
                "cannot connect to %s (attempt %d of %d): %s",
                self.describe(),
                number,
                attempts,
                error_text(exc),
            )

        try:
            return retry(
                engine.connect,
                backoff=Backoff.fixed(self.connection.backoff_ms / 1000),
                attempts=attempts,
                retriable=transient,
                give_up=give_up,
                on_retry=warn,
            )
        except DBAPIError as exc:
            raise self._connect_error(exc) from None

    def _connect_error(self, exc: BaseException) -> ConnectException:
        code = _error_code(exc)
        where = self.describe()
        if code in (1045, "28P01"):
            return ConfigException(
                "connection.password",
                f"{where} refused the credentials: {error_text(exc)}",
                suggestion="check connection.user and connection.password",
            )
        if code in ("28000", 1044, 1698):
            return ConfigException(
                "connection.user", f"{where} refused the user: {error_text(exc)}"
            )
        if code in (1049, "3D000"):
            return ConfigException(
                "connection.url", f"{where}: the database does not exist: {error_text(exc)}"
            )
        return ConnectException(f"cannot connect to {where}: {error_text(exc)}")

    def check(self, *, attempts: int | None = None) -> None:
        """Connect (`attempts` tries, default `connection.attempts`); `ConfigException` if that
        fails."""
        try:
            with self.connect(attempts=attempts) as conn:
                conn.exec_driver_sql("SELECT 1").fetchall()
        except ConfigException:
            raise
        except ConnectException as exc:
            raise ConfigException(
                "connection.url", exc.message, suggestion=exc.suggestion
            ) from None

    # -- running work with retries -------------------------------------------------------------
    def retrying(
        self,
        work: Callable[[sqlalchemy.Connection], T],
        what: str,
        *,
        attempts: int,
        backoff_ms: int,
    ) -> T:
        """`work(conn)`, tried up to `attempts` times while failures are transient."""
        from sqlalchemy.exc import DBAPIError

        def once() -> T:
            with self.connect(attempts=1) as conn:
                return work(conn)

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, RetriableException):
                return True
            return isinstance(exc, DBAPIError) and self.is_transient(exc)

        def give_up(exc: BaseException, retries: int, spent_s: float) -> NoReturn:
            text = exc.message if isinstance(exc, RetriableException) else error_text(exc)
            raise RetriableException(
                f"{what}: {self.describe()} unavailable after {attempts} attempt(s): {text}"
            ) from None

        def warn(exc: BaseException, number: int, wait_s: float) -> None:
            log.warning("%s failed (attempt %d of %d): %s", what, number, attempts, exc)

        try:
            return retry(
                once,
                backoff=Backoff.fixed(backoff_ms / 1000),
                attempts=attempts,
                retriable=transient,
                give_up=give_up,
                on_retry=warn,
            )
        except DBAPIError as exc:
            raise self.statement_error(exc, what) from None

    def statement_error(self, exc: BaseException, what: str) -> ConnectException:
        if self.is_transient(exc):
            return RetriableException(f"{what}: {error_text(exc)}")
        return ConnectException(f"{what}: {error_text(exc)}")

    # -- catalog (the SQL is the dialect's) -------------------------------------------------
    def current_schema(self, conn: sqlalchemy.Connection) -> str:
        return self.dialect.current_schema(conn)

    def columns(self, conn: sqlalchemy.Connection, table: TableName) -> list[ColumnInfo] | None:
        """The table's columns in order, or None if there is no such table (or view)."""
        return self.dialect.columns(conn, table)

    def temp_columns(self, conn: sqlalchemy.Connection, name: str) -> list[ColumnInfo] | None:
        """Columns of a temporary table created on `conn`."""
        return self.dialect.temp_columns(conn, name)

    def primary_key(self, conn: sqlalchemy.Connection, table: TableName) -> list[str]:
        return self.dialect.primary_key(conn, table)

    def unique_keys(self, conn: sqlalchemy.Connection, table: TableName) -> list[set[str]]:
        """The column sets of the table's primary key and unique indexes."""
        keys: dict[object, set[str]] = {}
        for index, column in self.dialect.unique_key_rows(conn, table):
            keys.setdefault(index, set()).add(column)
        return list(keys.values())

    def tables(self, conn: sqlalchemy.Connection) -> list[TableName]:
        """The base tables of the current schema (PostgreSQL) or database (MySQL)."""
        rows = conn.exec_driver_sql(self.dialect.tables_sql).fetchall()
        return [TableName("", r[0]) for r in rows]

    def utc_now_sql(self) -> str:
        return self.dialect.utc_now_sql
