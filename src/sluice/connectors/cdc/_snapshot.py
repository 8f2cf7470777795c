"""The incremental snapshot both CDC sources share: chunks of a table read while its log streams,
handed over to the log without a gap or a duplicate, lock-free (DBLog / Flink CDC's model).

Progress lives in the stream partition's own position, so it is committed with each micro-batch
like everything else and a kill -9 resumes at the last committed chunk::

    {"lsn": 1234, "snapshot": {"upto": 8000, "done": false}}   # PostgreSQL; MySQL: file + pos

`upto` is the greatest value of the table's chunk column (the first primary key column when it
is an integer; otherwise the whole table is one chunk and `upto` stays null) that the snapshot
covered; `done` says the last chunk (everything above the previous `upto`) was read. The key is
absent when the connector does not snapshot (`snapshot.mode=never`) or finished earlier.

A micro-batch's range `(start, end]` reads two things for a table:

* the log between the two log positions, keeping only the events of rows the snapshot already
  covered at `start` (all of them once it is done): a row in a chunk not read yet is not
  streamed, its chunk will read it;
* the chunk `(start.upto, end.upto]` (or everything above `start.upto` when `end` is done),
  with the low watermark at `end`'s log position: the executor selects the chunk, then reads
  the log from the low watermark to the position after its SELECT (the high watermark) and
  drops every selected row whose key has an event there. The rows it keeps did not change
  between the low watermark and the SELECT, so they are the table as of the low watermark and
  go out as `op='r'`; the dropped ones reach the topic as their change events, which the next
  micro-batches stream (their keys are covered now) with full after images. Reading more of the
  log than needed only drops more rows, which is safe; rows whose change is visible to the
  SELECT always have it before the high watermark.

The runtime cuts a chunk range into sub-ranges read by separate Spark partitions when
`max.tasks` allows more partitions than the micro-batch has ranges (`split`): the cuts are
integer steps of the chunk column. A replayed range selects again; each attempt is consistent
on its own, and the topic keeps only the attempt whose micro-batch committed.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from sluice.connectors.cdc._envelope import key_text
from sluice.connectors.cdc._evolve import SchemaChanged
from sluice.connectors.jdbc._config import TableName
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


def covers(state: dict[str, Any] | None, column: str | None) -> Callable[[dict], bool]:
    """Which rows' events the stream emits at this progress: the rows the snapshot covered."""
    if state is None or state["done"]:
        return lambda row: True
    upto = state["upto"]
    if column is None or upto is None:
        return lambda row: False
    return lambda row: row.get(column) is not None and row[column] <= upto


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
    select: str,
    start: RecordOffset | None,
    end: RecordOffset,
) -> tuple[str, tuple] | None:
    """The SELECT of the chunk a range reads (`select`: the column list), or None."""
    first = progress(start, True) if start is None else start.get("snapshot")
    last = end.get("snapshot")
    if first is None or last is None or first["done"] or first == last:
        return None
    src = db.dialect.table(table)
    if column is None:
        return f"SELECT {select} FROM {src}", ()
    col = db.dialect.quote(column)
    where, params = _above(col, first["upto"])
    if not last["done"]:
        where += (" AND " if where else " WHERE ") + f"{col} <= %s"
        params += (last["upto"],)
    return f"SELECT {select} FROM {src}{where}", params


def _above(col: str, upto: int | None) -> tuple[str, tuple]:
    return ("", ()) if upto is None else (f" WHERE {col} > %s", (upto,))


class SnapshotTask(ABC):
    """The snapshot half of a CDC task (mixed in before `ReplayableSourceTask`): wraps the
    task's log reading (`stream_latest`, `stream_read`) with the chunk progress and chunk reads
    described in the module docstring. The task sets `snapshot_mode`, `tables` (name → an
    object with `name`, `pk`, `columns`, `topic`) and `db` in `start`, and fills in the hooks
    (abstract: a task class missing one cannot be instantiated)."""

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
    def select_chunk(self, table: Any, sql_params: tuple[str, tuple]) -> list[dict[str, Any]]:
        """The chunk's rows as values of the table's schema (`sql_params` selects `self.
        chunk_select(table)`)."""

    @abstractmethod
    def chunk_select(self, table: Any) -> str:
        """The SELECT list of a chunk query."""

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
        checked = self.__dict__.setdefault("_positions_checked", set())
        if start is not None and LOST not in start and partition["table"] not in checked:
            # once per partition and start of the task: a later loss fails the read instead
            checked.add(partition["table"])
            lost = self.position_lost(start)
            if lost is not None:
                return self._lost(partition, start, lost)
        try:
            end = self.stream_latest(partition, start, limit)
        except SchemaChanged as exc:
            return self._resnapshot(exc, partition, start)
        state = self._progress(start)
        if state is None:
            return end
        base = end if end is not None else (start or self.stream_origin())
        stream = {k: v for k, v in base.items() if k not in ("snapshot", LOST)}
        if state["done"]:
            return stream
        table = self.tables[partition["table"]]
        with self.db.connect() as conn:
            new = next_progress(
                conn,
                self.db,
                TableName.parse(table.name),
                self._column(table),
                state,
                limit.max_rows or DEFAULT_CHUNK_ROWS,
            )
        return {**stream, "snapshot": new}

    def _lost(self, partition: RecordPartition, start: RecordOffset, why: str) -> RecordOffset:
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
        return {**self.log_end(), "snapshot": {"upto": None, "done": False}, LOST: why}

    def _resnapshot(
        self, exc: SchemaChanged, partition: RecordPartition, start: RecordOffset | None
    ) -> RecordOffset | None:
        """At a schema change that filled the existing rows (a new column's default): first a
        range that only starts a new snapshot of that table (committed like any range), then
        the restart (`sluice.connectors.cdc._evolve`)."""
        fresh = {"upto": None, "done": False}
        if not exc.resnapshot or start is None or start.get("snapshot") == fresh:
            raise exc
        if partition["table"] != exc.table:
            return start  # another table: it waits for the restart
        return {**{k: v for k, v in start.items() if k != "snapshot"}, "snapshot": fresh}

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
    ) -> Iterator[ConnectRecord]:
        table = self.tables[partition["table"]]
        column = self._column(table)
        state = self._progress(start)
        if self.log_advances(start, end) and LOST not in end:
            keep = covers(state, column)
            for record in self.stream_read(partition, start, end):
                value = record.value
                if keep(value["after"] if value["after"] is not None else value["before"]):
                    yield record
        if state is None:
            return
        query = chunk_query(
            self.db,
            TableName.parse(table.name),
            column,
            self.chunk_select(table),
            {**(start or {}), "snapshot": state},
            end,
        )
        if query is not None:
            yield from self._chunk_records(table, query, end)

    def _chunk_records(
        self, table: Any, query: tuple[str, tuple], end: RecordOffset
    ) -> Iterator[ConnectRecord]:
        rows = self.select_chunk(table, query)
        touched = self.touched_keys(table, end)  # after the SELECT: the high watermark
        source = self.snapshot_source(table, end)
        now = datetime.now(UTC)
        ts_ms = int(now.timestamp() * 1000)
        for row in rows:
            key = key_text(row, table.pk)
            if key in touched:
                continue  # its change events follow in the stream, with whole rows
            yield ConnectRecord(
                value={"before": None, "after": row, "source": source, "op": "r", "ts_ms": ts_ms},
                key=key,
                topic=table.topic,
                timestamp=now,
            )
