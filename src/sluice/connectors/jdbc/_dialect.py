"""What differs between PostgreSQL and MySQL/MariaDB: quoting, catalogs, types, errors.

Type mapping, database column → sluice schema (`map_column`):

=====================================  =====================================  ===================
MySQL / MariaDB                        PostgreSQL                             sluice schema
=====================================  =====================================  ===================
TINYINT                                —                                      INT8
TINYINT UNSIGNED, SMALLINT, YEAR       SMALLINT                               INT16
SMALLINT UNSIGNED, MEDIUMINT, INT      INTEGER                                INT32
INT UNSIGNED, BIGINT                   BIGINT                                 INT64
BIGINT UNSIGNED                        —                                      Decimal(20,0)
DECIMAL(p,s), p ≤ 38                   NUMERIC(p,s), p ≤ 38                   Decimal(p,s)
FLOAT / DOUBLE                         REAL / DOUBLE PRECISION                FLOAT32 / FLOAT64
BIT(1)                                 BOOLEAN                                BOOLEAN
CHAR, VARCHAR, *TEXT, ENUM, SET, JSON  CHAR, VARCHAR, TEXT, JSON(B), UUID,    STRING
UUID, INET4/6                          enums, XML, CITEXT, INET, CIDR
BINARY, VARBINARY, *BLOB, BIT(n>1)     BYTEA                                  BYTES
DATE                                   DATE                                   Date
TIME(n) (0 ≤ t < 24 h)                 TIME(n) (t < 24:00:00)                 Time (µs)
DATETIME, TIMESTAMP                    TIMESTAMP, TIMESTAMPTZ                 Timestamp (µs, UTC)
=====================================  =====================================  ===================

Anything else (DECIMAL/NUMERIC wider than 38 digits or without a declared precision, spatial types,
INTERVAL, TIMETZ, arrays, ranges, composite types, MONEY, BIT VARYING…) is refused at start with
the column and its type named. Values are checked too: a TIME outside a day (MySQL's TIME may be
negative or reach 838:59:59), or a date/timestamp outside years 1 to 9999, fails the read naming
table, column and value — never silently truncated. Times carry all six fractional digits.

Timestamps without a time zone (DATETIME, TIMESTAMP WITHOUT TIME ZONE) are read and written as UTC
wall-clock values: sessions run with the time zone set to UTC on both sides, so a value arrives as
it was stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from sluice.connectors.jdbc._config import TableName
from sluice.sdk import FieldType, Schema


@dataclass(frozen=True)
class ColumnInfo:
    """One column as the catalog describes it."""

    name: str
    type_name: str  # normalised base type: "int", "numeric", "timestamptz", …
    display: str  # the declared type, for messages: "int(10) unsigned", "numeric(10,2)"
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    unsigned: bool = False
    length: int | None = None
    autoincrement: bool = False
    enum: bool = False


@dataclass(frozen=True)
class Mapped:
    """How one column travels: its schema, how values are converted, how it is selected."""

    name: str
    schema: Schema
    conv: str  # value conversion in `_values.to_arrow`
    cast_text: bool = False  # select it as text (PostgreSQL json, uuid, enums, …)


class UnmappableType(Exception):
    """A column whose type sluice cannot carry faithfully; the message says why."""


class Dialect:
    """The common interface; `POSTGRES` and `MYSQL` are the two implementations."""

    name: str = ""
    quote_char: str = '"'

    # -- identifiers --------------------------------------------------------------------------
    def quote_raw(self, name: str) -> str:
        """`name` as a quoted identifier (the quote character doubled inside)."""
        q = self.quote_char
        if "\x00" in name:
            raise ValueError(f"identifier {name!r} contains a NUL character")
        return q + name.replace(q, q + q) + q

    def quote(self, name: str) -> str:
        """`quote_raw`, with `%` doubled: statements run with bound `%s` parameters."""
        return self.quote_raw(name).replace("%", "%%")

    def table(self, table: TableName, *, raw: bool = False) -> str:
        quote = self.quote_raw if raw else self.quote
        return f"{quote(table.schema)}.{quote(table.name)}" if table.schema else quote(table.name)

    # -- hooks --------------------------------------------------------------------------------
    def connect_args(self) -> dict[str, Any]:
        raise NotImplementedError

    def map_column(self, column: ColumnInfo) -> Mapped:
        raise NotImplementedError

    def select_expr(self, mapped: Mapped) -> str:
        return self.quote(mapped.name)

    def is_transient(self, exc: BaseException) -> bool:
        raise NotImplementedError


# -- schemas ------------------------------------------------------------------------------------
_INTS = {8: FieldType.INT8, 16: FieldType.INT16, 32: FieldType.INT32, 64: FieldType.INT64}


def _int(bits: int) -> Schema:
    return Schema.of(_INTS[bits])


def _float(bits: int) -> Schema:
    return Schema.of(FieldType.FLOAT32 if bits == 32 else FieldType.FLOAT64)


def _bool() -> Schema:
    return Schema.of(FieldType.BOOLEAN)


def _decimal(column: ColumnInfo, precision: int | None, scale: int | None) -> Schema:
    if precision is None:
        raise UnmappableType(
            f"{column.display} has no declared precision, so its values cannot be carried "
            "exactly; declare NUMERIC(p,s) with p ≤ 38, or select it cast to text"
        )
    if precision > 38:
        raise UnmappableType(
            f"{column.display} is wider than the 38 digits sluice's Decimal carries"
        )
    return Schema.decimal(precision, scale or 0)


# -- PostgreSQL -------------------------------------------------------------------------------
class _Postgres(Dialect):
    name = "postgresql"
    quote_char = '"'

    def connect_args(self) -> dict[str, Any]:
        return {"options": "-c TimeZone=UTC", "connect_timeout": 10, "application_name": "sluice"}

    def map_column(self, column: ColumnInfo) -> Mapped:
        t = column.type_name
        schema: Schema
        conv, cast = "plain", False
        if column.enum:
            schema, cast = Schema.string(), True
        elif t in ("int2", "smallint"):
            schema = _int(16)
        elif t in ("int4", "integer"):
            schema = _int(32)
        elif t in ("int8", "bigint"):
            schema = _int(64)
        elif t == "numeric":
            schema, conv = _decimal(column, column.precision, column.scale), "decimal"
        elif t in ("float4", "real"):
            schema = _float(32)
        elif t in ("float8", "double precision"):
            schema = _float(64)
        elif t in ("bool", "boolean"):
            schema = _bool()
        elif t in ("varchar", "bpchar", "text", "name", "citext"):
            schema = Schema.string()
        elif t in ("json", "jsonb", "uuid", "xml", "inet", "cidr", "macaddr", "macaddr8"):
            schema, cast = Schema.string(), True
        elif t == "bytea":
            schema = Schema.bytes_()
        elif t == "date":
            schema, conv = Schema.date(), "date"
        elif t == "time":
            schema, conv = Schema.time(), "time"
        elif t in ("timestamp", "timestamptz"):
            schema, conv = Schema.timestamp(), "timestamp"
        else:
            raise UnmappableType(f"{column.display} has no sluice equivalent")
        return Mapped(column.name, _optional(schema, column.nullable), conv, cast)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        return f"{name}::text AS {name}" if mapped.cast_text else name

    def is_transient(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None) or exc
        state = getattr(orig, "sqlstate", None)
        if state is None:
            # No SQLSTATE: the client could not reach the server or lost the connection.
            import psycopg

            return isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError)) or bool(
                getattr(exc, "connection_invalidated", False)
            )
        # 08: connection exception; 40001/40P01: serialization failure, deadlock;
        # 53: insufficient resources; 57P01-57P05: shutdown / cannot connect now / idle timeout.
        return (
            state.startswith(("08", "53"))
            or state in ("40001", "40P01", "55P03")
            or state.startswith("57P")
        )


# -- MySQL / MariaDB --------------------------------------------------------------------------
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
            schema = _int(16 if column.unsigned else 8)
        elif t == "smallint":
            schema = _int(32 if column.unsigned else 16)
        elif t in ("mediumint", "int", "integer"):
            schema = _int(64 if column.unsigned and t != "mediumint" else 32)
        elif t == "bigint":
            if column.unsigned:
                schema, conv = Schema.decimal(20, 0), "uint64"
            else:
                schema = _int(64)
        elif t == "year":
            schema = _int(16)
        elif t in ("decimal", "numeric"):
            schema, conv = _decimal(column, column.precision, column.scale), "decimal"
        elif t == "float":
            schema = _float(32)
        elif t in ("double", "real", "double precision"):
            schema = _float(64)
        elif t == "bit":
            if column.precision == 1:
                schema, conv = _bool(), "bit1"
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
        return Mapped(column.name, _optional(schema, column.nullable), conv)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        if mapped.schema.type is FieldType.FLOAT32:
            # The text protocol sends FLOAT with 6 significant digits (3.40282e+38); as a double
            # the value arrives exactly and narrows back to the same float.
            return f"CAST({name} AS DOUBLE) AS {name}"
        return name

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


def _optional(schema: Schema, nullable: bool) -> Schema:
    return schema if schema.optional == nullable else replace(schema, optional=nullable)


POSTGRES: Dialect = _Postgres()
MYSQL: Dialect = _Mysql()


def dialect_for(name: str) -> Dialect:
    return POSTGRES if name == "postgresql" else MYSQL


_NUMERIC = re.compile(r"^(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)", re.IGNORECASE)


def pg_column(
    name: str, base: str, display: str, nullable: bool, kind: str, autoincrement: bool
) -> ColumnInfo:
    """A PostgreSQL catalog row → `ColumnInfo` (`display` is `format_type` of the base type)."""
    precision = scale = None
    m = _NUMERIC.match(display)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
    type_name = base
    if kind not in ("b", "e") or display.endswith("[]"):
        type_name = f"<{display}>"  # arrays, composites, ranges, pseudo-types: unmappable
    return ColumnInfo(
        name=name,
        type_name=type_name,
        display=display,
        nullable=nullable,
        precision=precision,
        scale=scale,
        autoincrement=autoincrement,
        enum=kind == "e",
    )


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
