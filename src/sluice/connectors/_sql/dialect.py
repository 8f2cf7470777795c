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

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any

from sluice.connectors._sql.names import TableName
from sluice.sdk import ClientFamily, ConnectException, FieldType, Schema


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
    #: The column has a DEFAULT (other than its auto-increment sequence).
    has_default: bool = False

    @property
    def optional(self) -> bool:
        """Whether its field is optional: nullable, or NOT NULL with a default. The latter is
        what keeps `ALTER TABLE … ADD COLUMN c … NOT NULL DEFAULT v` backward compatible: records
        written before it have no `c`, and a reader of the new version takes null for it (Avro
        has no way to carry a database default such as now())."""
        return self.nullable or (self.has_default and not self.autoincrement)


@dataclass(frozen=True)
class Mapped:
    """How one column travels: its schema, how values are converted, how it is selected."""

    name: str
    schema: Schema
    conv: str  # value conversion in `_values.to_arrow`
    cast_text: bool = False  # select it as text (PostgreSQL json, uuid, enums, …)


@dataclass(frozen=True)
class Write:
    """One write of the JDBC sink: ``kind`` (insert, upsert, update or delete) of ``rows``
    (tuples, or an Arrow table) of columns ``cols``, whose key is ``pk``, into ``table``."""

    table: TableName
    kind: str
    cols: list[str]
    pk: list[str]
    rows: Any


class UnmappableType(Exception):
    """A column whose type sluice cannot carry faithfully; the message says why."""


class Dialect(ABC):
    """What one database does its own way (confluent's `DatabaseDialect`): one subclass per
    database, in a module of `sluice.connectors._sql.dialects` that sets ``DIALECT``."""

    name: str = ""
    quote_char: str = '"'
    #: URL schemes (after ``jdbc:``) that name this database, and the SQLAlchemy driver used.
    schemes: tuple[str, ...] = ()
    driver: str = ""
    #: the driver's options a URL may pass, as the worker's client policy judges them
    client_family: ClientFamily = ClientFamily("", "", frozenset())

    # -- connection URL ------------------------------------------------------------------------
    def url_options(self, params: dict[str, str], *, jdbc: bool) -> list[tuple[str, str]]:
        """The driver's connect options from the URL's query ``params``: a ``jdbc:`` URL's
        parameters are the Java driver's, so only those that mean something here are kept."""
        return [] if jdbc else list(params.items())

    def default_query(self, query: dict[str, str]) -> None:
        """Add the driver options sluice always wants to a SQLAlchemy URL's ``query``."""

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
    @abstractmethod
    def connect_args(self) -> dict[str, Any]:
        """Keyword arguments for the driver's ``connect`` (timeouts, session settings)."""

    @abstractmethod
    def map_column(self, column: ColumnInfo) -> Mapped:
        """The field a source column becomes (its Arrow type and schema), or `UnmappableType`."""

    def select_expr(self, mapped: Mapped) -> str:
        return self.quote(mapped.name)

    @abstractmethod
    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth retrying (a lost connection, a deadlock), not bad SQL."""

    # -- reading a source -----------------------------------------------------------------------
    #: whether DDL (a temporary table) is rolled back with its transaction
    transactional_ddl: bool = True

    def same_name(self, a: str, b: str) -> bool:
        """Whether column names ``a`` and ``b`` name the same column."""
        return a == b

    def page(self, plan: Any, value_type: Any) -> Any:
        """The fast path reading pages of ``plan``'s rows (a `sluice.connectors._sql.pages.Page`),
        or None to read every page through the driver."""
        return None

    def prefer_index_scans(self, conn: Any) -> None:
        """Steer the planner of this transaction to index scans (`ORDER BY … LIMIT n` pages)."""

    @abstractmethod
    def empty_temp_table_sql(self, name: str, query: str) -> str:
        """SQL creating temporary table ``name`` with the columns of ``query`` and no rows."""

    # -- writing a sink -------------------------------------------------------------------------
    #: whether the sink writes a task's batches while it still reads the next (`_EarlyWrites`)
    early_writes: bool = False
    #: what follows the column list of `auto.create`'s CREATE TABLE
    create_table_options: str = ""

    def driver_values(self, array: Any) -> list[Any]:
        """The Python values of an Arrow array as this database's driver takes them."""
        return array.to_pylist()

    @abstractmethod
    def column_type(self, type_: Any, *, pk: bool, where: str) -> str:
        """The column type `auto.create`/`auto.evolve` give a field of this Arrow type."""

    @abstractmethod
    def write(self, writer: Any, conn: Any, w: Write) -> None:
        """Apply ``w`` in the open transaction of ``conn``. ``writer`` is the sink's `_Writer`
        (its `chunks` and `appended`)."""

    # -- catalog (each runs on an open SQLAlchemy connection) ---------------------------------
    #: SQL of the current time in UTC, as a naive timestamp with microseconds.
    utc_now_sql: str = ""
    #: SQL listing the base tables of the current schema / database (one name per row).
    tables_sql: str = ""

    @abstractmethod
    def current_schema(self, conn: Any) -> str:
        """The schema (PostgreSQL) or database (MySQL) unqualified names resolve in."""

    @abstractmethod
    def columns(self, conn: Any, table: TableName) -> list[ColumnInfo] | None:
        """The table's columns in order, or None if there is no such table (or view)."""

    def temp_columns(self, conn: Any, name: str) -> list[ColumnInfo] | None:
        """Columns of a temporary table created on `conn`."""
        return self.columns(conn, TableName("", name))

    @abstractmethod
    def primary_key(self, conn: Any, table: TableName) -> list[str]:
        """The primary key's columns, in key order."""

    @abstractmethod
    def unique_key_rows(self, conn: Any, table: TableName) -> list[tuple[Any, str]]:
        """(index, column) of the primary key and every unique index without a predicate."""


# -- schemas ------------------------------------------------------------------------------------
_INTS = {8: FieldType.INT8, 16: FieldType.INT16, 32: FieldType.INT32, 64: FieldType.INT64}


def int_schema(bits: int) -> Schema:
    return Schema.of(_INTS[bits])


def float_schema(bits: int) -> Schema:
    return Schema.of(FieldType.FLOAT32 if bits == 32 else FieldType.FLOAT64)


def bool_schema() -> Schema:
    return Schema.of(FieldType.BOOLEAN)


def decimal_schema(column: ColumnInfo, precision: int | None, scale: int | None) -> Schema:
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
def column_type(type_: Any, names: dict[str, str], where: str) -> str:
    """The column type of Arrow ``type_`` shared by every database (TIME), else from ``names``
    (by the Arrow type's name)."""
    import pyarrow as pa

    if pa.types.is_time(type_):
        digits = {"s": 0, "ms": 3, "us": 6, "ns": 6}[type_.unit]
        return f"TIME({digits})"
    name = str(type_)
    if name not in names:
        raise ConnectException(f"{where}: sluice has no column type for {type_}")
    return names[name]


def optional(schema: Schema, nullable: bool) -> Schema:
    return schema if schema.optional == nullable else replace(schema, optional=nullable)
