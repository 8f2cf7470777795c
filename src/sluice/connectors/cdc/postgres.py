"""PostgresCdcSourceConnector: PostgreSQL logical replication (`pgoutput`) → one topic per table.

Delivery: **exactly-once into the topic.** The connector owns a logical replication slot; the
slot keeps every change from its confirmed LSN on until the connector moves it. A micro-batch's
range is `(start LSN, end LSN]`, where both are end LSNs of committed transactions: `latest`
(driver) peeks at the slot's message types and commits (`pg_logical_slot_peek_binary_changes`,
which does not consume anything) and ends the range at the last commit after `start` that keeps
the changes within `read.max.rows` (at least one transaction), and `read` (executor) peeks
again up to `end` and keeps the transactions whose end LSN lies in the range. Peeking is
deterministic, so a replayed micro-batch reads the same changes. The slot's confirmed LSN is
advanced (`pg_replication_slot_advance`) only in the task's `commit` hook, after the micro-batch
ending there committed and its positions were stored. Every row of one transaction is in one
micro-batch.

WAL retention: PostgreSQL keeps WAL from the slot's position on for as long as the slot exists,
whether or not the connector runs (bounded only by `max_slot_wal_keep_size`, which invalidates
the slot: the connector then fails naming it). Drop the slot (`SELECT pg_drop_replication_slot(…)`)
when the connector is deleted for good.

Unit of parallelism: one task reads the slot (a slot has one reader at a time); each table is a
partition `{"server": <topic.prefix>, "table": "<schema>.<table>"}` → `{"lsn": <end LSN>}`, all
tables at the same LSN after each micro-batch.

Keys (Debezium's where they apply): `connection.url` (`jdbc:postgresql://host:port/db`) or
`database.hostname`, `database.port` (5432), `database.user`, `database.password`,
`database.dbname`; `topic.prefix` (required; topics are `<prefix>.<schema>.<table>`),
`table.include.list` / `table.exclude.list` (`schema.table`, comma-separated; default: every table
of the publication, or of the current schema when the publication is created),
`slot.name` (`sluice`), `publication.name` (`sluice_publication`; created `FOR TABLE` the included
tables when missing), `snapshot.mode` (`initial`: the existing rows first, chunk by chunk
while the slot streams, see `sluice.connectors.cdc._snapshot`; `never`; docs/cdc.md).

Records: Debezium's envelope (`sluice.connectors.cdc._envelope`), key = the primary key as JSON
text. With `REPLICA IDENTITY DEFAULT` an update's `before` is null and a delete's `before` holds
the key columns only; `REPLICA IDENTITY FULL` gives whole rows. Example::

    runner.start("pg-cdc", {
        "connector.class": "PostgresCdcSourceConnector",
        "connection.url": "jdbc:postgresql://127.0.0.1:5432/shop", "connection.user": "root",
        "topic.prefix": "shop", "table.include.list": "public.orders",
        "value.converter": "AvroConverter"})
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime
from datetime import time as dtime
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from sluice.connectors._sql.names import TableName
from sluice.connectors.cdc._base import CdcSourceConnector, CdcTable, CdcTask, sql_error
from sluice.connectors.cdc._config import POSTGRES_CONFIG, TypedKeys
from sluice.connectors.cdc._envelope import describe_table, key_text, source_block
from sluice.connectors.cdc._evolve import SchemaChanged, check_added, verdict
from sluice.connectors.cdc._pgoutput import (
    UNCHANGED,
    Change,
    Relation,
    Transaction,
    commit_end,
    lsn_int,
    lsn_text,
    relation_of,
    transactions,
)
from sluice.sdk import (
    ConfigException,
    ConnectException,
    ConnectRecord,
    FieldType,
    Logical,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    Schema,
)

log = logging.getLogger(__name__)

_OBJECT_IN_USE = "55006"  # the slot is being read by another session
_SLOT_BUSY_WAIT_S = 120.0
_FLUSH_WAIT_S = 60.0
_INSERT_LSN = "SELECT pg_current_wal_insert_lsn()::text"


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(getattr(exc, "orig", None) or exc, "sqlstate", None)


# -- text values → Python -------------------------------------------------------------------------
def parse_value(text: str, schema: Schema, where: str) -> Any:
    """One column's text (PostgreSQL's output format, session in UTC) as the value of `schema`."""
    return _parse(parser(schema), text, where)


def _parse(parse: Callable[[str], Any], text: str, where: str) -> Any:
    try:
        return parse(text)
    except (ValueError, InvalidOperation) as exc:
        raise ConnectException(f"{where}: value {text!r} cannot be carried: {exc}") from None


def _decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError("is not a finite number")
    return value


def _timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError("is not in bytea hex format")
    return bytes.fromhex(text[2:])


_INTEGERS = (FieldType.INT8, FieldType.INT16, FieldType.INT32, FieldType.INT64)


def parser(schema: Schema) -> Callable[[str], Any]:
    """The function that parses a column's text into values of `schema` (chosen once per
    column, not per value: this is the per-value hot path)."""
    by_logical = {
        Logical.DECIMAL: _decimal,
        Logical.DATE: date.fromisoformat,
        Logical.TIME: dtime.fromisoformat,
        Logical.TIMESTAMP: _timestamp,
    }
    if schema.logical in by_logical:
        return by_logical[schema.logical]
    if schema.type in _INTEGERS:
        return int
    if schema.type in (FieldType.FLOAT32, FieldType.FLOAT64):
        return float
    if schema.type is FieldType.BOOLEAN:
        return lambda text: text in ("t", "true")  # pgoutput sends t/f, a ::text cast true/false
    if schema.type is FieldType.BYTES:
        return _bytea
    return str


class _Table(CdcTable):
    """A captured table whose values come as PostgreSQL's text output."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.parsers = {n: parser(s) for n, s in self.columns}
        self.types = {n: tuple(t) for n, t in data.get("types", {}).items()}

    def row(self, values: dict[str, object], where: str, *, partial: bool) -> dict[str, Any]:
        """A tuple's text values as the row struct; `partial`: missing columns are null."""
        self.check_columns(values, where, partial=partial)
        out: dict[str, Any] = {}
        for name, schema in self.columns:
            if name not in values:
                out[name] = None
                continue
            text = values[name]
            if text is None or text is UNCHANGED:
                out[name] = text
            else:
                try:
                    out[name] = self.parsers[name](text)
                except (ValueError, InvalidOperation):
                    out[name] = parse_value(str(text), schema, f"{where}, column {name!r}")
        return out


class PostgresCdcSourceConnector(CdcSourceConnector):
    """Captures the changes of PostgreSQL tables from a logical replication slot (`pgoutput`).

    Delivery: exactly-once into the topic (positions are LSNs; the slot is advanced only after
    the micro-batch committed). Unit of parallelism: one task per slot.
    """

    config_def = POSTGRES_CONFIG
    offset_counts = ("lsn",)

    def jdbc_url(self, values: Mapping[str, Any]) -> str | None:
        host = values["database.hostname"]
        if not values["connection.url"] and not host:
            raise ConfigException(
                "connection.url", "set connection.url or database.hostname (+ database.dbname)"
            )
        if not values["connection.url"] and not values["database.dbname"]:
            raise ConfigException("database.dbname", "required with database.hostname")
        return f"jdbc:postgresql://{host}:{values['database.port']}/{values['database.dbname']}"

    def check(
        self, db: Any, conn: Any, values: Mapping[str, Any], keys: TypedKeys
    ) -> list[dict[str, Any]]:
        return _check(db, conn, values, keys)

    def prepare(self, db: Any, conn: Any, values: Mapping[str, Any]) -> None:
        _prepare(db, conn, values, [TableName.parse(t["table"]) for t in self.tables])

    def task_plan(self) -> dict[str, Any]:
        return {"slot": self.values["slot.name"], "publication": self.values["publication.name"]}


def _check(db: Any, conn: Any, values: Mapping[str, Any], keys: TypedKeys) -> list[dict[str, Any]]:
    """Check the server, the user's rights, the publication and slot if they exist, and describe
    the tables (nothing is changed on the server)."""

    def one(sql: str, *params: Any) -> Any:
        return conn.exec_driver_sql(sql, params).scalar()

    wal_level = one("SHOW wal_level")
    if wal_level != "logical":
        raise ConfigException(
            keys.server,
            f"{db.describe()}: wal_level is {wal_level!r}; change data capture needs "
            "wal_level=logical",
            suggestion="set wal_level = logical in postgresql.conf and restart PostgreSQL",
        )
    can_replicate = one(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    )
    if not can_replicate:
        user = one("SELECT current_user")
        raise ConfigException(
            keys.user,
            f"{db.describe()}: user {user!r} has no REPLICATION privilege, which a logical "
            "replication slot needs",
            suggestion=f'ALTER ROLE "{user}" REPLICATION',
        )
    publication, slot = values["publication.name"], values["slot.name"]
    include = [TableName.parse(t) for t in values["table.include.list"]]
    exclude = {str(_qualified(db, conn, TableName.parse(t))) for t in values["table.exclude.list"]}
    published = conn.exec_driver_sql(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (publication,)
    ).fetchall()
    exists = one("SELECT count(*) FROM pg_publication WHERE pubname = %s", publication)
    if not include:
        include = [TableName(s, t) for s, t in published] if exists else db.tables(conn)
    tables = [_qualified(db, conn, t) for t in include]
    tables = [t for t in tables if str(t) not in exclude]
    if not tables:
        raise ConfigException("table.include.list", "no table to capture")
    described = []
    for table in tables:
        described.append(
            {
                **describe_table(
                    db, conn, table, values["topic.prefix"], values["topic.delimiter"]
                ),
                "types": _column_types(conn, db.dialect.table(table)),
            }
        )
    if exists:
        have = {f"{s}.{t}" for s, t in published}
        all_tables = one("SELECT puballtables FROM pg_publication WHERE pubname = %s", publication)
        missing = [str(t) for t in tables if str(t) not in have]
        if missing and not all_tables:
            raise ConfigException(
                "publication.name",
                f"publication {publication!r} does not publish {', '.join(missing)}",
                suggestion=f"ALTER PUBLICATION {publication} ADD TABLE {', '.join(missing)}, "
                "or name another publication.name",
            )
    plugin = one("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", slot)
    if plugin is not None and plugin != "pgoutput":
        raise ConfigException(
            "slot.name",
            f"replication slot {slot!r} exists with plugin {plugin!r}; this connector needs "
            "'pgoutput'",
            suggestion="name another slot.name, or drop that slot",
        )
    if plugin is None:
        used = one("SELECT count(*) FROM pg_replication_slots")
        most = one("SELECT setting::int FROM pg_settings WHERE name = 'max_replication_slots'")
        if most is not None and used >= most:
            raise ConfigException(
                "slot.name",
                f"{db.describe()} has no free replication slot for {slot!r} ({used} of "
                f"max_replication_slots={most} in use)",
                suggestion="drop a slot nobody reads (pg_drop_replication_slot), or raise "
                "max_replication_slots and restart PostgreSQL",
            )
    return described


def _prepare(db: Any, conn: Any, values: Mapping[str, Any], tables: list[TableName]) -> None:
    """Create the publication and the slot if missing (an invalidated slot is created again
    under `snapshot.mode=when_needed`)."""

    def one(sql: str, *params: Any) -> Any:
        return conn.exec_driver_sql(sql, params).scalar()

    publication, slot = values["publication.name"], values["slot.name"]
    if not one("SELECT count(*) FROM pg_publication WHERE pubname = %s", publication):
        names = ", ".join(db.dialect.table(t) for t in tables)
        conn.exec_driver_sql(
            f"CREATE PUBLICATION {db.dialect.quote(publication)} FOR TABLE {names}"
        )
    conn.commit()  # a slot cannot be created in a transaction that wrote (the publication)
    plugin = one("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", slot)
    status = one("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", slot)
    if status == "lost" and values["snapshot.mode"] == "when_needed":
        log.warning(
            "replication slot %s was invalidated (max_slot_wal_keep_size); snapshot.mode="
            "when_needed: creating it again and snapshotting the tables again",
            slot,
        )
        conn.exec_driver_sql("SELECT pg_drop_replication_slot(%s)", (slot,))
        plugin = None
    if plugin is None:
        try:
            conn.exec_driver_sql(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)
            )
        except Exception as exc:
            raise ConnectException(
                f"cannot create replication slot {slot!r} on {db.describe()}: {sql_error(exc)}"
            ) from None


def _column_types(conn: Any, quoted: str) -> dict[str, list[int]]:
    """Each column's type oid and typmod, as pgoutput's relation messages carry them."""
    rows = conn.exec_driver_sql(
        "SELECT attname, atttypid::int, atttypmod FROM pg_attribute WHERE attrelid = "
        "%s::regclass AND attnum > 0 AND NOT attisdropped",
        (quoted,),
    ).fetchall()
    return {str(name): [int(oid), int(mod)] for name, oid, mod in rows}


def _qualified(db: Any, conn: Any, table: TableName) -> TableName:
    return table if table.schema else TableName(db.current_schema(conn), table.name)


class PostgresCdcSourceTask(CdcTask):
    """Reads committed transactions from the slot between two LSNs, and the snapshot's chunks
    (see the module docstring and `sluice.connectors.cdc._snapshot`)."""

    connector_name = "postgresql"
    table_class = _Table
    tables: dict[str, _Table]

    def configure(self, plan: dict[str, Any]) -> None:
        self.slot: str = plan["slot"]
        self.publication: str = plan["publication"]
        self._end: int | None = None

    def source(self, table: CdcTable, **known: Any) -> dict[str, Any]:
        # PostgreSQL: the database is the connection's, the table's space is its schema
        database = self.connection.database
        return source_block(
            self.connector_name, self.prefix, database, table.short, schema=table.space, **known
        )

    # -- the slot ------------------------------------------------------------------------------
    def _peek(self, upto_lsn: int) -> list[Any]:
        """Every message of the slot up to the transaction ending at `upto_lsn`."""
        return self._peek_select(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (self.slot, lsn_text(upto_lsn), self.publication),
        )

    def _peek_select(self, sql: str, params: tuple) -> list[Any]:
        """Run a peek at the slot (waits while another session has the slot, e.g. a killed
        worker's query that the server has not ended yet)."""
        deadline = time.monotonic() + _SLOT_BUSY_WAIT_S
        while True:
            try:
                with self.db.connect() as conn:
                    self._check_slot(conn)
                    return conn.exec_driver_sql(sql, params).fetchall()
            except ConnectException:
                raise
            except Exception as exc:
                if _sqlstate(exc) == _OBJECT_IN_USE and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if self.lost_connection(exc):
                    raise self.unreachable(exc, f"reading replication slot {self.slot!r}") from None
                raise ConnectException(
                    f"reading replication slot {self.slot!r} on {self.db.describe()}: "
                    f"{sql_error(exc)}"
                ) from None

    def _check_slot(self, conn: Any) -> int:
        row = conn.exec_driver_sql(
            "SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        if row is None:
            raise ConnectException(
                f"replication slot {self.slot!r} does not exist on {self.db.describe()} any "
                "more: the changes since the last committed position are gone",
                suggestion="restart the connector with reset offsets to create a new slot",
            )
        if row[1] == "lost":
            raise ConnectException(
                f"replication slot {self.slot!r} was invalidated (its WAL exceeded "
                "max_slot_wal_keep_size): changes were lost",
            )
        return lsn_int(row[0])

    def stream_latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        # Every table gets the same end LSN in one planning round (one peek per round), so a
        # transaction's rows share a micro-batch. A table asked twice starts a new round.
        name = partition["table"]
        if name in self._asked or not self._asked:
            self._asked = set()
            self._end = self._next_end(start["lsn"] if start else 0, limit.max_rows)
        self._asked.add(name)
        if self._end is None or (start is not None and start["lsn"] >= self._end):
            return start
        return {"lsn": self._end}

    def _confirmed(self) -> int:
        with self.db.connect() as conn:
            return self._check_slot(conn)

    def stream_origin(self) -> RecordOffset:
        return {"lsn": self._confirmed()}

    log_end = stream_origin  # a new slot's position: where its changes start

    def position_lost(self, start: RecordOffset) -> str | None:
        with self.db.connect() as conn:
            try:
                confirmed = self._check_slot(conn)
            except ConnectException as exc:
                return exc.message
        if start["lsn"] >= confirmed:
            return None
        return (
            f"replication slot {self.slot!r} is at {lsn_text(confirmed)}, past the stored "
            f"position {lsn_text(start['lsn'])} (the slot was dropped and created again, or "
            "consumed elsewhere)"
        )

    def log_advances(self, start: RecordOffset | None, end: RecordOffset) -> bool:
        return start is None or end["lsn"] > start["lsn"]

    def log_before(self, a: RecordOffset, b: RecordOffset) -> bool:
        return int(a["lsn"]) < int(b["lsn"])

    def log_now(self) -> RecordOffset:
        with self.db.connect() as conn:
            return {"lsn": self._high_watermark(conn)}

    def jump(self, here: RecordOffset, since: RecordOffset) -> RecordOffset | None:
        # Decoding reads flushed WAL only: first the flush, then a peek that sees every commit
        # up to `since`.
        with self.db.connect() as conn:
            flushed = conn.exec_driver_sql(
                "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (lsn_text(since["lsn"]),)
            ).scalar()
        if not flushed:
            return None
        rows = self._peek_select(
            "SELECT substr(data, 1, 26) FROM pg_logical_slot_peek_binary_changes(%s, "
            "%s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %s) "
            "WHERE get_byte(data, 0) = 67",
            (self.slot, lsn_text(since["lsn"]), self.publication),
        )
        if any(here["lsn"] < commit_end(bytes(data)) <= since["lsn"] for (data,) in rows):
            return None
        return {"lsn": since["lsn"]}

    def _next_end(self, begin: int, budget: int | None) -> int | None:
        """The end LSN of the last transaction after `begin` that keeps the changes after `begin`
        within `budget` (at least one transaction), or None if none committed after `begin`.
        A range ends before a transaction whose rows have another shape than the connector's
        schema (`sluice.connectors.cdc._evolve`); a range starting at one raises."""
        # Peek at the message types only (whole commit and relation messages: the end LSN, the
        # columns). The slot may still hold the last micro-batch's changes (it is advanced when
        # Spark plans the next one), so a window that ends before `begin` is widened.
        window = None if budget is None else max(budget * 2, 1000)
        while True:
            rows = self._peek_types(window)
            end, changes, pending, change = None, 0, 0, None
            for (data,) in rows:
                kind = bytes(data[:1])
                if kind in (b"I", b"U", b"D"):
                    pending += 1
                elif kind == b"R":
                    change = change or self._shape_change(relation_of(bytes(data)))
                elif kind == b"C":
                    lsn = commit_end(bytes(data))
                    if lsn > begin:
                        if change is not None:
                            if end is None:
                                self._follow(*change)
                            return end
                        if end is not None and budget is not None and changes + pending > budget:
                            break
                        changes, end = changes + pending, lsn
                    pending, change = 0, None
            if end is not None or window is None or len(rows) < window:
                return end
            window *= 4

    def _shape_change(self, relation: Relation) -> tuple[_Table, str] | None:
        """(table, change) if rows logged with `relation`'s columns do not fit the connector's
        schema of that table (a `ConnectException` if the change cannot be followed)."""
        table = self.tables.get(f"{relation.schema}.{relation.name}")
        if table is None:
            return None
        logged = dict(zip(relation.columns, relation.types, strict=True))
        change = verdict(table.name, table.columns, table.pk, relation.columns, table.types, logged)
        return None if change is None else (table, change)

    def _follow(self, table: _Table, change: str) -> None:
        """At a schema change: restart (after checking the added columns can be carried)."""
        with self.db.connect() as conn:
            check_added(self.db, conn, TableName.parse(table.name), list(table.schemas), change)
        raise SchemaChanged(table.name, change)

    def _peek_types(self, window: int | None) -> list[Any]:
        return self._peek_select(
            "SELECT CASE get_byte(data, 0) WHEN 67 THEN substr(data, 1, 26) WHEN 82 THEN data "
            "ELSE substr(data, 1, 1) END "
            "FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', "
            "'publication_names', %s)",
            (self.slot, window, self.publication),
        )

    lag_unit = "bytes"

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """WAL bytes behind: `pg_current_wal_lsn()` minus the position (the slot's confirmed
        LSN before the first commit). The WAL of the whole server counts, as for any slot."""
        with self.db.connect(attempts=1) as conn:
            confirmed = self._check_slot(conn)
            current = conn.exec_driver_sql("SELECT pg_current_wal_lsn()::text").scalar()
        here = position["lsn"] if position and "lsn" in position else confirmed
        return max(0, lsn_int(current) - int(here))

    def stream_read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[ConnectRecord]:
        table = self.tables[partition["table"]]
        begin, stop = (start or {}).get("lsn", 0), end["lsn"]
        confirmed = self.riding_out(self._confirmed, f"reading replication slot {self.slot!r}")
        # No start: the first range, from wherever the slot is (it was created for this).
        if start is not None and begin < confirmed:
            raise ConnectException(
                f"replication slot {self.slot!r} is at {lsn_text(confirmed)}, past this "
                f"micro-batch's start {lsn_text(begin)}: the changes in between were consumed "
                "elsewhere (another reader of the slot?)",
            )
        yield from self.resuming(
            lambda at: self._transactions(table, at, stop),
            begin,
            f"reading replication slot {self.slot!r} for table {table.name}",
        )

    def _transactions(
        self, table: _Table, begin: int, stop: int
    ) -> Iterator[tuple[int, list[ConnectRecord]]]:
        """The slot's transactions ending in `(begin, stop]`: each one's records of `table`,
        with its end LSN."""
        rows = self._peek(stop)
        for tx in transactions((data for (data,) in rows), after=begin):
            if begin < tx.end_lsn <= stop:
                yield tx.end_lsn, list(self._events(tx, table))

    # -- the snapshot's chunks (executor) --------------------------------------------------------
    def select_chunk(self, table: _Table, query: tuple[str, tuple]) -> pa.StructArray | list[dict]:
        tail, params = query
        with self.db.connect() as conn:
            conn.exec_driver_sql("SET TIME ZONE 'UTC'")
            page = self.page_chunk(conn, table, query)
            if page is None:
                # PostgreSQL's text output, as pgoutput sends it: one parser for both paths
                select = ", ".join(f"{self.db.dialect.quote(n)}::text" for n, _ in table.columns)
                rows = conn.exec_driver_sql(f"SELECT {select}{tail}", params).fetchall()
            conn.commit()
            self._high = self._high_watermark(conn)
        if page is not None:
            return page
        names = [n for n, _ in table.columns]
        where = f"table {table.name}, snapshot"
        return [table.row(dict(zip(names, row, strict=True)), where, partial=False) for row in rows]

    def _high_watermark(self, conn: Any) -> int:
        """The log's position after the chunk's SELECT, flushed: every commit the SELECT saw
        lies before it, and decoding (which reads flushed WAL only) reaches it. Written as
        DBLog does, a watermark in the log: a logical decoding message (which no pgoutput
        subscriber without `messages` receives) in a transaction committed with
        `synchronous_commit=on`, so its commit returns once the WAL up to it is flushed. Waiting
        for the WAL writer instead (`synchronous_commit=off`) can take seconds when nothing else
        commits: it hibernates."""
        try:
            conn.exec_driver_sql("SET LOCAL synchronous_commit = on")
            high = conn.exec_driver_sql(
                "SELECT pg_logical_emit_message(true, 'sluice.watermark', '')::text"
            ).scalar()
            conn.commit()
            return lsn_int(high)
        except Exception as exc:
            if self.lost_connection(exc):
                raise
            conn.rollback()  # no right to write a message: wait for the WAL writer's flush
        high = conn.exec_driver_sql(_INSERT_LSN).scalar()
        deadline = time.monotonic() + _FLUSH_WAIT_S
        while not conn.exec_driver_sql(
            "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (high,)
        ).scalar():
            if time.monotonic() > deadline:
                raise ConnectException(
                    f"{self.db.describe()}: WAL up to {high} was not flushed within "
                    f"{_FLUSH_WAIT_S:.0f} s, so a snapshot chunk cannot be reconciled with "
                    "the log",
                )
            time.sleep(0.01)
        return lsn_int(high)

    def touched_keys(self, table: _Table, low: RecordOffset) -> set[str]:
        keys: set[str] = set()
        where = f"table {table.name}, snapshot watermark"
        for tx in transactions((data for (data,) in self._peek(self._high)), after=low["lsn"]):
            if tx.end_lsn <= low["lsn"]:
                continue
            for change in tx.changes:
                if change.relation.schema != table.space or change.relation.name != table.short:
                    continue
                for image in (change.before, change.after):
                    if image is not None:
                        pk = {k: image.get(k) for k in table.pk}
                        keys.add(key_text(table.row(pk, where, partial=True), table.pk))
        return keys

    def snapshot_source(self, table: _Table, end: RecordOffset) -> dict[str, Any]:
        return self.source(table, lsn=end["lsn"])

    def _events(self, tx: Transaction, table: _Table) -> Iterator[ConnectRecord]:
        for relation in tx.truncated:
            if f"{relation.schema}.{relation.name}" == table.name:
                raise ConnectException(
                    f"table {table.name} was truncated (transaction {tx.xid}, LSN "
                    f"{lsn_text(tx.end_lsn)}); a TRUNCATE has no per-row change events",
                    suggestion="re-copy the table and restart the connector with reset offsets",
                )
        source = self.source(table, ts_ms=tx.commit_us // 1000, txId=tx.xid, lsn=tx.end_lsn)
        ts = datetime.fromtimestamp(tx.commit_us / 1e6, UTC)
        at = (source, ts, int(time.time() * 1000))
        where = f"table {table.name}, LSN {lsn_text(tx.end_lsn)}"  # once per transaction
        for change in tx.changes:
            if change.relation.schema != table.space or change.relation.name != table.short:
                continue
            before, after = self._images(change, table, where)
            yield from self.change_records(table, change.op, before, after, at)

    def _images(self, change: Change, table: _Table, where: str) -> tuple[Any, Any]:
        """A change's before and after rows; the after image's unchanged TOASTed values are
        taken from the before image."""
        before = (
            table.row(change.before, where, partial=True) if change.before is not None else None
        )
        after = table.row(change.after, where, partial=False) if change.after else None
        if after is not None:
            for column, value in after.items():
                if value is UNCHANGED:
                    old = None if before is None or change.key_only else before.get(column)
                    if old is None or old is UNCHANGED:
                        raise ConnectException(
                            f"{where}: the update did not carry column {column!r} (an unchanged "
                            "TOASTed value) and there is no old row to take it from",
                            suggestion=f"ALTER TABLE {table.name} REPLICA IDENTITY FULL",
                        )
                    after[column] = old
        return before, after

    def commit(self, positions: list[tuple[RecordPartition, RecordOffset]]) -> None:
        # Release WAL only up to what every table has committed (the stored positions; one
        # Spark query may commit tables in separate branches).
        stored = self.context.offset_storage_reader.offsets(self.partitions())
        if any(o is None or "lsn" not in o for o in stored):
            return
        upto = min(o["lsn"] for o in stored if o is not None)
        try:
            with self.db.connect() as conn:
                if upto > self._check_slot(conn):
                    conn.exec_driver_sql(
                        "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                        (self.slot, lsn_text(upto)),
                    )
                    conn.commit()
        except Exception as exc:  # the next commit advances it; only WAL is kept longer
            log.warning("replication slot %s not advanced to %s: %s", self.slot, upto, exc)


PostgresCdcSourceConnector.task_class = PostgresCdcSourceTask
