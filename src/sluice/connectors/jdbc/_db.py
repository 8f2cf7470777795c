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

from sluice.connectors.jdbc._config import Connection, TableName
from sluice.connectors.jdbc._dialect import (
    ColumnInfo,
    Dialect,
    dialect_for,
    mysql_column,
    pg_column,
)
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk._retry import Backoff, retry

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

    # -- catalog -------------------------------------------------------------------------------
    def current_schema(self, conn: sqlalchemy.Connection) -> str:
        sql = (
            "SELECT current_schema()" if self.dialect.name == "postgresql" else "SELECT DATABASE()"
        )
        return conn.exec_driver_sql(sql).scalar() or ""

    def columns(self, conn: sqlalchemy.Connection, table: TableName) -> list[ColumnInfo] | None:
        """The table's columns in order, or None if there is no such table (or view)."""
        if self.dialect.name == "postgresql":
            return self._pg_columns(conn, table)
        return self._mysql_columns(conn, table)

    def _pg_columns(self, conn: sqlalchemy.Connection, table: TableName) -> list[ColumnInfo] | None:
        oid = conn.exec_driver_sql(
            "SELECT to_regclass(%s)::oid", (self.dialect.table(table, raw=True),)
        ).scalar()
        if oid is None:
            return None
        rows = conn.exec_driver_sql(
            """
            SELECT a.attname,
                   bt.typname,
                   format_type(bt.oid, CASE WHEN t.typtype = 'd' THEN t.typtypmod
                                            ELSE a.atttypmod END),
                   NOT a.attnotnull,
                   bt.typtype,
                   (a.attidentity IN ('a', 'd')
                    OR COALESCE(pg_get_expr(d.adbin, d.adrelid), '') LIKE 'nextval(%%')
            FROM pg_attribute a
            JOIN pg_type t ON t.oid = a.atttypid
            JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype
                                             ELSE t.oid END
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            (oid,),
        ).fetchall()
        return [pg_column(r[0], r[1], r[2], bool(r[3]), r[4], bool(r[5])) for r in rows]

    def _mysql_columns(
        self, conn: sqlalchemy.Connection, table: TableName
    ) -> list[ColumnInfo] | None:
        schema = table.schema or self.current_schema(conn)
        rows = conn.exec_driver_sql(
            """
            SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION,
                   NUMERIC_SCALE, EXTRA
            FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
            ORDER BY ORDINAL_POSITION
            """,
            (schema, table.name),
        ).fetchall()
        if not rows:
            return None
        return [mysql_column(r[0], r[1], r[2], r[3] == "YES", r[4], r[5], r[6] or "") for r in rows]

    def temp_columns(self, conn: sqlalchemy.Connection, name: str) -> list[ColumnInfo] | None:
        """Columns of a temporary table created on `conn` (MySQL does not list them)."""
        if self.dialect.name == "postgresql":
            return self._pg_columns(conn, TableName("", name))
        rows = conn.exec_driver_sql(f"SHOW COLUMNS FROM {self.dialect.quote(name)}").fetchall()
        out = []
        for field, type_, null, _key, _default, extra in rows:
            type_ = type_.decode() if isinstance(type_, bytes) else type_
            base = type_.split("(")[0].split(" ")[0].lower()
            precision = scale = None
            if base in ("decimal", "numeric"):
                inner = type_[type_.find("(") + 1 : type_.find(")")].split(",")
                precision, scale = int(inner[0]), int(inner[1]) if len(inner) > 1 else 0
            out.append(
                mysql_column(field, base, type_, null == "YES", precision, scale, extra or "")
            )
        return out

    def primary_key(self, conn: sqlalchemy.Connection, table: TableName) -> list[str]:
        if self.dialect.name == "postgresql":
            rows = conn.exec_driver_sql(
                """
                SELECT a.attname
                FROM pg_index i
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                WHERE i.indrelid = to_regclass(%s) AND i.indisprimary
                ORDER BY array_position(i.indkey::int2[], a.attnum)
                """,
                (self.dialect.table(table, raw=True),),
            ).fetchall()
        else:
            rows = conn.exec_driver_sql(
                """
                SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
                WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY'
                ORDER BY ORDINAL_POSITION
                """,
                (table.schema or self.current_schema(conn), table.name),
            ).fetchall()
        return [r[0] for r in rows]

    def unique_keys(self, conn: sqlalchemy.Connection, table: TableName) -> list[set[str]]:
        """The column sets of the table's primary key and unique indexes."""
        if self.dialect.name == "postgresql":
            rows = conn.exec_driver_sql(
                """
                SELECT i.indexrelid, a.attname
                FROM pg_index i
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL
                """,
                (self.dialect.table(table, raw=True),),
            ).fetchall()
        else:
            rows = conn.exec_driver_sql(
                """
                SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
                WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0
                """,
                (table.schema or self.current_schema(conn), table.name),
            ).fetchall()
        keys: dict[object, set[str]] = {}
        for index, column in rows:
            keys.setdefault(index, set()).add(column)
        return list(keys.values())

    def tables(self, conn: sqlalchemy.Connection) -> list[TableName]:
        """The base tables of the current schema (PostgreSQL) or database (MySQL)."""
        if self.dialect.name == "postgresql":
            sql = """
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
                ORDER BY c.relname
            """
        else:
            sql = """
                SELECT TABLE_NAME FROM information_schema.TABLES
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'
                ORDER BY TABLE_NAME
            """
        return [TableName("", r[0]) for r in conn.exec_driver_sql(sql).fetchall()]

    def utc_now_sql(self) -> str:
        if self.dialect.name == "postgresql":
            return "SELECT (clock_timestamp() AT TIME ZONE 'UTC')"
        return "SELECT UTC_TIMESTAMP(6)"
