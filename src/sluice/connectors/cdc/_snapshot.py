"""The incremental snapshot both CDC sources share: chunks of a table read while its log streams,
handed over to the log without a gap, a lost change or a step back in time, lock-free (the
DBLog watermark algorithm, as Debezium's incremental snapshot and Flink CDC use it).

Progress lives in the stream partition's own position, so it is committed with each micro-batch
like everything else and a kill -9 resumes at the last committed chunk::

    {"lsn": 1234, "columns": ["id", "name"], "snapshot": {"upto": 8000, "done": false}}

`upto` is the greatest value of the table's chunk column (the first primary key column when it
is an integer; otherwise the whole table is one chunk and `upto` stays null) that the snapshot
covered; `done` says the last chunk (everything above the previous `upto`) was read. The key is
absent when the connector does not snapshot (`snapshot.mode=never`) or finished. `columns` are
the table's columns in the connector's schema when the range was planned (see "Schema changes").

A micro-batch's range `(start, end]` reads, for a table:

1. **the log** between the two log positions: every change event, always, whatever the
   snapshot's progress (inserts, updates and deletes of rows no chunk read yet included);
2. then, if the range carries one, **the chunk** `(start.upto, end.upto]` (everything above
   `start.upto` when `end` is done). Its low watermark is `end`'s log position: the executor
   SELECTs the chunk (every transaction up to the low watermark is committed, so the SELECT sees
   at least the table as of the low watermark), then reads the log from the low watermark to its
   position after the SELECT (the high watermark; a commit the SELECT saw is in the log before
   it) and **drops every chunk row whose key has an event in that window**. The rows it keeps
   had no change between the low watermark and the SELECT: they are the table as of the low
   watermark and go out as `op='r'`, right after the log events up to that watermark.

Why this is exact, for a sink that upserts and deletes by key (the JDBC sink):

* No change is lost: every event goes out, in log order, whatever the snapshot does. A row
  deleted before its chunk is read gets its delete event (the first sink of an empty table
  deletes nothing; a re-read's target deletes the row it holds).
* No row is missed: a row no event touched since the low watermark is in the chunk as it is;
  a row with an event in the window is dropped from the chunk, and that event (a later range)
  carries the whole row (MySQL: `binlog_row_image=FULL`; PostgreSQL: the after image, or a
  failure naming the table for an unchanged TOASTed value under `REPLICA IDENTITY DEFAULT`).
* No step back in time: for any key the topic holds its events before the low watermark, then
  at most the chunk row (its state at the low watermark), then its events after the high
  watermark. Keeping a row that changed inside the window would put its newer state before an
  older event of the same key.
* Replays: a replayed range selects again, later; the argument holds for any SELECT made after
  the range was planned, and the topic keeps only the attempt whose micro-batch committed.

Reading more of the log than the window (up to its end now) only drops more rows, which is
safe. The runtime cuts a chunk range into sub-ranges read by separate Spark partitions when
`max.tasks` allows (`split`): integer steps of the chunk column, all with the same watermark.

Schema changes (`sluice.connectors.cdc._evolve`): each position records the table's columns as
the connector's schema had them. When a (re)started connector's schema has a column its start
position lacks — added while it ran (it restarted at the change) or while it was stopped — and
that column has a default the existing rows took without a change event, the table is read
again: one range with no log part commits a fresh snapshot progress. Its chunks wait until the
log reaches `since`, the log's position when the change was noticed, so that every event inside
a chunk's window already has the new column: a row dropped from a chunk then gets the column's
value from its later event, not a null from an event logged before the column existed. The same
snapshot runs for a first snapshot (`snapshot.mode=initial`) and when the stored position is no
longer in the log (`snapshot.mode=when_needed`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors._sql.names import TableName
from sluice.connectors.cdc._envelope import key_text, key_texts
from sluice.connectors.cdc._evolve import filled_columns
from sluice.sdk import (
    ConfigException,
    ConnectException,
    ConnectRecord,
    FieldType,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    Schema,
)

MODES = ("initial", "when_needed", "never")
#: In the end position of the range that restarts a snapshot because the stored position is no
#: longer in the log (`snapshot.mode=when_needed`): why; that range's log part is not read.
LOST = "lost"
#: The table's columns (names) in the connector's schema when the range ending there was planned.
COLUMNS = "columns"
#: What a position holds beside the log position itself.
EXTRA = ("snapshot", LOST, COLUMNS)
log = logging.getLogger(__name__)
_INTEGERS = (FieldType.INT8, FieldType.INT16, FieldType.INT32, FieldType.INT64)
#: chunk rows per micro-batch when the read limit does not bound them
DEFAULT_CHUNK_ROWS = 8192


def check_mode(mode: str) -> str:
    """`snapshot.mode`, validated."""
    if mode not in MODES:
        raise ConfigException("snapshot.mode", f"{mode!r} is not one of {', '.join(MODES)}")
    return mode


def chunk_column(pk: list[str], columns: Iterable[tuple[str, Schema]]) -> str | None:
    """The column chunks are cut on: the first primary key column if it is an integer."""
    schemas = dict(columns)
    first = schemas.get(pk[0]) if pk else None
    if first is not None and first.type in _INTEGERS and first.logical is None:
        return pk[0]
    return None


def progress(offset: Mapping[str, Any] | None, snapshotting: bool) -> dict[str, Any] | None:
    """The snapshot progress a position holds: None when nothing is being snapshotted, else
    `{"upto": …, "done": …}` (a first position of a snapshotting connector: nothing read)."""
    if offset is None:
        return {"upto": None, "done": False} if snapshotting else None
    return offset.get("snapshot")


def next_progress(
    conn: Any, db: Any, table: Any, column: str | None, state: dict, rows: int
) -> dict[str, Any]:
    """The progress after one more micro-batch of about `rows` rows (driver, index-only
    queries on the chunk column)."""
    if column is None:
        return {"upto": None, "done": True}
    col, src = db.dialect.quote(column), db.dialect.table(table)
    where, params = _above(col, state["upto"])
    bound = conn.exec_driver_sql(
        f"SELECT {col} FROM {src}{where} ORDER BY {col} LIMIT 1 OFFSET {max(rows, 1) - 1}",
        params,
    ).scalar()
    if bound is not None:
        return {"upto": int(bound), "done": False}
    top = conn.exec_driver_sql(f"SELECT MAX({col}) FROM {src}{where}", params).scalar()
    return {"upto": state["upto"] if top is None else int(top), "done": True}


def cuts(
    conn: Any,
    db: Any,
    table: Any,
    column: str | None,
    start: RecordOffset,
    end: RecordOffset,
    parts: int,
) -> list[RecordOffset]:
    """Up to `parts - 1` positions inside a chunk range, equal steps of the chunk column; the
    log part of the range stays in the first sub-range."""
    first, last = start.get("snapshot"), end.get("snapshot")
    if column is None or parts < 2 or first is None or last is None or last["upto"] is None:
        return []
    col, src = db.dialect.quote(column), db.dialect.table(table)
    where, params = _above(col, first["upto"])
    low = conn.exec_driver_sql(f"SELECT MIN({col}) FROM {src}{where}", params).scalar()
    if low is None or int(low) >= last["upto"]:
        return []
    step = (last["upto"] - int(low) + 1) / parts
    bounds = sorted({int(low) + int(step * k) - 1 for k in range(1, parts)})
    stream = {k: v for k, v in end.items() if k != "snapshot"}
    return [
        {**stream, "snapshot": {"upto": b, "done": False}}
        for b in bounds
        if int(low) <= b < last["upto"] and (first["upto"] is None or b > first["upto"])
    ]


def chunk_query(
    db: Any,
    table: Any,
    column: str | None,
    start: RecordOffset | None,
    end: RecordOffset,
) -> tuple[str, tuple] | None:
    """What follows the column list in the SELECT of the chunk a range reads (` FROM … WHERE
    …`), with its parameters; None if the range reads no chunk."""
    first = progress(start, True) if start is None else start.get("snapshot")
    last = end.get("snapshot")
    if first is None or last is None or first["done"] or first == last or not started(last):
        return None
    src = db.dialect.table(table)
    if column is None:
        return f" FROM {src}", ()
    col = db.dialect.quote(column)
    where, params = _above(col, first["upto"])
    if not last["done"]:
        where += (" AND " if where else " WHERE ") + f"{col} <= %s"
        params += (last["upto"],)
    return f" FROM {src}{where}", params


def _halves(
    conn: Any, db: Any, column: str | None, tail: str, params: tuple
) -> list[tuple[str, tuple]] | None:
    """A chunk query's rows in two queries, split at the middle of its chunk column's range
    (None if it has no chunk column, or one value only)."""
    if column is None:
        return None
    col = db.dialect.quote(column)
    low, high = conn.exec_driver_sql(f"SELECT MIN({col}), MAX({col}){tail}", params).one()
    if low is None or low == high:
        return None
    middle = (int(low) + int(high)) // 2
    inner = f" FROM (SELECT *{tail}) AS sluice_piece WHERE {col}"
    return [(f"{inner} <= %s", (*params, middle)), (f"{inner} > %s", (*params, middle))]


def started(state: dict[str, Any]) -> bool:
    """True if a range ending at this progress read a chunk (not a fresh or waiting one)."""
    return (state["done"] or state["upto"] is not None) and "since" not in state


def _above(col: str, upto: int | None) -> tuple[str, tuple]:
    return ("", ()) if upto is None else (f" WHERE {col} > %s", (upto,))


class SnapshotTask(ABC):
    """The snapshot half of a CDC task (mixed in before `ReplayableSourceTask`): wraps the
    task's log reading (`stream_latest`, `stream_read`) with the chunk progress, chunk reads and
    schema checks described in the module docstring. The task sets `snapshot_mode`, `tables`
    (name → an object with `name`, `pk`, `columns`, `topic`) and `db` in `start`, and fills in
    the hooks (abstract: a task class missing one cannot be instantiated)."""

    snapshot_mode: str
    tables: dict[str, Any]
    db: Any

    # -- hooks -----------------------------------------------------------------------------
    @abstractmethod
    def stream_latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        """The log part of `latest` (driver)."""

    @abstractmethod
    def stream_origin(self) -> RecordOffset:
        """A concrete log position for a first range without log events (driver)."""

    @abstractmethod
    def log_advances(self, start: RecordOffset | None, end: RecordOffset) -> bool:
        """True if the log part of `(start, end]` is not empty."""

    @abstractmethod
    def log_before(self, a: RecordOffset, b: RecordOffset) -> bool:
        """True if log position `a` lies before `b`."""

    @abstractmethod
    def stream_read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[ConnectRecord]:
        """The change events of the log part of the range (executor)."""

    @abstractmethod
    def position_lost(self, start: RecordOffset) -> str | None:
        """Why the log can no longer be read from `start` (a dropped slot, a purged binlog), or
        None (driver)."""

    @abstractmethod
    def log_end(self) -> RecordOffset:
        """The log's position now: where a new snapshot's stream starts (driver)."""

    @abstractmethod
    def log_now(self) -> RecordOffset:
        """The log's position now, at or after every commit made so far (driver): a
        re-read's `since`."""

    @abstractmethod
    def jump(self, here: RecordOffset, since: RecordOffset) -> RecordOffset | None:
        """`since` if no transaction commits in the log between `here` and it (a range may
        then end there, which the log's own ranges never reach when nothing commits after
        it), else None (driver)."""

    @abstractmethod
    def select_chunk(self, table: Any, query: tuple[str, tuple]) -> pa.StructArray | list[dict]:
        """The chunk's rows (`query`: what follows the SELECT list, and its parameters), as
        `page_chunk` reads them or, where it cannot, as values of the table's schema."""

    def page_chunk(self, conn: Any, table: Any, query: tuple[str, tuple]) -> pa.StructArray | None:
        """The chunk as the table's row struct, read in bulk by the JDBC dialect's page (the
        JDBC source's fast path: one text block parsed by Arrow, no Python object per value),
        or None: read it row by row (no page for the dialect or the plan, a value Arrow cannot
        parse). A MariaDB page larger than one value of the server's is read in halves of the
        chunk column's range, as many times as it takes; a single key's rows too large for one
        value send the chunk row by row."""
        if table.mapped is None:
            return None
        pages = self.__dict__.setdefault("_pages", {})
        if table.name not in pages:
            after = table.envelope_type.field("after").type
            pages[table.name] = self.db.dialect.page(_Columns(table.mapped), after)
        page = pages[table.name]
        if page is None:
            return None
        # A chunk's rows go out in any order (each key once): PostgreSQL's COPY of a range of
        # the key then scans the heap in its order (a bitmap scan), not through the index.
        order = ", ".join(self.db.dialect.quote(k) for k in table.pk)
        order = f" ORDER BY {order}" if page.needs_order else ""
        column = self._column(table)
        pieces, out = [query], []
        while pieces:
            tail, params = pieces.pop(0)
            got = page.fetch(conn, f"{tail}{order}", list(params))
            if got is not None:
                out.append(got[0])
                continue
            halves = _halves(conn, self.db, column, tail, params) if page.too_big else None
            if halves is None:
                return None
            pieces[:0] = halves
        return out[0] if len(out) == 1 else pa.concat_arrays(out)

    @abstractmethod
    def touched_keys(self, table: Any, low: RecordOffset) -> set[str]:
        """The record keys of the table's rows with an event after the log position `low`, up
        to at least the log's position now (executor, called after the chunk's SELECT)."""

    @abstractmethod
    def snapshot_source(self, table: Any, end: RecordOffset) -> dict[str, Any]:
        """The `source` block of a snapshot record."""

    # -- the ReplayableSourceTask methods ----------------------------------------------------
    def _column(self, table: Any) -> str | None:
        return chunk_column(table.pk, table.columns)

    def _progress(self, start: RecordOffset | None) -> dict[str, Any] | None:
        return progress(start, self.snapshot_mode != "never")

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        table = self.tables[partition["table"]]
        names = [n for n, _ in table.columns]
        checked = self.__dict__.setdefault("_positions_checked", set())
        if start is not None and LOST not in start and partition["table"] not in checked:
            # once per partition and start of the task: a later loss fails the read instead
            checked.add(partition["table"])
            lost = self.position_lost(start)
            if lost is not None:
                return self._lost(partition, start, lost, names)
        if start is not None and self._reread(table, start):
            # the existing rows took a new column's default without a change event
            stream = {k: v for k, v in start.items() if k not in EXTRA}
            since = {k: v for k, v in self.log_now().items() if k not in EXTRA}
            fresh = {"upto": None, "done": False, "since": since}
            return {**stream, COLUMNS: names, "snapshot": fresh}
        end = self.stream_latest(partition, start, limit)
        base = end if end is not None else (start or self.stream_origin())
        stream = {k: v for k, v in base.items() if k not in EXTRA}
        state = self._progress(start)
        if state is None or state["done"]:
            return {**stream, COLUMNS: names}
        if "since" in state:  # a re-read waits until the log reaches the change
            if self.log_before(stream, state["since"]):
                jumped = self.jump(stream, state["since"])
                if jumped is None:
                    return {**stream, COLUMNS: names, "snapshot": state}
                stream = {k: v for k, v in jumped.items() if k not in EXTRA}
            state = {k: v for k, v in state.items() if k != "since"}
        with self.db.connect() as conn:
            new = next_progress(
                conn,
                self.db,
                TableName.parse(table.name),
                self._column(table),
                state,
                limit.max_rows or DEFAULT_CHUNK_ROWS,
            )
        return {**stream, COLUMNS: names, "snapshot": new}

    def _reread(self, table: Any, start: RecordOffset) -> bool:
        """True if the connector's schema of `table` has a column that `start` (planned by an
        earlier run) did not, and the existing rows took a value for it (a default) without a
        change event; the table must then be read again. Fails naming the table and the column
        if one was added NOT NULL without a default (`sluice.connectors.cdc._evolve`)."""
        known = start.get(COLUMNS)
        if known is None:  # a position from before columns were recorded, or set by hand
            return False
        added = [n for n, _ in table.columns if n not in known]
        if not added:
            return False
        with self.db.connect() as conn:
            filled = filled_columns(self.db, conn, TableName.parse(table.name), added)
        if filled:
            log.info(
                "schema of %s changed: column(s) %s added with a default the existing rows "
                "took; reading the table again",
                table.name,
                ", ".join(filled),
            )
        return bool(filled)

    def _lost(
        self, partition: RecordPartition, start: RecordOffset, why: str, names: list[str]
    ) -> RecordOffset:
        """The stored position is gone from the log: with `snapshot.mode=when_needed`, a range
        to the log's end now that starts a new snapshot of the table (its log part is not read:
        `LOST`); otherwise a failure naming the position."""
        if self.snapshot_mode != "when_needed":
            raise ConnectException(
                f"table {partition['table']}: {why}; the changes since are lost",
                suggestion="set snapshot.mode=when_needed to snapshot the tables again, or "
                "re-copy them and reset the connector's offsets",
            )
        log.warning(
            "table %s: %s; snapshot.mode=when_needed: snapshotting the table again",
            partition["table"],
            why,
        )
        fresh = {"upto": None, "done": False}
        return {**self.log_end(), COLUMNS: names, "snapshot": fresh, LOST: why}

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        state = self._progress(start)
        if state is None:
            return []
        table = self.tables[partition["table"]]
        first = {**(start or {}), "snapshot": state}
        with self.db.connect() as conn:
            return cuts(
                conn, self.db, TableName.parse(table.name), self._column(table), first, end, parts
            )

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[ConnectRecord | pa.RecordBatch]:
        table = self.tables[partition["table"]]
        if self.log_advances(start, end) and LOST not in end:
            yield from self.stream_read(partition, start, end)  # every event, always
        state = self._progress(start)
        if state is None:
            return
        query = chunk_query(
            self.db,
            TableName.parse(table.name),
            self._column(table),
            {**(start or {}), "snapshot": state},
            end,
        )
        if query is not None:
            yield from self._chunk_records(table, query, end)

    def chunk(
        self, table: Any, query: tuple[str, tuple], end: RecordOffset
    ) -> tuple[pa.StructArray | list[dict], set[str]]:
        """A chunk's rows, and the keys with an event in its window (executor)."""
        rows = self.select_chunk(table, query)
        return rows, self.touched_keys(table, end)  # after the SELECT: the high watermark

    def _chunk_records(
        self, table: Any, query: tuple[str, tuple], end: RecordOffset
    ) -> Iterator[ConnectRecord | pa.RecordBatch]:
        rows, touched = self.chunk(table, query, end)
        source = self.snapshot_source(table, end)
        now = datetime.now(UTC)
        ts_ms = int(now.timestamp() * 1000)
        if isinstance(rows, pa.StructArray):
            batch = snapshot_batch(table, rows, touched, source, ts_ms)
            if batch.num_rows:
                yield batch
            return
        for row in rows:
            key = key_text(row, table.pk)
            if key in touched:
                continue  # changed inside the window: its change events follow, whole rows
            yield ConnectRecord(
                value={"before": None, "after": row, "source": source, "op": "r", "ts_ms": ts_ms},
                key=key,
                topic=table.topic,
                timestamp=now,
            )


class _Columns:
    """What a JDBC dialect's page reads of a plan: its columns (`Mapped`)."""

    def __init__(self, columns: list[Any]) -> None:
        self.columns = columns


def snapshot_batch(
    table: Any, after: pa.StructArray, touched: set[str], source: dict[str, Any], ts_ms: int
) -> pa.RecordBatch:
    """A chunk's `r` records, column-wise: the rows whose key had no event in the chunk's
    window (`touched`), each in an envelope with no `before`, the chunk's `source` block and
    `ts_ms`; keyed and addressed (`topic`) as the row path does it."""
    keys = key_texts(after, table.pk)
    if touched:
        kept = pc.invert(pc.is_in(keys, value_set=pa.array(list(touched), pa.string())))
        after, keys = after.filter(kept), keys.filter(kept)
    n = len(after)
    envelope = table.envelope_type
    value = pa.StructArray.from_arrays(
        [
            pa.nulls(n, envelope.field("before").type),
            after,
            pa.repeat(pa.scalar(source, envelope.field("source").type), n),
            pa.repeat(pa.scalar("r", pa.string()), n),
            pa.repeat(pa.scalar(ts_ms, pa.int64()), n),
        ],
        fields=list(envelope),
    )
    topic = pa.repeat(pa.scalar(table.topic, pa.string()), n)
    return pa.RecordBatch.from_arrays([value, keys, topic], names=["value", "key", "topic"])
