"""MySqlCdcSourceConnector: the MySQL/MariaDB row binlog (replication protocol) → a topic per table.

Delivery: **exactly-once into the topic.** A position is a place in the binlog just after a
transaction's commit (`{"file": "mariadb-bin.000013", "pos": 147599}`, plus the GTID of that
transaction on MariaDB as information). `latest` (driver) reads the binlog from the start position
over the replication protocol (`mysql-replication`, non-blocking) up to a byte budget of row events
(`read.max.bytes`, else `read.max.rows` times `ROW_BYTES`; the rows are not decoded there) and
answers the position after the last whole transaction; `read` (executor) reads the same range
again and decodes and emits its rows. The binlog is immutable until purged, so a replayed range
yields the same events. The first micro-batch of a connector without positions is an empty range
ending at the binlog position the connector started at (capture starts there; with
`snapshot.mode=initial`, the default, the tables' existing rows are read first, chunk by chunk
while the binlog streams: `sluice.connectors.cdc._snapshot`).

A binlog purged under a stopped connector (`binlog_expire_logs_seconds`, `PURGE BINARY LOGS`)
fails the task naming the missing file and position: never a silent gap. The binlog is not held
back for the connector (MySQL has no slots): keep the expiry longer than any stop.

Keys: `connection.url` (`jdbc:mysql://host:port/db`, `jdbc:mariadb://…`) or `database.hostname`,
`database.port` (3306), `database.user`, `database.password`; `database.server.id` (the replica
id this reader uses, distinct from every server and other reader; default 5400 + a hash of the
connector name); `topic.prefix` (required; topics `<prefix>.<database>.<table>`),
`table.include.list` (`database.table`, comma-separated, required), `table.exclude.list`,
`snapshot.mode` (`initial` | `when_needed` | `never`).

The server needs `log_bin=ON`, `binlog_format=ROW`, `binlog_row_image=FULL` and
`binlog_row_metadata=FULL` (column names and signedness in the binlog), and the user the
REPLICATION SLAVE and REPLICATION CLIENT (MariaDB: BINLOG MONITOR) privileges; each is checked at
start with a message naming it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sluice.connectors._sql.names import TableName
from sluice.connectors.cdc._base import CdcSourceConnector, CdcTable, CdcTask, sql_error
from sluice.connectors.cdc._config import MYSQL_CONFIG, TypedKeys
from sluice.connectors.cdc._envelope import describe_table, key_text
from sluice.connectors.cdc._evolve import SchemaChanged, check_added, ddl_kind
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
from sluice.sdk.extras import MYSQL_BINLOG, require

log = logging.getLogger(__name__)

#: Binlog bytes per row when a range's budget is `read.max.rows` (ranges are sized by bytes).
ROW_BYTES = 100

_REQUIRED_SETTINGS = {
    "log_bin": ("ON", "log_bin (the binary log) is off", "start the server with log_bin"),
    "binlog_format": ("ROW", "binlog_format is {v}", "SET GLOBAL binlog_format = 'ROW'"),
    "binlog_row_image": ("FULL", "binlog_row_image is {v}", "SET GLOBAL binlog_row_image = 'FULL'"),
    "binlog_row_metadata": (
        "FULL",
        "binlog_row_metadata is {v} (the binlog then lacks column names and signedness)",
        "SET GLOBAL binlog_row_metadata = 'FULL'",
    ),
}


def _file_number(name: str) -> int:
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else 0


def _after(a: RecordOffset, b: RecordOffset) -> bool:
    """True if position `a` lies after `b`."""
    return (_file_number(a["file"]), a["pos"]) > (_file_number(b["file"]), b["pos"])


def to_schema_value(value: Any, schema: Schema, where: str) -> Any:
    """A value as mysql-replication decodes it → the value of `schema`."""
    if value is None:
        return None
    if schema.logical is Logical.TIME:
        if isinstance(value, timedelta):
            micros = value // timedelta(microseconds=1)
            if not 0 <= micros < 86_400_000_000:
                raise ConnectException(f"{where}: TIME {value} is outside a day")
            return (datetime.min + value).time()
        return value
    if schema.logical is Logical.TIMESTAMP:
        if not isinstance(value, datetime):
            raise ConnectException(f"{where}: {value!r} is not a valid date/time")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if schema.logical is Logical.DATE:
        if not isinstance(value, date):
            raise ConnectException(f"{where}: {value!r} is not a valid date")
        return value
    if schema.logical is Logical.DECIMAL:
        return Decimal(value)
    if schema.type is FieldType.BOOLEAN:
        if isinstance(value, (bytes, bytearray)):
            return int.from_bytes(value, "big") != 0
        return bool(int(value))
    if schema.type is FieldType.STRING:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8")
        if isinstance(value, set):
            return ",".join(sorted(value))
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return str(value)
    if schema.type is FieldType.BYTES:
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, int):  # BIT(n > 1)
            return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
        return bytes(value)
    return value


class MySqlCdcSourceConnector(CdcSourceConnector):
    """Captures the changes of MySQL/MariaDB tables from the row binlog.

    Delivery: exactly-once into the topic (positions are binlog file + position, re-readable until
    the binlog is purged). Unit of parallelism: one task reads the binlog.
    """

    config_def = MYSQL_CONFIG
    offset_counts = ("pos",)
    requires = (MYSQL_BINLOG,)

    def offset_problem(self, partition: RecordPartition, offset: RecordOffset) -> str | None:
        if not isinstance(offset.get("file"), str) or not offset["file"]:
            return f"'file' must name a binlog file, got {offset.get('file')!r}"
        return super().offset_problem(partition, offset)

    def jdbc_url(self, values: Mapping[str, Any]) -> str | None:
        host = values["database.hostname"]
        return f"jdbc:mysql://{host}:{values['database.port']}/" if host else None

    def check_values(self, values: Mapping[str, Any]) -> None:
        super().check_values(values)
        if not values["table.include.list"]:
            raise ConfigException("table.include.list", "names no table")

    def check(
        self, db: Any, conn: Any, values: Mapping[str, Any], keys: TypedKeys
    ) -> list[dict[str, Any]]:
        tables, self.initial = _setup(db, conn, values, keys)
        return tables

    def prepare(self, db: Any, conn: Any, values: Mapping[str, Any]) -> None:
        server_id = values["database.server.id"]
        if server_id is None:
            name = self.config.get("name", values["topic.prefix"])
            server_id = 5400 + zlib.crc32(name.encode()) % 100_000
        self.server_id = server_id

    def task_plan(self) -> dict[str, Any]:
        return {"server_id": self.server_id, "initial": self.initial}


def _setup(
    db: Any, conn: Any, values: Mapping[str, Any], keys: TypedKeys
) -> tuple[list[dict[str, Any]], dict]:
    """Check the server's binlog settings and the user's rights, describe the tables, and
    return them with the binlog position now (nothing is changed on the server)."""
    settings = dict(
        conn.exec_driver_sql(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')"
        ).fetchall()
    )
    for name, (want, problem, fix) in _REQUIRED_SETTINGS.items():
        have = str(settings.get(name, "")).upper()
        if have != want:
            raise ConfigException(
                keys.server,
                f"{db.describe()}: {problem.format(v=have or 'unset')}; change data capture "
                f"needs {name}={want}",
                suggestion=fix,
            )
    # The position first, then the columns: every DDL before it is in what is described
    # (`sluice.connectors.cdc._evolve`).
    try:
        status = conn.exec_driver_sql("SHOW MASTER STATUS").fetchone()
    except Exception as exc:
        raise ConfigException(
            keys.user,
            f"{db.describe()}: the user cannot read the binlog status ({sql_error(exc)}); "
            "change data capture needs the REPLICATION SLAVE and REPLICATION CLIENT (MariaDB: "
            "BINLOG MONITOR) privileges",
            suggestion="GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user",
        ) from None
    if status is None:
        raise ConfigException(
            keys.server, f"{db.describe()}: SHOW MASTER STATUS is empty (binlog off?)"
        )
    grants = " ".join(str(r[0]) for r in conn.exec_driver_sql("SHOW GRANTS").fetchall()).upper()
    if "ALL PRIVILEGES ON *.*" not in grants and "REPLICATION SLAVE" not in grants:
        raise ConfigException(
            keys.user,
            f"{db.describe()}: the user has no REPLICATION SLAVE privilege, which reading the "
            "binlog needs",
            suggestion="GRANT REPLICATION SLAVE ON *.* TO the user",
        )
    exclude = {t.strip() for t in values["table.exclude.list"]}
    described = []
    for text in values["table.include.list"]:
        table = TableName.parse(text)
        if not table.schema:
            raise ConfigException(
                "table.include.list", f"{text!r}: name the database too (database.table)"
            )
        if str(table) in exclude:
            continue
        described.append(
            describe_table(db, conn, table, values["topic.prefix"], values["topic.delimiter"])
        )
    if not described:
        raise ConfigException("table.include.list", "no table to capture")
    return described, {"file": status[0], "pos": int(status[1])}


class _Table(CdcTable):
    """A captured table whose rows come as mysql-replication decodes them."""

    def key(self, values: dict[str, Any], where: str) -> str:
        """The record key of a binlog row (its key columns only: a watermark window may hold
        rows logged after a later ADD COLUMN)."""
        return key_text(
            {k: to_schema_value(values.get(k), self.schemas[k], where) for k in self.pk}, self.pk
        )

    def row(self, values: dict[str, Any], where: str) -> dict[str, Any]:
        """A binlog or snapshot row as the row struct."""
        self.check_columns(values, where)
        return {
            name: to_schema_value(values.get(name), schema, f"{where}, column {name!r}")
            for name, schema in self.columns
        }


class MySqlCdcSourceTask(CdcTask):
    """Reads whole transactions from the binlog between two positions, and the snapshot's
    chunks (module docstring, `sluice.connectors.cdc._snapshot`)."""

    connector_name = "mysql"
    table_class = _Table
    tables: dict[str, _Table]

    def configure(self, plan: dict[str, Any]) -> None:
        self.server_id: int = plan["server_id"]
        self.initial: dict = plan["initial"]
        self._end: dict | None = None
        self._control: Any = None  # the connection `SHOW BINARY LOGS` runs on

    def _stream(self, start: dict, *, rows: bool) -> Any:
        require(MYSQL_BINLOG, "MySqlCdcSourceConnector")
        from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        self._check_position(start)
        events = [XidEvent, QueryEvent, MariadbGtidEvent]
        if rows:
            events += [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]
        c = self.connection
        return _reader_class()(
            connection_settings={
                "host": c.host,
                "port": c.port or 3306,
                "user": c.user,
                "passwd": c.password,
            },
            server_id=self.server_id,
            resume_stream=True,
            blocking=False,
            log_file=start["file"],
            log_pos=start["pos"],
            only_events=events,
            only_schemas=sorted({t.split(".", 1)[0] for t in self.tables}) if rows else None,
            # table maps of the captured tables only, each parsed once (see `_reader_class`)
            only_tables=sorted({t.split(".", 1)[1] for t in self.tables}) if rows else None,
            freeze_schema=True,
            # File + position mode: mysql-replication's MariaDB mode starts from a GTID state
            # and ignores log_file/log_pos; MariaDB serves the MySQL dump command as well and,
            # with the capability the library announces, still sends its GTID events.
            is_mariadb=False,
            enable_logging=False,
            pymysql_wrapper=_connection_class(),
        )

    def _binary_logs(self) -> list[tuple[str, int]]:
        """`SHOW BINARY LOGS`: each binlog's name and size (the last one's is the end), on a
        connection kept for the task's next calls (a driver plans every micro-batch)."""
        import pymysql

        c = self.connection
        try:
            if self._control is None:
                self._control = _connection_class()(
                    host=c.host,
                    port=c.port or 3306,
                    user=c.user,
                    password=c.password,
                    connect_timeout=10,
                    autocommit=True,
                )
            with self._control.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                return [(r[0], int(r[1])) for r in cur.fetchall()]
        except pymysql.MySQLError as exc:
            self._close_control()
            if self.lost_connection(exc):
                raise self.unreachable(exc, "listing the binlogs") from None
            raise ConnectException(f"listing the binlogs of {c.describe()}: {exc}") from None
        except BaseException:
            self._close_control()
            raise

    def _close_control(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(Exception):
                control.close()

    def stop(self) -> None:
        self._close_control()

    def _check_position(self, start: dict) -> None:
        lost = self.position_lost(start)
        if lost is not None:
            raise ConnectException(
                f"{lost}, so the changes since that position are lost",
                suggestion="set snapshot.mode=when_needed to snapshot the tables again, or "
                "re-copy them and reset the connector's offsets",
            )

    def position_lost(self, start: RecordOffset) -> str | None:
        files = [name for name, _ in self._binary_logs()]
        if start["file"] in files:
            return None
        return (
            f"binlog {start['file']} (position {start['pos']}) is no longer on "
            f"{self.connection.describe()} (the oldest is {files[0] if files else 'none'}): it "
            "was purged while the connector was behind"
        )

    def log_end(self) -> RecordOffset:
        name, size = self._binary_logs()[-1]
        return {"file": name, "pos": size}

    def _boundaries(self, start: dict, limit: ReadLimit) -> dict | None:
        """The position after the last whole transaction within the range's byte budget from
        `start` (row events' binlog bytes: `read.max.bytes`, else `read.max.rows` times
        `ROW_BYTES`). Sized by bytes so that rows are not decoded here: `read` decodes them,
        once."""
        from pymysqlreplication.event import QueryEvent, XidEvent

        budget = limit.max_bytes
        if budget is None and limit.max_rows is not None:
            budget = limit.max_rows * ROW_BYTES
        stream = self._stream(start, rows=budget is not None)
        end, size = None, 0
        try:
            for event in stream:
                if isinstance(event, XidEvent) or (
                    isinstance(event, QueryEvent) and _ends_transaction(event)
                ):
                    here = {"file": stream.log_file, "pos": stream.log_pos}
                    change = self._ddl_change(event)
                    if change is not None:  # a range never spans a schema change
                        if end is None:
                            self._follow(*change)
                        break
                    end = here
                    if budget is not None and size >= budget:
                        break
                else:  # a row event, not decoded: its size counts
                    size += event.event_size
        finally:
            stream.close()
        return end

    def stream_latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        if start is None:
            return dict(self.initial)  # the first range is empty: capture starts here
        name = partition["table"]
        if self._end is None or name in self._asked:
            self._asked, self._end = set(), None
            self._end = self._boundaries(start, limit) or start
        self._asked.add(name)
        return self._end if _after(self._end, start) else start

    lag_unit = "bytes"

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Binlog bytes after the position: the rest of its file plus every later file (one
        `SHOW BINARY LOGS`). None when the position's file was purged (the task names that)."""
        here = position or self.initial
        logs = self._binary_logs()
        names = [name for name, _ in logs]
        if here["file"] not in names:
            return None
        at = names.index(here["file"])
        return max(0, sum(size for _, size in logs[at:]) - int(here["pos"]))

    def stream_origin(self) -> RecordOffset:
        return dict(self.initial)

    def log_advances(self, start: RecordOffset | None, end: RecordOffset) -> bool:
        return start is not None and _after(end, start)

    def log_before(self, a: RecordOffset, b: RecordOffset) -> bool:
        return _after(b, a)

    log_now = log_end

    def jump(self, here: RecordOffset, since: RecordOffset) -> RecordOffset | None:
        from pymysqlreplication.event import QueryEvent, XidEvent

        stream = self._stream(here, rows=False)
        try:
            for event in stream:
                if isinstance(event, XidEvent) or (
                    isinstance(event, QueryEvent) and _ends_transaction(event)
                ):
                    at = {"file": stream.log_file, "pos": stream.log_pos}
                    return None if not _after(at, since) else dict(since)
        finally:
            stream.close()
        return dict(since)

    def stream_read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[ConnectRecord]:
        if start is None:
            return
        table = self.tables[partition["table"]]
        yield from self.resuming(
            lambda at: self._transactions(table, at, end),
            {k: start[k] for k in ("file", "pos")},
            f"reading the binlog for table {table.name}",
        )

    def _transactions(
        self, table: _Table, start: dict, end: RecordOffset
    ) -> Iterator[tuple[dict, list[ConnectRecord]]]:
        """The binlog from `start` to `end`: each whole transaction's records of `table`, with
        the position after it."""
        from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent

        stream = self._stream(start, rows=True)
        pending: list[ConnectRecord] = []
        gtid = None
        try:
            for event in stream:
                if isinstance(event, MariadbGtidEvent):
                    gtid = event.gtid
                    continue
                if isinstance(event, (XidEvent, QueryEvent)):
                    if isinstance(event, QueryEvent) and not _ends_transaction(event):
                        continue
                    here = {"file": stream.log_file, "pos": stream.log_pos}
                    if _after(here, end):
                        break  # an end that is no transaction's (`jump`): nothing more is in
                    change = self._ddl_change(event)
                    if change is not None:  # `latest` ends ranges before such a change
                        self._follow(*change)
                    for record in pending:
                        record.value["source"].update(pos=here["pos"], file=here["file"])
                    yield here, pending
                    pending = []
                    if not _after(end, here):
                        break
                    continue
                if event.schema != table.space or event.table != table.short:
                    continue
                pending.extend(self._events(event, table, gtid))
        finally:
            stream.close()

    # -- the snapshot's chunks (executor) --------------------------------------------------------
    def select_chunk(self, table: _Table, query: tuple[str, tuple]) -> pa.StructArray | list[dict]:
        tail, params = query
        with self.db.connect() as conn:
            page = self.page_chunk(conn, table, query)
            if page is not None:
                return page
            select = ", ".join(self.db.dialect.quote(n) for n, _ in table.columns)
            rows = conn.exec_driver_sql(f"SELECT {select}{tail}", params).fetchall()
        names = [n for n, _ in table.columns]
        where = f"table {table.name}, snapshot"
        return [table.row(dict(zip(names, row, strict=True)), where) for row in rows]

    def touched_keys(self, table: _Table, low: RecordOffset) -> set[str]:
        # From the low watermark to the binlog's end now (non-blocking): past the SELECT.
        keys: set[str] = set()
        where = f"table {table.name}, snapshot watermark"
        stream = self._stream(low, rows=True)
        try:
            for event in stream:
                if (
                    getattr(event, "schema", None) != table.space
                    or getattr(event, "table", "") != table.short
                ):
                    continue
                for row in getattr(event, "rows", ()):
                    for image in ("values", "before_values", "after_values"):
                        if image in row:
                            keys.add(table.key(row[image], where))
        finally:
            stream.close()
        return keys

    def snapshot_source(self, table: _Table, end: RecordOffset) -> dict[str, Any]:
        return self.source(table, file=end["file"], pos=end["pos"])

    def _ddl_change(self, event: Any) -> tuple[_Table, str, str] | None:
        """(table, kind, statement) of a DDL statement on a captured table that the connector
        must act on: one it does not follow (it fails), or an ADD COLUMN of columns its schema
        lacks (it restarts). An ADD COLUMN its schema already has — logged before the connector
        read the table's columns, while it was stopped — needs nothing here: the re-read a
        default calls for comes from the position's columns (`sluice.connectors.cdc._snapshot`)."""
        if not hasattr(event, "query"):
            return None
        query = _query_text(event)
        db = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        for table in self.tables.values():
            kind = ddl_kind(query, db, table.name)
            if kind == "other":
                return table, kind, query.strip()[:300]
            if kind == "add" and (added := self._added(table, query)):
                return table, kind, f"ADD COLUMN {', '.join(added)} ({query.strip()[:300]})"
        return None

    def _added(self, table: _Table, query: str) -> list[str]:
        """The table's columns now that the connector's schema lacks (checked once per DDL
        statement and table; a failure if one cannot be followed)."""
        with self.db.connect() as conn:
            added, _ = check_added(
                self.db, conn, TableName.parse(table.name), list(table.schemas), query
            )
        return added

    def _follow(self, table: _Table, kind: str, query: str) -> None:
        """At a DDL statement: restart to follow an ADD COLUMN, fail naming anything else."""
        if kind != "add":
            raise ConnectException(
                f"table {table.name} changed under the connector: {query}; the connector "
                "follows ADD COLUMN only",
                suggestion="re-copy the table (TRUNCATE, DROP, a changed column) and restart "
                "the connector with reset offsets",
            )
        raise SchemaChanged(table.name, query)

    def _events(self, event: Any, table: _Table, gtid: str | None) -> Iterator[ConnectRecord]:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        where = f"table {table.name}, binlog position {event.packet.log_pos}"
        # file and pos are filled in at the transaction's commit (`stream_read`)
        source = self.source(table, ts_ms=event.timestamp * 1000, gtid=gtid)
        at = (source, datetime.fromtimestamp(event.timestamp, UTC), int(time.time() * 1000))
        for row in event.rows:
            if isinstance(event, UpdateRowsEvent):
                before = table.row(row["before_values"], where)
                after = table.row(row["after_values"], where)
                yield from self.change_records(table, "u", before, after, at)
            elif isinstance(event, DeleteRowsEvent):
                yield from self.change_records(
                    table, "d", table.row(row["values"], where), None, at
                )
            else:
                yield from self.change_records(
                    table, "c", None, table.row(row["values"], where), at
                )


_CONNECTION_CLASS: Any = None


_READER_CLASS: Any = None


def _reader_class() -> Any:
    """mysql-replication's binlog reader, keeping each table's parsed table map until a DDL
    statement. Every transaction carries a table map of each table it changes, and the reader
    parses each one in pure Python (optional metadata, charsets, one object per column): with
    transactions of 50 rows that was most of the CPU of both `latest` and `read`
    (bench/cdc.py --lag, py-spy). The library's `freeze_schema` keeps the first map of a table id
    instead; a table's id changes when its definition does, and on top of that the map is
    dropped at every DDL statement the reader passes (and the library drops them all at each
    binlog rotation, as after a server restart), so rows are never decoded with an old map."""
    global _READER_CLASS
    if _READER_CLASS is None:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import QueryEvent

        class Reader(BinLogStreamReader):  # type: ignore[misc]
            def fetchone(self) -> Any:
                event = super().fetchone()
                if isinstance(event, QueryEvent) and _is_ddl(event):
                    self.table_map.clear()
                return event

        _READER_CLASS = Reader
    return _READER_CLASS


def _connection_class() -> Any:
    """PyMySQL's connection, with one TLS context per process. PyMySQL 2.2 (in its default
    PREFERRED mode, which tries TLS and falls back) builds a new context for each connection,
    loading every CA certificate of the system: 0.27 s per connection here against 3 ms without,
    and the binlog reader opens two per stream, several streams per micro-batch. The context is
    the one PyMySQL would build; sharing it between connections is what contexts are for."""
    global _CONNECTION_CLASS
    if _CONNECTION_CLASS is None:
        import threading

        import pymysql.connections

        lock = threading.Lock()
        shared: list[Any] = []

        class Connection(pymysql.connections.Connection):  # type: ignore[misc]
            def _create_ssl_ctx(self, sslp: Any) -> Any:
                if sslp:  # options of its own: PyMySQL's context for them
                    return super()._create_ssl_ctx(sslp)
                with lock:
                    if not shared:
                        shared.append(super()._create_ssl_ctx({}))
                    return shared[0]

        _CONNECTION_CLASS = Connection
    return _CONNECTION_CLASS


def _query_text(event: Any) -> str:
    """A query event's statement (bytes or text, as the library gives it)."""
    return event.query.decode() if isinstance(event.query, bytes) else str(event.query)


def _statement(event: Any) -> str:
    """A query event's statement, trimmed and upper-cased, to tell BEGIN, COMMIT and XA apart."""
    return _query_text(event).strip().upper()


def _ends_transaction(event: Any) -> bool:
    """A query event that ends a transaction: COMMIT (non-transactional tables) or DDL."""
    text = _statement(event)
    return text != "BEGIN" and not text.startswith("XA ")


def _is_ddl(event: Any) -> bool:
    """A query event that is no transaction's BEGIN, COMMIT or XA step: a DDL statement."""
    text = _statement(event)
    return text not in ("BEGIN", "COMMIT") and not text.startswith("XA ")


MySqlCdcSourceConnector.task_class = MySqlCdcSourceTask
