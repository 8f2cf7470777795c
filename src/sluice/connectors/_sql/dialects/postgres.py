"""PostgreSQL: the `Dialect` of `jdbc:postgresql://` URLs (driver: psycopg 3)."""

from __future__ import annotations

import re
from datetime import UTC
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
from sluice.connectors._sql.pages import Page, time_micros, unhex
from sluice.sdk import POSTGRESQL_CLIENT, ConnectException, Schema

# JDBC driver parameters that mean something here; everything else (useSSL, serverTimezone, …)
# concerns the Java driver only and is ignored.
_JDBC_OPTIONS = {"currentSchema", "sslmode", "connectTimeout"}


class _Postgres(Dialect):
    name = "postgresql"
    quote_char = '"'
    schemes = ("postgresql", "postgres", "postgresql+psycopg")
    driver = "postgresql+psycopg"
    client_family = POSTGRESQL_CLIENT

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
        return Mapped(column.name, optional(schema, column.optional), conv, cast)

    def select_expr(self, mapped: Mapped) -> str:
        name = self.quote(mapped.name)
        return f"{name}::text AS {name}" if mapped.cast_text else name

    # -- reading a source -----------------------------------------------------------------------
    def page(self, plan: Any, value_type: pa.StructType) -> Page | None:
        return CopyPage(self, plan, value_type)

    def prefer_index_scans(self, conn: Any) -> None:
        conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")

    def empty_temp_table_sql(self, name: str, query: str) -> str:
        return f"CREATE TEMPORARY TABLE {name} AS {query} WITH NO DATA"

    # -- writing a sink -------------------------------------------------------------------------
    early_writes = True

    def driver_values(self, array: pa.Array) -> list[Any]:
        type_ = array.type
        if pa.types.is_timestamp(type_) and type_.tz is None:
            return [None if v is None else v.replace(tzinfo=UTC) for v in array.to_pylist()]
        return array.to_pylist()

    def column_type(self, type_: pa.DataType, *, pk: bool, where: str) -> str:
        if pa.types.is_decimal(type_):
            return f"NUMERIC({type_.precision},{type_.scale})"
        if pa.types.is_timestamp(type_):
            return "TIMESTAMP(6) WITH TIME ZONE" if type_.tz else "TIMESTAMP(6)"
        return column_type(type_, _TYPES, where)

    def write(self, writer: Any, conn: Any, w: Write) -> None:
        name, kind, cols, pk, rows = w.table, w.kind, w.cols, w.pk, w.rows
        q = self.quote
        target = self.table(name)
        col_list = ", ".join(q(c) for c in cols)
        raw_cols = ", ".join(self.quote_raw(c) for c in cols)
        cursor = conn.connection.driver_connection.cursor()
        try:
            copy_in = f"COPY {self.table(name, raw=True)} ({raw_cols}) FROM STDIN"
            if kind == "insert":
                copy_rows(cursor, copy_in, rows)
                return
            if (
                kind == "upsert"
                and pk
                and self._append(writer, cursor, target, q(pk[0]), copy_in, rows)
            ):
                return
            stage = "sluice_stage"
            cursor.execute(f"DROP TABLE IF EXISTS {q(stage)}", ())
            cursor.execute(
                f"CREATE TEMPORARY TABLE {q(stage)} ON COMMIT DROP AS "
                f"SELECT {col_list} FROM {target} WITH NO DATA",
                (),
            )
            copy_rows(cursor, f"COPY {self.quote_raw(stage)} ({raw_cols}) FROM STDIN", rows)
            on = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in pk)
            rest = [c for c in cols if c not in pk]
            if kind == "delete":
                sql = f"DELETE FROM {target} AS t USING {q(stage)} AS s WHERE {on}"
            elif kind == "update":
                if not rest:
                    return
                sets = ", ".join(f"{q(c)} = s.{q(c)}" for c in rest)
                sql = f"UPDATE {target} AS t SET {sets} FROM {q(stage)} AS s WHERE {on}"
            else:
                conflict = ", ".join(q(c) for c in pk)
                action = (
                    "DO UPDATE SET " + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in rest)
                    if rest
                    else "DO NOTHING"
                )
                sql = (
                    f"INSERT INTO {target} AS t ({col_list}) SELECT {col_list} FROM {q(stage)} "
                    f"ON CONFLICT ({conflict}) {action}"
                )
            cursor.execute(sql, ())
            cursor.execute(f"DROP TABLE {q(stage)}", ())
        finally:
            cursor.close()

    def _append(
        self, writer: Any, cursor: Any, target: str, first_pk: str, copy_in: str, rows: Any
    ) -> bool:
        """Upsert by plain COPY when no row of the table can conflict: True if it did.

        An upsert costs PostgreSQL about twice a COPY (staging table, then `ON CONFLICT`), and
        the common case, a first load or an incrementing table, only adds rows after the highest
        key. When the batch's keys are integers and the table holds no row between the batch's
        smallest and largest leading key (one index probe), nothing can conflict and the rows
        are copied straight in. A row that appeared meanwhile raises a unique violation; the
        savepoint then undoes the COPY and the caller upserts as usual.
        """
        span = _integer_span(rows)
        if span is None:
            return False
        cursor.execute(f"SELECT 1 FROM {target} WHERE {first_pk} BETWEEN %s AND %s LIMIT 1", span)
        if cursor.fetchone() is not None:
            return False
        cursor.execute("SAVEPOINT sluice_append", ())
        try:
            copy_rows(cursor, copy_in, rows)
        except Exception as exc:
            # psycopg's own error (the cursor is the driver's): its SQLSTATE
            if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
                raise
            cursor.execute("ROLLBACK TO SAVEPOINT sluice_append", ())
            return False
        cursor.execute("RELEASE SAVEPOINT sluice_append", ())
        writer.appended += len(rows)
        return True

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
                    OR COALESCE(pg_get_expr(d.adbin, d.adrelid), '') LIKE 'nextval(%%'),
                   d.adbin IS NOT NULL
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
        return [
            pg_column(r[0], r[1], r[2], bool(r[3]), r[4], bool(r[5]), has_default=bool(r[6]))
            for r in rows
        ]

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


class CopyPage(Page):
    """PostgreSQL's fast path: a page as `COPY (SELECT …) TO STDOUT (FORMAT csv)`, parsed by Arrow.

    No Python object per value (about six times faster than fetching rows). Timestamps travel as
    naive text (`2024-01-01 00:00:01.5`): a timestamptz cast to timestamp is its UTC wall clock in
    the UTC session, a naive one is taken as UTC as it is (casting those to timestamptz instead,
    for a zoned text, cost the server a zone lookup per value: 0.3 µs, two fifths of its COPY of
    the bench's 8-column table). Times travel as microseconds since midnight, bytea as hex text.
    Whatever Arrow cannot parse (`infinity`, a BC date), or a time that does not fit sluice's
    Time, makes `fetch` return None: the page is then read again through the driver,
    which names the offending value.
    """

    def __init__(self, dialect: Any, plan: Any, value_type: pa.StructType) -> None:
        self.plan = plan
        self.value_type = value_type
        exprs, self.types = [], {}
        for i, m in enumerate(plan.columns):
            name = dialect.quote(m.name)
            target = value_type.field(i).type
            if m.conv == "timestamp":
                # Text, parsed by Arrow: the server's EXTRACT(EPOCH …) is numeric arithmetic,
                # 0.7 µs of its CPU a value against 0.25 µs for the text.
                exprs.append(f"{name}::timestamp AS {name}")
                self.types[m.name] = pa.timestamp("us")
            elif m.conv == "time":
                exprs.append(f"(EXTRACT(EPOCH FROM {name}) * 1000000)::bigint AS {name}")
                self.types[m.name] = pa.int64()
            else:
                exprs.append(dialect.select_expr(m))
                self.types[m.name] = pa.string() if pa.types.is_binary(target) else target
        self.select = ", ".join(exprs)
        self.names = [m.name for m in plan.columns]
        self.options = pacsv.ConvertOptions(
            column_types=self.types,
            true_values=["t"],
            false_values=["f"],
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        )

    def fetch(
        self, conn: Any, tail: str, params: list[Any]
    ) -> tuple[pa.StructArray, dict[str, Any]] | None:
        statement = f"COPY (SELECT {self.select}{tail}) TO STDOUT WITH (FORMAT csv)"
        if not params:
            statement = statement.replace("%%", "%")  # psycopg formats only with parameters
        cursor = conn.connection.driver_connection.cursor()
        # One CopyData message per row: growing one buffer costs 1 µs a row, joining a bytes
        # copy of each row 1.6 µs (500k rows of bench/jdbc_copy.py's table).
        data = bytearray()
        try:
            with cursor.copy(statement, tuple(params) or None) as copy:
                for row in copy:
                    data += row
        finally:
            cursor.close()
        self.page_bytes = len(data)
        if not data:
            return pa.array([], self.value_type), {}
        try:
            table = pacsv.read_csv(
                pa.BufferReader(data),
                read_options=pacsv.ReadOptions(column_names=self.names, use_threads=False),
                convert_options=self.options,
            )
            arrays = [self._finish(m, table.column(i)) for i, m in enumerate(self.plan.columns)]
        except (pa.ArrowException, ValueError):
            return None
        if any(a is None for a in arrays):
            return None
        value = pa.StructArray.from_arrays(arrays, fields=list(self.value_type))
        last = {name: arrays[i][-1].as_py() for i, name in enumerate(self.names)}
        return value, last

    def _finish(self, mapped: Mapped, column: pa.ChunkedArray) -> pa.Array | None:
        array = column.combine_chunks()
        if mapped.conv == "timestamp":
            return array.cast(pa.timestamp("us", tz="UTC"))
        if mapped.conv == "time":
            return time_micros(array)
        if mapped.schema.to_arrow() == pa.binary():
            return unhex(array, prefix=2)
        return array


_UNIQUE_VIOLATION = "23505"  # SQLSTATE
_TYPES = {
    "int8": "SMALLINT",
    "int16": "SMALLINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "float": "REAL",
    "double": "DOUBLE PRECISION",
    "bool": "BOOLEAN",
    "string": "TEXT",
    "large_string": "TEXT",
    "binary": "BYTEA",
    "large_binary": "BYTEA",
    "date32[day]": "DATE",
}


def copy_rows(cursor: Any, statement: str, rows: list | pa.Table) -> None:
    """COPY rows (Python tuples, text format) or an Arrow table (CSV written by Arrow: no
    Python object per value)."""
    if not isinstance(rows, pa.Table):
        with cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
        return
    data = csv_ready(rows)
    options = pacsv.WriteOptions(include_header=False, quoting_style="all_valid")
    with cursor.copy(statement + " WITH (FORMAT csv)") as copy:
        for batch in data.to_batches(max_chunksize=65_536):
            out = pa.BufferOutputStream()
            pacsv.write_csv(batch, out, options)
            copy.write(out.getvalue())


def _integer_span(rows: list | pa.Table) -> tuple[int, int] | None:
    """(smallest, largest) of the first column when it holds integers only, else None."""
    if isinstance(rows, pa.Table):
        column = rows.column(0)
        if not rows.num_rows or not pa.types.is_integer(column.type) or column.null_count:
            return None
        span = pc.min_max(column)
        return span["min"].as_py(), span["max"].as_py()
    firsts = [row[0] for row in rows]
    if not firsts or any(type(v) is not int for v in firsts):
        return None
    return min(firsts), max(firsts)


def csv_ready(data: pa.Table) -> pa.Table:
    """`data` with what CSV cannot carry for PostgreSQL made text: bytes as `\\x…` hex, instants
    as UTC text with an explicit `+00`."""
    for i, f in enumerate(data.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            # Arrow's own text for zoned timestamps costs ~1 µs a value (a zone lookup each): three
            # quarters of the whole CSV write. Arrow keeps instants in UTC, so the zone-less text
            # of the same values plus "+00" is the same instant at a fifteenth of the cost.
            naive = data.column(i).cast(pa.timestamp(f.type.unit))
            utc = pc.binary_join_element_wise(naive.cast(pa.string()), "+00", "")
            data = data.set_column(i, f.name, utc)
        elif pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            values = data.column(i).to_pylist()
            hexed = pa.array([None if v is None else "\\x" + v.hex() for v in values], pa.string())
            data = data.set_column(i, f.name, hexed)
        elif pa.types.is_nested(f.type):
            raise ConnectException(f"field {f.name!r}: {f.type} values cannot be written")
    return data


DIALECT: Dialect = _Postgres()

_NUMERIC = re.compile(r"^(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)", re.IGNORECASE)


def pg_column(
    name: str,
    base: str,
    display: str,
    nullable: bool,
    kind: str,
    autoincrement: bool,
    *,
    has_default: bool = False,
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
        has_default=has_default,
    )
