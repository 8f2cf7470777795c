"""JdbcSourceConnector: copies tables (or a query) of MySQL/MariaDB or PostgreSQL into topics.

Delivery: exactly-once into the topic. Every micro-batch reads a range of rows between two
positions, ordered by the mode's cursor columns, and a replayed batch reads the same range again.
Unit of parallelism: one table per task (tables are spread over `max.tasks` tasks); when there are
fewer tables than `max.tasks`, a large range (the first load of a big table) is cut into key ranges
that are read in parallel and still reach the topic in order.

Positions, one per table: `{"table": "db.orders"}` (or `{"query": "query"}`) →

* incrementing: `{"incrementing": 1041}` — rows with id > 1041 come next;
* timestamp: `{"timestamp": "2024-05-01T10:00:00.250000"}` — rows modified after it;
* timestamp+incrementing: both; rows after (timestamp, id) in that order;
* bulk: `{"load": 3, "after": [5000] | null, "done": false, "started": <epoch ms>}` — the third
  full read of the table, continuing after primary key 5000; a new load starts
  `poll.interval.ms` after the previous one started.

Each offset is the position *after* the last row of a range: resuming never re-reads that row.
Timestamps in positions are UTC wall-clock values. Incrementing mode sees new rows only; timestamp
modes also see updated rows. Rows committed late with a smaller id or timestamp than one already
read are not seen (as with every JDBC source); `timestamp.delay.interval.ms` gives in-flight
transactions time to commit.

The value of each record is a struct of the table's columns (see `_dialect` for the types); the
key is null, so one table stays in one queue, in order. Tables of different shapes each have their
own value schema (`JdbcSourceConnector.value_schemas`) and must go to different topics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from sluice.connectors._sql.connection import connection_client_options
from sluice.connectors._sql.dialect import Mapped, UnmappableType
from sluice.connectors._sql.names import TableName
from sluice.connectors._sql.values import decode, encode, naive_utc, to_arrow
from sluice.connectors.jdbc._config import SOURCE_CONFIG, SOURCE_POSITION_KEYS, SourceSettings
from sluice.sdk import (
    ClientOption,
    ConfigException,
    ConnectException,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    RestartRequested,
    RetriableException,
    Schema,
    SourceConnector,
)

log = logging.getLogger(__name__)

_PLAN_KEY = "jdbc.task.plan"
#: The rows of a table's first page, before its rows' width is known (pages aim at
#: `_pages.PAGE_BYTES` of text).
FIRST_PAGE_ROWS = 10_000
_MAX_INT = 2**63 - 1
#: A range is cut for parallel reading only if every piece gets at least this many rows.
MIN_SPLIT_ROWS = 20_000


@dataclass(frozen=True)
class TablePlan:
    """What one task needs to read one table or query; JSON in the task config."""

    partition: dict[str, str]
    topic: str
    table: str | None  # "schema.name" (or "name"), None in query mode
    query: str | None
    columns: list[Mapped]
    terms: list[str]  # cursor columns, in order (incrementing / timestamp / primary key)
    resume: list[str]  # unique ordering used to resume a read after a lost connection

    def value_schema(self) -> Schema:
        """The struct of the table's columns: its records' value schema."""
        return Schema.struct(*[(m.name, m.schema) for m in self.columns], optional=False)

    def with_schema(self, schema: Schema) -> TablePlan:
        """The plan with its columns' schemas taken from `schema` (same fields, in order)."""
        columns = [
            replace(m, schema=f.schema) for m, f in zip(self.columns, schema.fields, strict=True)
        ]
        return replace(self, columns=columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "topic": self.topic,
            "table": self.table,
            "query": self.query,
            "columns": [[m.name, m.schema.to_json(), m.conv, m.cast_text] for m in self.columns],
            "terms": self.terms,
            "resume": self.resume,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TablePlan:
        return TablePlan(
            partition=data["partition"],
            topic=data["topic"],
            table=data["table"],
            query=data["query"],
            columns=[Mapped(n, Schema.from_json(s), c, t) for n, s, c, t in data["columns"]],
            terms=data["terms"],
            resume=data["resume"],
        )


@dataclass
class SourcePlan:
    """The connector's plan: settings, tables (each with its value schema), the resolved
    initial timestamp."""

    settings: SourceSettings
    tables: list[TablePlan]
    initial_ms: int | None = None
    config: dict[str, str] = field(default_factory=dict)

    def schemas(self) -> list[Schema]:
        """The distinct value schemas of the tables, in table order."""
        return list(dict.fromkeys(t.value_schema() for t in self.tables))


# -- planning (driver) ----------------------------------------------------------------------------
def plan_source(config: Mapping[str, str], *, attempts: int | None = None) -> SourcePlan:
    """Connect, find the tables, map their columns; `ConfigException` names what is wrong.

    `attempts` bounds the first connection (default `connection.attempts`).
    """
    from sluice.connectors._sql.db import Database

    settings = SourceSettings.parse(config)
    db = Database(settings.connection)
    db.check(attempts=attempts)
    with db.connect() as conn:
        if settings.query:
            tables = [_plan_query(db, conn, settings)]
        else:
            names = list(settings.whitelist)
            key = "table.whitelist"
            if not names:
                black = {str(t) for t in settings.blacklist} | {t.name for t in settings.blacklist}
                names = [t for t in db.tables(conn) if str(t) not in black]
                key = "table.blacklist"
                if not names:
                    raise ConfigException(
                        "table.whitelist",
                        f"no tables to copy in {db.describe()}",
                        suggestion="list them in table.whitelist",
                    )
            tables = [_plan_table(db, conn, settings, name, key) for name in names]
        now = conn.exec_driver_sql(db.utc_now_sql()).scalar()
    tables = _unify_shapes(tables, settings)
    initial = settings.timestamp_initial
    if initial == -1:
        initial = int(naive_utc(now).replace(tzinfo=UTC).timestamp() * 1000)
    return SourcePlan(settings, tables, initial, dict(config))


def _unify_shapes(tables: list[TablePlan], settings: SourceSettings) -> list[TablePlan]:
    """Tables whose columns agree but for NULL-ability share one value schema (a column is
    optional if it is in any of them); a topic gets the tables of one shape only."""
    groups: dict[str, list[int]] = {}
    for i, plan in enumerate(tables):
        groups.setdefault(json.dumps(_loose(plan.value_schema())), []).append(i)
    out = list(tables)
    for members in groups.values():
        schema = _union_optional([tables[i].value_schema() for i in members])
        for i in members:
            out[i] = tables[i].with_schema(schema)
    by_topic: dict[str, TablePlan] = {}
    for plan in out:
        other = by_topic.setdefault(plan.topic, plan)
        if other.value_schema() != plan.value_schema():
            key = "connect.topicname" if settings.topic else "table.whitelist"
            raise ConfigException(
                key,
                f"tables {_describe_table(other)} and {_describe_table(plan)} have different "
                f"columns but would both go to topic {plan.topic!r}; a topic carries one value "
                "schema",
                suggestion="give each table its own topic (topic.prefix + table name, without "
                "connect.topicname)",
            )
    return out


def _describe_table(plan: TablePlan) -> str:
    return plan.table if plan.table is not None else "query"


def _loose(schema: Schema) -> list[tuple[str, dict]]:
    return [(f.name, dict(f.schema.to_json(), optional=True)) for f in schema.fields]


def _union_optional(schemas: list[Schema]) -> Schema:
    """The struct of `schemas` (alike but for optionality), each field optional if any is."""
    return Schema.struct(
        *[
            (f.name, replace(f.schema, optional=any(s.fields[i].schema.optional for s in schemas)))
            for i, f in enumerate(schemas[0].fields)
        ],
        optional=False,
    )


#: The text of a source's failure when its table changed under it; the runtime restarts such a
#: query by itself (`sluice.runtime.herder.restarts.TRANSIENT_MARKERS`), which plans it again.
SCHEMA_CHANGED = "changed its columns while running"


def column_changes(planned: list[Mapped], columns: list, dialect: Any) -> str:
    """What differs between the planned columns and the catalog's (empty when nothing does):
    added, removed, or retyped columns, and columns that became nullable."""
    now: dict[str, Schema | None] = {}
    for column in columns:
        try:
            now[column.name] = dialect.map_column(column).schema
        except UnmappableType:
            now[column.name] = None
    before = {m.name: m.schema for m in planned}
    parts = []
    added = [n for n in now if n not in before]
    removed = [n for n in before if n not in now]
    changed = [n for n in before if n in now and _retyped(before[n], now[n])]
    for label, names in (("added", added), ("removed", removed), ("changed", changed)):
        if names:
            parts.append(f"{label}: {', '.join(names)}")
    return "; ".join(parts)


def _retyped(old: Schema, new: Schema | None) -> bool:
    # A planned optional field may be a NOT NULL column made optional to share a topic with
    # another table (`_unify_shapes`): only a column becoming nullable is a change.
    if new is None:
        return True
    return replace(old, optional=True) != replace(new, optional=True) or (
        new.optional and not old.optional
    )


def _map_columns(db: Any, columns: list, where: str, key: str) -> list[Mapped]:
    mapped = []
    for column in columns:
        try:
            mapped.append(db.dialect.map_column(column))
        except UnmappableType as exc:
            raise ConfigException(
                key,
                f"{where}: column {column.name!r} has type {column.display}, which sluice "
                f"cannot carry: {exc}",
                suggestion="leave the table out, or copy it with a query that converts the column",
            ) from None
    return mapped


def _find(columns: list, name: str, dialect: Any) -> Any:
    for column in columns:
        if dialect.same_name(column.name, name):
            return column
    return None


def _cursor_terms(
    db: Any, settings: SourceSettings, columns: list, where: str, pk: list[str]
) -> tuple[list[str], list[str]]:
    """The cursor columns of the mode (checked), and the unique ordering to resume with."""
    names = ", ".join(c.name for c in columns)
    terms: list[str] = []
    if settings.uses_timestamp:
        for name in settings.timestamp_columns:
            column = _find(columns, name, db.dialect)
            if column is None:
                raise ConfigException(
                    "timestamp.column.name", f"{where} has no column {name!r} (columns: {names})"
                )
            if db.dialect.map_column(column).conv != "timestamp":
                raise ConfigException(
                    "timestamp.column.name",
                    f"{where}: column {name!r} is {column.display}, not a timestamp",
                )
            _check_not_null(settings, column, where, "timestamp.column.name")
            terms.append(column.name)
        if len(terms) > 1:
            # several timestamp columns: COALESCE(a, b, …) is the cursor; see `_terms_sql`
            terms = ["\x00coalesce\x00" + json.dumps(terms)]
    if settings.uses_incrementing:
        name = settings.incrementing_column
        if not name:
            auto = [c for c in columns if c.autoincrement]
            if len(auto) != 1:
                raise ConfigException(
                    "incrementing.column.name",
                    f"required key is missing: {where} has no single auto-increment column "
                    "to use instead",
                )
            column = auto[0]
        else:
            column = _find(columns, name, db.dialect)
            if column is None:
                raise ConfigException(
                    "incrementing.column.name",
                    f"{where} has no column {name!r} (columns: {names})",
                )
        mapped = db.dialect.map_column(column)
        integral = mapped.schema.type.value.startswith("INT") or (
            mapped.conv in ("decimal", "uint64") and mapped.schema.scale == 0
        )
        if not integral:
            raise ConfigException(
                "incrementing.column.name",
                f"{where}: column {column.name!r} is {column.display}, not an integer",
            )
        _check_not_null(settings, column, where, "incrementing.column.name")
        terms.append(column.name)
    if settings.mode == "bulk":
        return list(pk), list(pk)
    if settings.mode == "timestamp":
        resume = terms + [p for p in pk if p not in terms] if pk else []
        return terms, resume
    return terms, terms


def _check_not_null(settings: SourceSettings, column: Any, where: str, key: str) -> None:
    # A query's result columns carry no NOT NULL constraints to check (PostgreSQL drops them).
    if column.nullable and settings.validate_non_null and not settings.query:
        raise ConfigException(
            key,
            f"{where}: column {column.name!r} is nullable; rows where it is NULL would never be "
            "copied",
            suggestion="declare it NOT NULL, or set validate.non.null=false",
        )


def _plan_table(
    db: Any, conn: Any, settings: SourceSettings, table: TableName, key: str
) -> TablePlan:
    columns = db.columns(conn, table)
    if columns is None:
        raise ConfigException(key, f"table {str(table)!r} does not exist in {db.describe()}")
    where = f"table {str(table)!r}"
    mapped = _map_columns(db, columns, where, key)
    pk = db.primary_key(conn, table)
    terms, resume = _cursor_terms(db, settings, columns, where, pk)
    name = str(table)
    topic = settings.topic or f"{settings.topic_prefix}{table.name}"
    return TablePlan({"table": name}, topic, name, None, mapped, terms, resume)


def _query_columns(db: Any, conn: Any, query: str) -> list:
    """The result columns of `query`, as the catalog describes those of an empty temporary
    table made from it (a driver's cursor description has no nullability or type details).
    Rolls `conn`'s transaction back."""
    probe = "sluice_query_probe"
    create = db.dialect.empty_temp_table_sql(db.dialect.quote(probe), _query_sql(query))
    try:
        conn.exec_driver_sql(create)
        return db.temp_columns(conn, probe) or []
    finally:
        conn.rollback()
        # a temporary table outlives a rollback where DDL is not transactional
        if not db.dialect.transactional_ddl:
            conn.exec_driver_sql(f"DROP TEMPORARY TABLE IF EXISTS {db.dialect.quote(probe)}")


def _plan_query(db: Any, conn: Any, settings: SourceSettings) -> TablePlan:
    from sqlalchemy.exc import DBAPIError

    try:
        columns = _query_columns(db, conn, settings.query)
    except DBAPIError as exc:
        from sluice.connectors._sql.db import error_text

        raise ConfigException("query", f"the query fails: {error_text(exc)}") from None
    mapped = _map_columns(db, columns, "query", "query")
    terms, resume = _cursor_terms(db, settings, columns, "the query", [])
    topic = settings.topic or settings.topic_prefix
    return TablePlan({"query": "query"}, topic, None, settings.query, mapped, terms, resume)


def _query_sql(query: str) -> str:
    """The user's query as a derived table (`%` doubled: statements take `%s` parameters)."""
    body = query.strip().rstrip(";").strip().replace("%", "%%")
    return f"SELECT * FROM ({body}) AS sluice_query"


# -- reading (driver: latest/split; executors: read) ----------------------------------------------
class JdbcSourceTask(ReplayableSourceTask):
    """Reads ranges of its tables' rows between two positions."""

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        self.settings = SourceSettings.parse(config)
        raw = config.get(_PLAN_KEY)
        if not raw:
            raise ConnectException("JdbcSourceTask started without its plan (use the connector)")
        data = json.loads(raw)
        self.initial_ms: int | None = data["initial"]
        self.tables = [TablePlan.from_json(t) for t in data["tables"]]
        self.by_partition = {json.dumps(t.partition, sort_keys=True): t for t in self.tables}
        self.db = Database(self.settings.connection)
        self._warned = False
        # partition → (offset, monotonic time): while a table is idle, look again only every
        # poll.interval.ms (while it has a backlog, every micro-batch asks)
        self._idle: dict[str, tuple[RecordOffset | None, float]] = {}

    def partitions(self) -> list[RecordPartition]:
        return [dict(t.partition) for t in self.tables]

    def _table(self, partition: RecordPartition) -> TablePlan:
        return self.by_partition[json.dumps(partition, sort_keys=True)]

    # -- SQL pieces -----------------------------------------------------------------------------
    def _source_sql(self, plan: TablePlan) -> str:
        if plan.query is not None:
            return f"({_query_sql(plan.query)}) AS sluice_source"
        return self.db.dialect.table(TableName.parse(plan.table or ""))

    def _term_sql(self, term: str) -> str:
        if term.startswith("\x00coalesce\x00"):
            names = json.loads(term[len("\x00coalesce\x00") :])
            return "COALESCE(" + ", ".join(self.db.dialect.quote(n) for n in names) + ")"
        return self.db.dialect.quote(term)

    def _term_value(self, term: str, row: Mapping[str, Any]) -> Any:
        if term.startswith("\x00coalesce\x00"):
            for name in json.loads(term[len("\x00coalesce\x00") :]):
                if row.get(name) is not None:
                    return row[name]
            return None
        return row[term]

    def _after(self, terms: list[str], values: list[Any]) -> tuple[str, list[Any]]:
        """`(terms) > (values)` in lexicographic order, written so that an index applies."""
        return self._compare(terms, values, ">")

    def _at_most(self, terms: list[str], values: list[Any]) -> tuple[str, list[Any]]:
        """`(terms) <= (values)` in lexicographic order."""
        return self._compare(terms, values, "<=")

    def _compare(self, terms: list[str], values: list[Any], op: str) -> tuple[str, list[Any]]:
        sql = [self._term_sql(t) for t in terms]
        if len(sql) == 1:
            return f"{sql[0]} {op} %s", [values[0]]
        strict = op[0]  # ">" or "<"
        ors, params = [], []
        for i in range(len(sql)):
            ors.append(
                " AND ".join([f"{sql[j]} = %s" for j in range(i)] + [f"{sql[i]} {strict} %s"])
            )
            params.extend(values[: i + 1])
        if op == "<=":
            ors.append(" AND ".join(f"{s} = %s" for s in sql))
            params.extend(values)
        # The leading range (`a >= x AND (…)`) lets the planner scan the index from x on; the OR
        # alone makes PostgreSQL bitmap-scan the whole table.
        bound = f"{sql[0]} {strict}= %s"
        return f"({bound} AND (" + " OR ".join(f"({o})" for o in ors) + "))", [values[0], *params]

    # -- offsets <-> cursor values --------------------------------------------------------------
    def _values(self, offset: RecordOffset) -> list[Any] | None:
        """The cursor values an offset stands for (None: from the very beginning)."""
        mode = self.settings.mode
        if mode == "bulk":
            after = offset.get("after")
            return None if after is None else [decode(v) for v in after]
        values: list[Any] = []
        if "timestamp" in offset and self.settings.uses_timestamp:
            values.append(datetime.fromisoformat(offset["timestamp"]))
        if "incrementing" in offset and self.settings.uses_incrementing:
            values.append(decode(offset["incrementing"]))
        return values or None

    def _offset(self, row: tuple, start: RecordOffset | None, plan: TablePlan) -> RecordOffset:
        """The offset just after a row of cursor values."""
        out: dict[str, Any] = {}
        values = list(row)
        if self.settings.uses_timestamp:
            ts = values.pop(0)
            out["timestamp"] = naive_utc(ts).isoformat(timespec="microseconds")
        if self.settings.uses_incrementing:
            out["incrementing"] = encode(values.pop(0))
        if start is None and self.initial_ms is not None and self.settings.uses_timestamp:
            # carried so that a replay of the very first batch starts where the first try did
            out["initial"] = self.initial_ms
        elif start is not None and "initial" in start and "timestamp" not in start:
            out["initial"] = start["initial"]
        return out

    def _lower(self, start: RecordOffset | None, end: RecordOffset) -> list[Any] | None:
        if start is not None:
            return self._values(start)
        initial = end.get("initial")
        if initial is not None and self.settings.uses_timestamp:
            ts = datetime.fromtimestamp(initial / 1000, UTC).replace(tzinfo=None)
            if self.settings.mode == "timestamp+incrementing":
                # everything at or after the initial time: strictly after (initial - 1 µs, max)
                return [ts - timedelta(microseconds=1), _MAX_INT]
            return [ts - timedelta(microseconds=1)]
        return None

    def _where(
        self,
        plan: TablePlan,
        lower: list[Any] | None,
        upper: list[Any] | None,
        *,
        lower_terms: list[str] | None = None,
        bound: datetime | None = None,
    ) -> tuple[str, list[Any]]:
        clauses, params = [], []
        if lower is not None:
            sql, p = self._after(lower_terms or plan.terms, lower)
            clauses.append(sql)
            params.extend(p)
        if upper is not None:
            sql, p = self._at_most(plan.terms, upper)
            clauses.append(sql)
            params.extend(p)
        if bound is not None:
            clauses.append(f"{self._term_sql(plan.terms[0])} < %s")
            params.append(bound)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def _ordered_scans(self, conn: Any) -> None:
        """Prefer index scans in this transaction (PostgreSQL).

        Every query here is `ORDER BY cursor LIMIT n` from a lower bound: an index scan that stops
        after n rows. On a table without fresh statistics PostgreSQL would rather bitmap-scan the
        whole range and sort it, again for every page (measured: 90 ms instead of 2 ms a page).
        """
        self.db.dialect.prefer_index_scans(conn)

    def _bound(self, conn: Any) -> datetime | None:
        """Timestamp modes read rows older than the database's now - timestamp.delay.interval.ms."""
        if not self.settings.uses_timestamp:
            return None
        now = naive_utc(conn.exec_driver_sql(self.db.utc_now_sql()).scalar())
        return now - timedelta(milliseconds=self.settings.delay_ms)

    # -- driver ---------------------------------------------------------------------------------
    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        plan = self._table(partition)
        key = json.dumps(partition, sort_keys=True)
        idle = self._idle.get(key)
        if idle is not None and idle[0] == start and time.monotonic() < idle[1]:
            return start  # nothing new at the last look, less than poll.interval.ms ago
        try:
            with self.db.connect(attempts=1) as conn:
                self._ordered_scans(conn)
                if self.settings.mode == "bulk":
                    end = self._latest_bulk(conn, plan, start, limit)
                else:
                    end = self._latest_cursor(conn, plan, start, limit)
                if end != start:
                    # After the end is known: a row it includes that was written after an ALTER
                    # TABLE is seen with the ALTER, so no row is read with the old columns.
                    self._check_columns(conn, plan)
            self._warned = False
            if end == start and self.settings.mode != "bulk":
                wait = self.settings.poll_interval_ms / 1000
                self._idle[key] = (start, time.monotonic() + wait)
            else:
                self._idle.pop(key, None)
            return end
        except RetriableException as exc:
            self._unavailable(exc)
            return start
        except ConnectException:
            raise
        except Exception as exc:
            if self.db.is_transient(exc):
                self._unavailable(exc)
                return start
            raise self.db.statement_error(exc, f"reading {_describe_table(plan)}") from None

    def _check_columns(self, conn: Any, plan: TablePlan) -> None:
        """Fail (for an automatic restart, which plans the table again) when the table's (or
        the query's) columns are no longer those the connector planned: reads list the planned
        columns, so an added column would be silently left out."""
        if plan.query is not None:
            # a `SELECT *` query (or one over a view) changes with the tables under it
            columns = _query_columns(self.db, conn, plan.query)
            what = "the query"
        else:
            assert plan.table is not None
            columns = self.db.columns(conn, TableName.parse(plan.table))
            what = f"table {plan.table!r}"
        if columns is None:
            return  # dropped: the reads fail, naming it
        change = column_changes(plan.columns, columns, self.db.dialect)
        if change:
            raise RestartRequested(
                f"{what} {SCHEMA_CHANGED} ({change}); the connector restarts to "
                "read them again and registers the new schema version",
                suggestion="nothing to do unless the new version is refused; with "
                "restart.transient.max.attempts=0, restart the connector",
            )

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Rows past the cursor: one COUNT over the cursor's index from the position (with the
        timestamp modes' delay applied, as `latest` reads). None in bulk mode (no cursor)."""
        if self.settings.mode == "bulk":
            return None
        plan = self._table(partition)
        with self.db.connect(attempts=1) as conn:
            lower = self._lower(position, self._initial_marker(position))
            where, params = self._where(plan, lower, None, bound=self._bound(conn))
            sql = f"SELECT COUNT(*) FROM {self._source_sql(plan)}{where}"
            return int(conn.exec_driver_sql(sql, tuple(params)).scalar())

    def _unavailable(self, exc: BaseException) -> None:
        # The database is away: no new data this micro-batch; the next one asks again.
        if not self._warned:
            log.warning("%s is unavailable, waiting for it: %s", self.db.describe(), exc)
            self._warned = True

    def _integer_cursor(self, plan: TablePlan) -> bool:
        """True in incrementing mode: the cursor is one integer column with unique values (checked
        at start), so n consecutive values hold at most n rows."""
        return self.settings.mode == "incrementing" and len(plan.terms) == 1

    def _latest_cursor(
        self, conn: Any, plan: TablePlan, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        lower = self._lower(start, self._initial_marker(start))
        where, params = self._where(plan, lower, None, bound=self._bound(conn))
        terms = ", ".join(self._term_sql(t) for t in plan.terms)
        src = self._source_sql(plan)
        row = None
        if limit.max_rows is not None and self._integer_cursor(plan):
            # Two index probes, where skipping max.rows rows (below) walks them all: the first
            # new id, then the last id up to first + max_rows - 1 (at most max_rows rows, exactly
            # that many when ids have no gaps). The range ends at a row that exists, so a row
            # committed late with an id past it is still read.
            first = self._first(conn, plan, where, params)
            if first is None:
                return start
            cap = [first[0] + int(limit.max_rows) - 1]
            capped, more = self._where(plan, lower, cap, bound=self._bound(conn))
            return self._offset(tuple(self._last(conn, plan, capped, more)), start, plan)
        if limit.max_rows is not None:
            row = conn.exec_driver_sql(
                f"SELECT {terms} FROM {src}{where} ORDER BY {terms} "
                f"LIMIT 1 OFFSET {int(limit.max_rows) - 1}",
                tuple(params),
            ).first()
        if row is None:
            row = self._last(conn, plan, where, params)
        if row is None:
            return start
        return self._offset(tuple(row), start, plan)

    def _first(self, conn: Any, plan: TablePlan, where: str, params: list[Any]) -> Any:
        """The smallest cursor values of the rows `where` selects (None if there are none)."""
        terms = ", ".join(self._term_sql(t) for t in plan.terms)
        return conn.exec_driver_sql(
            f"SELECT {terms} FROM {self._source_sql(plan)}{where} ORDER BY {terms} LIMIT 1",
            tuple(params),
        ).first()

    def _last(self, conn: Any, plan: TablePlan, where: str, params: list[Any]) -> Any:
        """The greatest cursor values of the rows `where` selects (None if there are none)."""
        terms = ", ".join(self._term_sql(t) for t in plan.terms)
        desc = ", ".join(f"{self._term_sql(t)} DESC" for t in plan.terms)
        return conn.exec_driver_sql(
            f"SELECT {terms} FROM {self._source_sql(plan)}{where} ORDER BY {desc} LIMIT 1",
            tuple(params),
        ).first()

    def _initial_marker(self, start: RecordOffset | None) -> RecordOffset:
        if start is None and self.initial_ms is not None:
            return {"initial": self.initial_ms}
        return {}

    def _latest_bulk(
        self, conn: Any, plan: TablePlan, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        now_ms = int(time.time() * 1000)
        if start is None or start.get("done", True):
            if (
                start is not None
                and now_ms - int(start["started"]) < self.settings.poll_interval_ms
            ):
                return start
            load, began, after = (int(start["load"]) + 1 if start else 1), now_ms, None
        else:
            load, began, after = int(start["load"]), int(start["started"]), start.get("after")
        if not plan.terms:
            return {"load": load, "after": None, "done": True, "started": began}
        lower = None if after is None else [decode(v) for v in after]
        where, params = self._where(plan, lower, None)
        terms = ", ".join(self._term_sql(t) for t in plan.terms)
        src = self._source_sql(plan)
        row = None
        if limit.max_rows is not None:
            row = conn.exec_driver_sql(
                f"SELECT {terms} FROM {src}{where} ORDER BY {terms} "
                f"LIMIT 1 OFFSET {int(limit.max_rows) - 1}",
                tuple(params),
            ).first()
            if row is not None:
                return {
                    "load": load,
                    "after": [encode(v) for v in row],
                    "done": False,
                    "started": began,
                }
        desc = ", ".join(f"{self._term_sql(t)} DESC" for t in plan.terms)
        row = conn.exec_driver_sql(
            f"SELECT {terms} FROM {src}{where} ORDER BY {desc} LIMIT 1", tuple(params)
        ).first()
        last = [encode(v) for v in row] if row is not None else after
        return {"load": load, "after": last, "done": True, "started": began}

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        plan = self._table(partition)
        if not plan.terms or parts < 2:
            return []
        lower, upper = self._range(start, end)
        try:
            with self.db.connect(attempts=1) as conn:
                self._ordered_scans(conn)
                where, params = self._where(plan, lower, upper)
                src = self._source_sql(plan)
                if self._integer_cursor(plan) and upper is not None:
                    return self._integer_cuts(conn, plan, where, params, upper[0], parts, start)
                count = conn.exec_driver_sql(
                    f"SELECT COUNT(*) FROM {src}{where}", tuple(params)
                ).scalar()
                parts = min(parts, int(count or 0) // MIN_SPLIT_ROWS)
                if parts < 2:
                    return []
                terms = ", ".join(self._term_sql(t) for t in plan.terms)
                cuts: list[RecordOffset] = []
                previous: tuple | None = None
                for k in range(1, parts):
                    row = conn.exec_driver_sql(
                        f"SELECT {terms} FROM {src}{where} ORDER BY {terms} "
                        f"LIMIT 1 OFFSET {int(count) * k // parts - 1}",
                        tuple(params),
                    ).first()
                    if row is None or (previous is not None and tuple(row) <= previous):
                        continue
                    if upper is not None and tuple(row) >= tuple(upper):
                        break
                    previous = tuple(row)
                    cuts.append(self._cut(tuple(row), start, end))
                return cuts
        except Exception as exc:
            if isinstance(exc, RetriableException) or self.db.is_transient(exc):
                return []  # read the range in one piece; the read itself retries
            raise

    def _integer_cuts(
        self,
        conn: Any,
        plan: TablePlan,
        where: str,
        params: list[Any],
        upper: Any,
        parts: int,
        start: RecordOffset | None,
    ) -> list[RecordOffset]:
        """Cuts of an incrementing range into `parts` equal spans of ids (no count of its rows:
        a span of n ids holds at most n rows, and exactly n when ids have no gaps)."""
        first = self._first(conn, plan, where, params)
        if first is None:
            return []
        low, high = int(first[0]), int(upper)
        parts = min(parts, (high - low + 1) // MIN_SPLIT_ROWS)
        if parts < 2:
            return []
        step = (high - low + 1) / parts
        cuts = sorted({low + int(step * k) - 1 for k in range(1, parts)})
        return [self._offset((c,), start, plan) for c in cuts if low <= c < high]

    def _cut(self, row: tuple, start: RecordOffset | None, end: RecordOffset) -> RecordOffset:
        if self.settings.mode == "bulk":
            return {
                "load": end["load"],
                "after": [encode(v) for v in row],
                "done": False,
                "started": end["started"],
            }
        cut = self._offset(row, None, self.tables[0])
        cut.pop("initial", None)
        if start is None and "initial" in end:
            cut["initial"] = end["initial"]
        return cut

    def _range(
        self, start: RecordOffset | None, end: RecordOffset
    ) -> tuple[list[Any] | None, list[Any] | None]:
        if self.settings.mode == "bulk":
            same_load = start is not None and start.get("load") == end.get("load")
            lower = self._values(start) if same_load and not start.get("done") else None
            upper = self._values(end)
            return lower, upper
        return self._lower(start, end), self._values(end)

    # -- executor -------------------------------------------------------------------------------
    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        plan = self._table(partition)
        lower, upper = self._range(start, end)
        if upper is None and self.settings.mode != "bulk":
            return
        if plan.resume:
            yield from self._read_pages(plan, lower, upper)
        else:
            yield from self._read_stream(plan, lower, upper)

    def _read_pages(
        self, plan: TablePlan, lower: list[Any] | None, upper: list[Any] | None
    ) -> Iterator[pa.RecordBatch]:
        """Keyset pages of `batch.max.rows` rows in the plan's unique order.

        Each page is its own short statement, so a long first load holds no snapshot open on
        the source, and a lost connection costs one page: the next try starts after the last
        row delivered. A fast-path page holds at most `batch.max.rows` rows and about
        `PAGE_BYTES` of text: the first has `FIRST_PAGE_ROWS` rows at most, the next as many as
        the rows' width seen so far allows, so pages of narrow rows are large (each statement
        costs the server ~5 ms) and pages of wide rows stay small. A MySQL page too large for
        one value is tried again with a quarter of the rows; one row that does not fit sends
        the table through the driver.
        """
        select = ", ".join(self.db.dialect.select_expr(m) for m in plan.columns)
        order = ", ".join(self._term_sql(t) for t in plan.resume)
        topic = pa.array([plan.topic], pa.string())
        most = self.settings.batch_max_rows
        size = min(most, FIRST_PAGE_ROWS)
        copy = self.db.dialect.page(plan, plan.value_schema().to_arrow())
        lower_terms = plan.terms
        failures = delivered = 0
        while True:
            where, params = self._where(plan, lower, upper, lower_terms=lower_terms)
            src = self._source_sql(plan)
            tail = f" FROM {src}{where} ORDER BY {order} LIMIT {size}"
            try:
                with self.db.connect(attempts=1) as conn:
                    self._ordered_scans(conn)
                    page = copy.fetch(conn, tail, params) if copy is not None else None
                    if page is None and copy is not None and copy.too_big:
                        if size > 1:  # rows too wide for this many in one value
                            size = max(1, size // 4)
                            continue
                        copy = None  # one row does not fit: the driver from now on
                    if page is None:  # no fast path, or it could not parse: the driver's way
                        rows = conn.exec_driver_sql(f"SELECT {select}{tail}", tuple(params))
                        page = self._page(plan, rows.fetchall())
            except Exception as exc:
                failures = self._read_failed(plan, exc, failures, delivered)
                continue
            failures = 0
            value, last = page
            if not len(value):
                return
            delivered += len(value)
            yield pa.RecordBatch.from_arrays(
                [value, pa.repeat(topic[0], len(value))], names=["value", "topic"]
            )
            if len(value) < size:
                return
            lower = [self._term_value(t, last) for t in plan.resume]
            lower_terms = plan.resume
            if copy is not None and copy.page_bytes:
                fitting = copy.budget * len(value) // copy.page_bytes
                size = max(1, min(most, fitting))

    def _page(self, plan: TablePlan, rows: list) -> tuple[pa.StructArray, dict[str, Any]]:
        """Driver rows → the value column, and the last row (as a dict) to resume after."""
        if not rows:
            return pa.array([], plan.value_schema().to_arrow()), {}
        batch = self._batch(plan, rows, pa.array([plan.topic], pa.string()))
        last = dict(zip([m.name for m in plan.columns], rows[-1], strict=True))
        return batch.column("value"), last

    def _read_stream(
        self, plan: TablePlan, lower: list[Any] | None, upper: list[Any] | None
    ) -> Iterator[pa.RecordBatch]:
        """One streamed statement (server-side cursor), for rows without a unique order."""
        select = ", ".join(self.db.dialect.select_expr(m) for m in plan.columns)
        order = ", ".join(self._term_sql(t) for t in plan.terms)
        where, params = self._where(plan, lower, upper)
        sql = f"SELECT {select} FROM {self._source_sql(plan)}{where}"
        sql += f" ORDER BY {order}" if order else ""
        topic = pa.array([plan.topic], pa.string())
        failures = delivered = 0
        while True:
            try:
                with self.db.connect(attempts=1) as conn:
                    result = conn.execution_options(stream_results=True).exec_driver_sql(
                        sql, tuple(params)
                    )
                    while rows := result.fetchmany(self.settings.batch_max_rows):
                        delivered += len(rows)
                        yield self._batch(plan, rows, topic)
                    return
            except Exception as exc:
                failures = self._read_failed(plan, exc, failures, delivered)

    def _read_failed(self, plan: TablePlan, exc: Exception, failures: int, delivered: int) -> int:
        """Decide what a failed read does: raise, or wait and return the new failure count."""
        from sluice.connectors._sql.db import error_text

        what = f"reading {_describe_table(plan)}"
        transient = isinstance(exc, RetriableException) or (
            not isinstance(exc, ConnectException) and self.db.is_transient(exc)
        )
        if not transient:
            if isinstance(exc, ConnectException):
                raise exc
            raise self.db.statement_error(exc, what) from None
        if delivered and not plan.resume:
            raise ConnectException(
                f"{what}: lost the connection after {delivered} rows, and the rows have no "
                "unique order to resume from",
                suggestion="give the table a primary key",
            ) from None
        attempts = self.settings.connection.attempts
        if failures + 1 >= attempts:
            raise RetriableException(
                f"{what}: {self.db.describe()} unavailable after {attempts} attempt(s): "
                f"{exc.message if isinstance(exc, ConnectException) else error_text(exc)}"
            ) from None
        log.warning("%s: %s; trying again after row %d", what, error_text(exc), delivered)
        time.sleep(self.settings.connection.backoff_ms / 1000)
        return failures + 1

    def _batch(self, plan: TablePlan, rows: list, topic: pa.Array) -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True))
        arrays = []
        struct_type = plan.value_schema().to_arrow()
        for i, mapped in enumerate(plan.columns):
            type_ = struct_type.field(i).type
            try:
                arrays.append(to_arrow(columns[i], mapped, type_))
            except ValueError as exc:
                raise ConnectException(
                    f"{_describe_table(plan)}: column {mapped.name!r}: {exc}",
                    suggestion="the row was not delivered; fix or exclude the value",
                ) from None
        value = pa.StructArray.from_arrays(arrays, fields=list(struct_type))
        return pa.RecordBatch.from_arrays(
            [value, pa.repeat(topic[0], len(rows))], names=["value", "topic"]
        )

    def stop(self) -> None:
        pass


def _cursor_value(value: Any) -> bool:
    """Whether `value` is what `encode` writes: a JSON scalar, or a tagged value `decode`
    reads back (a tag it does not know stays a dict: refused)."""
    try:
        return not isinstance(decode(value), (dict, list))
    except (TypeError, ValueError, ArithmeticError):  # decimal.InvalidOperation is the last
        return False


class JdbcSourceConnector(SourceConnector):
    """Copies MySQL/MariaDB or PostgreSQL tables (or a query) into topics, exactly once."""

    config_def = SOURCE_CONFIG
    task_class = JdbcSourceTask
    position_keys = SOURCE_POSITION_KEYS

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """`connection.url`'s parameters that reach the driver (libpq, PyMySQL)."""
        return connection_client_options(config)

    def __init__(self) -> None:
        super().__init__()
        self._plan: SourcePlan | None = None

    def validate(self, config: Mapping[str, str]) -> None:
        # One connection attempt: validation answers a REST call, and a database that is down
        # is reported now, not after connection.attempts tries connection.backoff.ms apart.
        # `start` (in the worker) retries as configured.
        self._plan = plan_source(config, attempts=1)

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        if self._plan is None or self._plan.config != dict(config):
            self._plan = plan_source(config)

    def offset_problem(self, partition: RecordPartition, offset: RecordOffset) -> str | None:
        """The cursor values must read back as `_values` reads them: an ISO date-time for
        `timestamp`, a JSON scalar or a tagged value (`{"decimal": "1.5"}`) for `incrementing`,
        a list of them for bulk mode's `after`."""
        stamp = offset.get("timestamp")
        try:
            if stamp is not None:
                datetime.fromisoformat(stamp)
        except (TypeError, ValueError):
            return f"'timestamp' must be an ISO date-time (2026-11-24T10:00:00), got {stamp!r}"
        after = offset.get("after")
        if after is not None and not isinstance(after, list):
            return f"'after' must be a list of cursor values, got {after!r}"
        for key, value in [("incrementing", offset.get("incrementing"))] + [
            ("after", v) for v in after or []
        ]:
            if not _cursor_value(value):
                return f"{key!r} holds {value!r}, which is not a cursor value"
        return None

    @property
    def plan(self) -> SourcePlan:
        if self._plan is None:
            raise ConnectException("JdbcSourceConnector used before start()")
        return self._plan

    def value_schema(self) -> Schema:
        return self.plan.schemas()[0]

    def value_schemas(self) -> list[tuple[RecordPartition, Schema]]:
        # Tables of different shapes: each table's schema (they go to different topics).
        if len(self.plan.schemas()) == 1:
            return []
        return [(dict(t.partition), t.value_schema()) for t in self.plan.tables]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        plan = self.plan
        count = max(1, min(max_tasks, len(plan.tables)))
        shares: list[list[TablePlan]] = [[] for _ in range(count)]
        for i, table in enumerate(plan.tables):
            shares[i % count].append(table)
        common = {"initial": plan.initial_ms}
        return [
            dict(
                self.config,
                **{_PLAN_KEY: json.dumps(dict(common, tables=[t.to_json() for t in share]))},
            )
            for share in shares
        ]
