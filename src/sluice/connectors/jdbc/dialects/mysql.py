"""MySQL and MariaDB: the `Dialect` of `jdbc:mysql://` and `jdbc:mariadb://` URLs (driver:
PyMySQL)."""

from __future__ import annotations

import re
from typing import Any

from sluice.connectors.jdbc._config import TableName
from sluice.connectors.jdbc._dialect import (
    ColumnInfo,
    Dialect,
    Mapped,
    UnmappableType,
    bool_schema,
    decimal_schema,
    float_schema,
    int_schema,
    optional,
)
from sluice.sdk import FieldType, Schema

_MYSQL_TRANSIENT = {
    1040,  # too many connections
    1053,  # server shutdown in progress
    1205,  # lock wait timeout
    1213,  # deadlock
    1927,  # connection was killed
    2002,  # can't connect through socket
    2003,  # can't connect to server
    2006,  # server has gone away
    2013,  # lost connection during query
    2055,  # lost connection (system error)
    4031,  # disconnected by the server because of inactivity
}


class _Mysql(Dialect):
    name = "mysql"
    quote_char = "`"
    schemes = ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql")
    driver = "mysql+pymysql"

    def url_options(self, params: dict[str, str], *, jdbc: bool) -> list[tuple[str, str]]:
        return [] if jdbc else [(k, v) for k, v in params.items() if k != "charset"]

    def default_query(self, query: dict[str, str]) -> None:
        query.setdefault("charset", "utf8mb4")

    def connect_args(self) -> dict[str, Any]:
        # UTC sessions: TIMESTAMP values come back in UTC, NOW() is UTC. Strict mode: a value
        # that does not fit is an error, never silently truncated.
        return {
            "init_command": "SET time_zone = '+00:00', "
            "sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')",
            "connect_timeout": 10,
        }

    def map_column(self, column: ColumnInfo) -> Mapped:
        t = column.type_name
        conv = "plain"
        schema: Schema
        if t == "tinyint":
            schema = int_schema(16 if column.unsigned else 8)
        elif t == "smallint":
            schema = int_schema(32 if column.unsigned else 16)
        elif t in ("mediumint", "int", "integer"):
            schema = int_schema(64 if column.unsigned and t != "mediumint" else 32)
        elif t == "bigint":
            if column.unsigned:
                schema, conv = Schema.decimal(20, 0), "uint64"
            else:
                schema = int_schema(64)
        elif t == "year":
            schema = int_schema(16)
        elif t in ("decimal", "numeric"):
            schema, conv = decimal_schema(column, column.precision, column.scale), "decimal"
        elif t == "float":
            schema = float_schema(32)
        elif t in ("double", "real", "double precision"):
            schema = float_schema(64)
        elif t == "bit":
            if column.precision == 1:
                schema, conv = bool_schema(), "bit1"
            else:
                schema = Schema.bytes_()
        elif t in (
            "char",
            "varchar",
            "tinytext",
            "text",
            "mediumtext",
            "longtext",
            "enum",
            "set",
            "json",
            "uuid",
            "inet4",
            "inet6",
        ):
            schema = Schema.string()
        elif t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
            schema = Schema.bytes_()
        elif t == "date":
            schema, conv = Schema.date(), "date"
        elif t == "time":
            schema, conv = Schema.time(), "time"
        elif t in ("datetime", "timestamp"):
            schema, conv = Schema.timestamp(), "timestamp"
        else:
            raise UnmappableType(f"{column.display} has no sluice equivalent")
        return Mapped(column.name, optional(schema, column.nullable), conv)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        if mapped.schema.type is FieldType.FLOAT32:
            # The text protocol sends FLOAT with 6 significant digits (3.40282e+38); as a double
            # the value arrives exactly and narrows back to the same float.
            return f"CAST({name} AS DOUBLE) AS {name}"
        return name

    # -- catalog -------------------------------------------------------------------------------
    utc_now_sql = "SELECT UTC_TIMESTAMP(6)"
    tables_sql = """
        SELECT TABLE_NAME FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'
        ORDER BY TABLE_NAME
    """

    def current_schema(self, conn: Any) -> str:
        return conn.exec_driver_sql("SELECT DATABASE()").scalar() or ""

    def columns(self, conn: Any, table: TableName) -> list[ColumnInfo] | None:
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

    def temp_columns(self, conn: Any, name: str) -> list[ColumnInfo] | None:
        # MySQL's information_schema does not list temporary tables
        rows = conn.exec_driver_sql(f"SHOW COLUMNS FROM {self.quote(name)}").fetchall()
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

    def primary_key(self, conn: Any, table: TableName) -> list[str]:
        rows = conn.exec_driver_sql(
            """
            SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY'
            ORDER BY ORDINAL_POSITION
            """,
            (table.schema or self.current_schema(conn), table.name),
        ).fetchall()
        return [r[0] for r in rows]

    def unique_key_rows(self, conn: Any, table: TableName) -> list[tuple[Any, str]]:
        rows = conn.exec_driver_sql(
            """
            SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0
            """,
            (table.schema or self.current_schema(conn), table.name),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def is_transient(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None) or exc
        args = getattr(orig, "args", ())
        code = args[0] if args and isinstance(args[0], int) else None
        if code is None:
            import pymysql

            return isinstance(orig, pymysql.err.InterfaceError) or bool(
                getattr(exc, "connection_invalidated", False)
            )
        return code in _MYSQL_TRANSIENT


DIALECT: Dialect = _Mysql()


def mysql_column(
    name: str,
    data_type: str,
    column_type: str,
    nullable: bool,
    precision: int | None,
    scale: int | None,
    extra: str,
    check_json: bool = False,
) -> ColumnInfo:
    """A MySQL `information_schema.COLUMNS` row → `ColumnInfo`."""
    data_type = data_type.lower()
    if data_type == "bit":
        m = re.match(r"bit\((\d+)\)", column_type.lower())
        precision = int(m.group(1)) if m else precision
    return ColumnInfo(
        name=name,
        type_name="json" if check_json else data_type,
        display=column_type,
        nullable=nullable,
        precision=None if precision is None else int(precision),
        scale=None if scale is None else int(scale),
        unsigned="unsigned" in column_type.lower(),
        autoincrement="auto_increment" in (extra or "").lower(),
    )
