"""MySQL and MariaDB: the `Dialect` of `jdbc:mysql://` and `jdbc:mariadb://` URLs (driver:
PyMySQL)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sluice.connectors._sql.dialect import (
    ColumnInfo,
    Dialect,
    Mapped,
    UnmappableType,
    Write,
    bool_schema,
    column_type,
    decimal_schema,
    float_schema,
    int_schema,
    optional,
)
from sluice.connectors._sql.names import TableName
from sluice.connectors._sql.pages import PAGE_BYTES, Page, time_micros, unhex
from sluice.connectors._sql.values import naive_utc
from sluice.sdk import MYSQL_CLIENT, FieldType, Schema

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
    client_family = MYSQL_CLIENT

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
        return Mapped(column.name, optional(schema, column.optional), conv)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        if mapped.schema.type is FieldType.FLOAT32:
            # The text protocol sends FLOAT with 6 significant digits (3.40282e+38); as a double
            # the value arrives exactly and narrows back to the same float.
            return f"CAST({name} AS DOUBLE) AS {name}"
        return name

    # -- writing a sink -------------------------------------------------------------------------
    create_table_options = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

    def driver_values(self, array: pa.Array) -> list[Any]:
        type_ = array.type
        if pa.types.is_timestamp(type_) and type_.tz is not None:
            # MySQL takes naive values; sessions run in UTC.
            array = array.cast(pa.timestamp(type_.unit))
        return array.to_pylist()

    def column_type(self, type_: pa.DataType, *, pk: bool, where: str) -> str:
        if pa.types.is_decimal(type_):
            return f"DECIMAL({type_.precision},{type_.scale})"
        if pa.types.is_timestamp(type_):
            return "DATETIME(6)"
        if pk and (pa.types.is_string(type_) or pa.types.is_binary(type_)):
            # MySQL cannot index a TEXT/BLOB column without a prefix length
            return "VARCHAR(255)" if pa.types.is_string(type_) else "VARBINARY(255)"
        return column_type(type_, _TYPES, where)

    def write(self, writer: Any, conn: Any, w: Write) -> None:
        name, kind, cols, pk, rows = w.table, w.kind, w.cols, w.pk, w.rows
        if isinstance(rows, pa.Table):
            lists = [self.driver_values(column.combine_chunks()) for column in rows.columns]
            rows = list(zip(*lists, strict=True))
        q = self.quote
        target = self.table(name)
        col_list = ", ".join(q(c) for c in cols)
        one = "(" + ", ".join(["%s"] * len(cols)) + ")"
        if kind == "delete":
            key = "(" + ", ".join(q(c) for c in pk) + ")" if len(pk) > 1 else q(pk[0])
            for chunk in writer.chunks(rows):
                marks = ", ".join(one if len(pk) > 1 else "%s" for _ in chunk)
                params = [v for row in chunk for v in row]
                conn.exec_driver_sql(
                    f"DELETE FROM {target} WHERE {key} IN ({marks})", tuple(params)
                )
            return
        if kind == "update":
            stage = q("sluice_stage")
            conn.exec_driver_sql(f"DROP TEMPORARY TABLE IF EXISTS {stage}")
            conn.exec_driver_sql(
                f"CREATE TEMPORARY TABLE {stage} AS SELECT {col_list} FROM {target} LIMIT 0"
            )
            self._insert(writer, conn, stage, col_list, one, rows, "")
            rest = [c for c in cols if c not in pk]
            if rest:
                on = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in pk)
                sets = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in rest)
                conn.exec_driver_sql(f"UPDATE {target} AS t JOIN {stage} AS s ON {on} SET {sets}")
            conn.exec_driver_sql(f"DROP TEMPORARY TABLE {stage}")
            return
        suffix = ""
        if kind == "upsert":
            rest = [c for c in cols if c not in pk] or pk[:1]
            suffix = " ON DUPLICATE KEY UPDATE " + ", ".join(
                f"{q(c)} = VALUES({q(c)})" for c in rest
            )
        self._insert(writer, conn, target, col_list, one, rows, suffix)

    def _insert(
        self, writer: Any, conn: Any, target: str, col_list: str, one: str, rows: list, suffix: str
    ) -> None:
        for chunk in writer.chunks(rows):
            marks = ", ".join([one] * len(chunk))
            params = tuple(v for row in chunk for v in row)
            conn.exec_driver_sql(
                f"INSERT INTO {target} ({col_list}) VALUES {marks}{suffix}", params
            )

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
                   NUMERIC_SCALE, EXTRA, COLUMN_DEFAULT IS NOT NULL
            FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
            ORDER BY ORDINAL_POSITION
            """,
            (schema, table.name),
        ).fetchall()
        if not rows:
            return None
        return [
            mysql_column(
                r[0], r[1], r[2], r[3] == "YES", r[4], r[5], r[6] or "", has_default=bool(r[7])
            )
            for r in rows
        ]

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

    # -- reading a source -----------------------------------------------------------------------
    transactional_ddl = False

    def same_name(self, a: str, b: str) -> bool:
        return a.lower() == b.lower()  # column names are case-insensitive

    def page(self, plan: Any, value_type: pa.StructType) -> Page | None:
        return CsvPage(self, plan, value_type)

    def empty_temp_table_sql(self, name: str, query: str) -> str:
        return f"CREATE TEMPORARY TABLE {name} AS {query} LIMIT 0"

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


class CsvPage(Page):
    """MySQL/MariaDB's fast path: a page as one CSV value, parsed by Arrow.

    PyMySQL decodes every value of every row in Python (25k to 45k rows/s for 8 columns here). Here
    the server renders each row as a CSV line of text values and concatenates the page into one
    value (`GROUP_CONCAT`), which Arrow's CSV reader parses and Arrow casts column by column: no
    Python object per value. Each value travels as the text the server would send anyway
    (`CAST(… AS CHAR)`; text quoted, `"` doubled), binary values as quoted hex, times as
    microseconds; NULL is an empty unquoted field, an empty string or no bytes `""`.

    Whatever Arrow cannot parse or cast (a zero date, a time outside a day) makes `fetch` return
    None: the page is read again through the driver, which names the value. A page larger than
    the server's `max_allowed_packet` (or than `max_bytes`) cannot be one value: `fetch` returns
    None and sets `too_big`; the page is tried again with fewer rows (see
    `JdbcSourceTask._read_pages`).
    """

    needs_order = True  # GROUP_CONCAT's ORDER BY is the tail's
    #: the largest page read as one value (it is held in memory twice: text and Arrow)
    max_bytes = 64 << 20
    # `budget`: half the largest value the server allows, once known

    def __init__(self, dialect: Any, plan: Any, value_type: pa.StructType) -> None:
        self.plan = plan
        self.value_type = value_type
        self.too_big = False
        fields = []
        for i, m in enumerate(plan.columns):
            name = dialect.quote(m.name)
            target = value_type.field(i).type
            if m.conv == "time":
                text = f"CAST(TIME_TO_SEC({name}) * 1000000 AS SIGNED)"
            elif m.conv == "bit1":
                text = f"CAST({name} AS UNSIGNED)"
            elif pa.types.is_binary(target):
                # quoted, so that no bytes (an empty hex) is not NULL; BIT(n) too: its bytes
                text = f"CONCAT('\"', HEX(CAST({name} AS BINARY)), '\"')"
            elif pa.types.is_float32(target):
                text = f"CAST({name} AS DOUBLE)"  # see `_Mysql.select_expr`
            elif pa.types.is_string(target):
                text = f"CONCAT('\"', REPLACE(CAST({name} AS CHAR), '\"', '\"\"'), '\"')"
            else:
                text = f"CAST({name} AS CHAR)"
            fields.append(f"IFNULL({text}, '')")
        self.row = "CONCAT_WS(',', " + ", ".join(fields) + ")"
        self.names = [m.name for m in plan.columns]
        self.read_names = [str(i) for i in range(len(plan.columns))]
        self.parse = pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
        self.convert = pacsv.ConvertOptions(
            column_types={n: pa.string() for n in self.read_names},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        )

    def fetch(
        self, conn: Any, tail: str, params: list[Any]
    ) -> tuple[pa.StructArray, dict[str, Any]] | None:
        """The page `SELECT * {tail}` (`tail` ends with `ORDER BY … LIMIT n`), or None."""
        order = tail.rsplit(" ORDER BY ", 1)[1].rsplit(" LIMIT ", 1)[0]
        conn.exec_driver_sql(
            f"SET SESSION group_concat_max_len = LEAST(@@max_allowed_packet, {int(self.max_bytes)})"
        )
        count, data, limit = conn.exec_driver_sql(
            f"SELECT COUNT(*), CAST(GROUP_CONCAT({self.row} ORDER BY {order} SEPARATOR X'0A') "
            f"AS BINARY), @@group_concat_max_len FROM (SELECT *{tail}) AS sluice_page",
            tuple(params),
        ).one()
        self.budget = min(PAGE_BYTES, int(limit) // 2)
        if not count:
            return pa.array([], self.value_type), {}
        if data is None or len(data) >= limit:  # did not fit: cut short, or no value at all
            self.too_big = True
            return None
        self.too_big = False
        self.page_bytes = len(data)
        try:
            table = pacsv.read_csv(
                pa.BufferReader(data),
                read_options=pacsv.ReadOptions(
                    column_names=self.read_names, use_threads=False, block_size=len(data) + 1
                ),
                parse_options=self.parse,
                convert_options=self.convert,
            )
            if table.num_rows != count:
                return None
            arrays = [
                self._finish(m, self.value_type.field(i).type, table.column(i).combine_chunks())
                for i, m in enumerate(self.plan.columns)
            ]
        except (pa.ArrowException, ValueError):
            return None
        if any(a is None for a in arrays):
            return None
        value = pa.StructArray.from_arrays(arrays, fields=list(self.value_type))
        last = {}
        for i, name in enumerate(self.names):
            v = arrays[i][-1].as_py()
            last[name] = naive_utc(v) if isinstance(v, datetime) else v
        return value, last

    @staticmethod
    def _finish(mapped: Mapped, target: pa.DataType, text: pa.Array) -> pa.Array | None:
        if mapped.conv == "time":
            return time_micros(text.cast(pa.int64()))
        if mapped.conv == "bit1":
            return pc.not_equal(text.cast(pa.int8()), 0)
        if mapped.conv == "timestamp":
            return text.cast(pa.timestamp("us")).cast(target)
        if pa.types.is_binary(target):
            return unhex(text)
        if pa.types.is_floating(target):
            # as PyMySQL does: the text read as a double, then (FLOAT) narrowed
            return text.cast(pa.float64()).cast(target)
        return text.cast(target)


_TYPES = {
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "string": "LONGTEXT",
    "large_string": "LONGTEXT",
    "binary": "LONGBLOB",
    "large_binary": "LONGBLOB",
    "date32[day]": "DATE",
}


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
    *,
    has_default: bool = False,
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
        has_default=has_default,
    )
