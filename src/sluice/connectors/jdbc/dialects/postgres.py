"""PostgreSQL: the `Dialect` of `jdbc:postgresql://` URLs (driver: psycopg 3)."""

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
from sluice.sdk import Schema

# JDBC driver parameters that mean something here; everything else (useSSL, serverTimezone, …)
# concerns the Java driver only and is ignored.
_JDBC_OPTIONS = {"currentSchema", "sslmode", "connectTimeout"}


class _Postgres(Dialect):
    name = "postgresql"
    quote_char = '"'
    schemes = ("postgresql", "postgres", "postgresql+psycopg")
    driver = "postgresql+psycopg"

    def url_options(self, params: dict[str, str], *, jdbc: bool) -> list[tuple[str, str]]:
        options: list[tuple[str, str]] = []
        for name, value in params.items():
            if name == "currentSchema":
                options.append(("options", f"-c search_path={value}"))
            elif name == "connectTimeout":
                options.append(("connect_timeout", value))
            elif name in _JDBC_OPTIONS or not jdbc:
                options.append((name, value))
        return options

    def connect_args(self) -> dict[str, Any]:
        return {"options": "-c TimeZone=UTC", "connect_timeout": 10, "application_name": "sluice"}

    def map_column(self, column: ColumnInfo) -> Mapped:
        t = column.type_name
        schema: Schema
        conv, cast = "plain", False
        if column.enum:
            schema, cast = Schema.string(), True
        elif t in ("int2", "smallint"):
            schema = int_schema(16)
        elif t in ("int4", "integer"):
            schema = int_schema(32)
        elif t in ("int8", "bigint"):
            schema = int_schema(64)
        elif t == "numeric":
            schema, conv = decimal_schema(column, column.precision, column.scale), "decimal"
        elif t in ("float4", "real"):
            schema = float_schema(32)
        elif t in ("float8", "double precision"):
            schema = float_schema(64)
        elif t in ("bool", "boolean"):
            schema = bool_schema()
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
        return Mapped(column.name, optional(schema, column.nullable), conv, cast)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        return f"{name}::text AS {name}" if mapped.cast_text else name

    # -- catalog -------------------------------------------------------------------------------
    utc_now_sql = "SELECT (clock_timestamp() AT TIME ZONE 'UTC')"
    tables_sql = """
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
        ORDER BY c.relname
    """

    def current_schema(self, conn: Any) -> str:
        return conn.exec_driver_sql("SELECT current_schema()").scalar() or ""

    def columns(self, conn: Any, table: TableName) -> list[ColumnInfo] | None:
        oid = conn.exec_driver_sql(
            "SELECT to_regclass(%s)::oid", (self.table(table, raw=True),)
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

    def primary_key(self, conn: Any, table: TableName) -> list[str]:
        rows = conn.exec_driver_sql(
            """
            SELECT a.attname
            FROM pg_index i
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
            WHERE i.indrelid = to_regclass(%s) AND i.indisprimary
            ORDER BY array_position(i.indkey::int2[], a.attnum)
            """,
            (self.table(table, raw=True),),
        ).fetchall()
        return [r[0] for r in rows]

    def unique_key_rows(self, conn: Any, table: TableName) -> list[tuple[Any, str]]:
        rows = conn.exec_driver_sql(
            """
            SELECT i.indexrelid, a.attname
            FROM pg_index i
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
            WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL
            """,
            (self.table(table, raw=True),),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

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


DIALECT: Dialect = _Postgres()

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
