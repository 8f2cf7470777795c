"""JdbcSinkConnector: writes records into MySQL/MariaDB or PostgreSQL tables.

Delivery: a sink task writes its share of a micro-batch in **one transaction**, with set-based
statements: PostgreSQL gets `COPY` (straight into the table for `insert`, into a temporary staging
table followed by one `INSERT … ON CONFLICT DO UPDATE` / `UPDATE … FROM` / `DELETE … USING` for the
other modes; an upsert whose integer keys lie in a range the table has no row in is copied
straight in too, see `_Writer._append`); MySQL/MariaDB gets multi-row `INSERT … VALUES (…), (…)`
(with `ON DUPLICATE KEY UPDATE` for upserts), `UPDATE … JOIN` a staging table, and
`DELETE … WHERE (pk) IN (…)`, at most `batch.size` rows per statement. `upsert` and `update` are
idempotent, so a replayed micro-batch changes nothing: exactly-once effect. `insert` is
at-least-once (a replay after a crash between the database commit and Spark's commit inserts the
rows again, or fails on a unique key).
Unit of parallelism: one task per group of queues (`max.tasks`); one table's records come from one
queue when the source keeps them in order (the JDBC source does).

Records: the value must be a struct (typed: `auto.create`/`auto.evolve` use its field types) or a
JSON object (text). Within a micro-batch, later records for the same key win (`upsert`, `update`,
deletes); `insert` keeps every record in order. A tombstone (null value) deletes the row with the
record key when `delete.enabled=true`, and fails the task otherwise (it is never dropped silently).
Change events (a value with `before`, `after`, `source` and `op`, as the CDC connectors emit) are
applied: the `after` row is written, and a delete (`after` null) deletes the key's row; use
`insert.mode=upsert`, `pk.mode=record_key`, `delete.enabled=true` (docs/cdc.md).

Identifiers (tables from `table.name.format`, columns from record fields) are always quoted and
values always bound, so names taken from records cannot inject SQL. A transient failure (lost
connection, server restarting, deadlock) rolls the transaction back and retries it with backoff:
RocketMQ's `max.retries` / `retry.backoff.ms`; with `errors.retry.timeout` set, the engine retries
the task's `flush` as configured by `errors.retry.timeout` / `errors.retry.delay.max.ms`. Nothing
is skipped while the database is away; the micro-batch waits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors._sql.connection import connection_client_options
from sluice.connectors._sql.dialect import Write
from sluice.connectors._sql.names import TableName
from sluice.connectors.jdbc._config import SINK_CONFIG, SinkSettings
from sluice.sdk import (
    BatchId,
    ClientOption,
    ConnectException,
    ConnectRecord,
    Delivery,
    RetriableException,
    SinkConnector,
    SinkTask,
)
from sluice.sdk.retry import Backoff, retry

log = logging.getLogger(__name__)

# Columns the columnar path adds beside the record fields (NUL: no field name can clash).
_DELETE, _TOPIC, _QUEUE, _OFFSET, _POS = "\0delete", "\0topic", "\0queue", "\0offset", "\0pos"
_META = {_DELETE, _TOPIC, _QUEUE, _OFFSET}

#: Rows of one multi-row statement are also capped by their approximate size (MySQL's
#: max_allowed_packet is 16 MiB by default).
MAX_STATEMENT_BYTES = 4 << 20


@dataclass
class _Op:
    """One record, normalised: a write (fields + values) or a delete (pk values)."""

    delete: bool
    fields: tuple[str, ...]
    values: tuple[Any, ...]
    pk: tuple[Any, ...]


@dataclass
class _Table:
    """The records of a micro-batch for one target table, in order."""

    name: TableName
    ops: list[_Op] = field(default_factory=list)  # per-record path (JSON values, `put`)
    #: columnar path (struct values): the fields to write, a tombstone flag, coordinates
    segments: list[pa.Table] = field(default_factory=list)
    pk: list[str] = field(default_factory=list)  # pk field names of the columnar path
    types: dict[str, pa.Field] = field(default_factory=dict)  # from typed (struct) values
    where: set[str] = field(default_factory=set)  # topic/queue coordinates, for messages


def _json_value(value: Any) -> Any:
    # Nested JSON travels as JSON text (for JSON/JSONB/TEXT columns).
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


def _parse_json(raw: Any, what: str) -> Any:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode("utf-8")
    try:
        return json.loads(raw, parse_float=Decimal)
    except (ValueError, TypeError) as exc:
        raise ConnectException(f"{what}: the value is not JSON: {exc}") from None


class JdbcSinkTask(SinkTask):
    """Buffers its share of a micro-batch, then writes it in one transaction at `flush`.

    Into PostgreSQL, Arrow batches are also written as they arrive, by `_EarlyWrites`, in a
    transaction that `flush` commits; the buffer is kept for the cases it steps aside.
    """

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        self.settings = SinkSettings.parse(config)
        self.db = Database(self.settings.connection)
        self._tables: dict[TableName, _Table] = {}
        self._count = 0
        self._format_cache: dict[str, TableName] = {}
        self._early: _EarlyWrites | None = None

    # -- collecting ---------------------------------------------------------------------------
    def _table(self, topic: str | None) -> _Table:
        name = self._format_cache.get(topic or "")
        if name is None:
            name = self.settings.table_for(topic or "")
            if not name.name:
                raise ConnectException(
                    f"table.name.format {self.settings.table_format!r} gives an empty table "
                    f"name for topic {topic!r}"
                )
            self._format_cache[topic or ""] = name
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = _Table(name)
        return table

    def put(self, records: list[ConnectRecord]) -> None:
        for record in records:
            where = _where(record.topic, record.partition, record.offset)
            value = record.value
            if isinstance(value, (str, bytes)):
                value = _parse_json(value, where)
            key = record.key
            if isinstance(key, (str, bytes)) and self.settings.pk_mode == "record_key":
                text = key.decode("utf-8") if isinstance(key, bytes) else key
                key = _parse_json(text, where) if text.lstrip().startswith("{") else text
            self._add(self._table(record.topic), value, key, where, {})

    def put_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        batch = _unwrap_change_events(batch)
        if self._columnar(batch):
            self._put_columnar(batch)
            return
        names = batch.schema.names
        topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
        queues = batch.column("queue_id").to_pylist() if "queue_id" in names else None
        offsets = batch.column("queue_offset").to_pylist() if "queue_offset" in names else None
        value = batch.column("value")
        values, types = self._decode(value, "value")
        keys: list[Any] = [None] * n
        if self.settings.pk_mode == "record_key" and "key" in names:
            keys, _ = self._decode(batch.column("key"), "key", json_objects_only=True)
        for i in range(n):
            where = _where(
                topics[i],
                {"queueId": queues[i]} if queues is not None else None,
                {"queueOffset": offsets[i]} if offsets is not None else None,
            )
            row = values[i]
            if isinstance(row, _Raw):
                row = _parse_json(row.text, where)
            key = keys[i]
            if isinstance(key, _Raw):
                key = _parse_json(key.text, where)
            self._add(self._table(topics[i]), row, key, where, types)

    def _columnar(self, batch: pa.RecordBatch) -> bool:
        """True if the batch can stay in Arrow: flat struct values (and struct or non-text keys
        when the key is the primary key)."""
        value = batch.column("value").type
        if not pa.types.is_struct(value) or any(_nested(f.type) for f in value):
            return False
        if self.settings.pk_mode != "record_key":
            return True
        key = batch.column("key").type if "key" in batch.schema.names else pa.null()
        if pa.types.is_struct(key):
            return not any(_nested(f.type) for f in key)
        return not (_texty(key) or pa.types.is_null(key) or _nested(key))

    def _put_columnar(self, batch: pa.RecordBatch) -> None:
        s = self.settings
        n = batch.num_rows
        names = batch.schema.names
        value = batch.column("value")
        topic = batch.column("topic") if "topic" in names else pa.nulls(n, pa.string())
        queue = batch.column("queue_id") if "queue_id" in names else pa.nulls(n, pa.int32())
        offset = (
            batch.column("queue_offset") if "queue_offset" in names else pa.nulls(n, pa.int64())
        )

        def where(i: int) -> str:
            return _where(
                topic[i].as_py(), {"queueId": queue[i].as_py()}, {"queueOffset": offset[i].as_py()}
            )

        deleted = pc.invert(value.is_valid())
        if _count(deleted) and not s.delete_enabled:
            raise ConnectException(
                f"{where(_first(deleted))}: the record has a null value (a tombstone) but "
                "delete.enabled=false",
                suggestion="set delete.enabled=true (with pk.mode=record_key) to delete rows",
            )
        children = dict(zip([f.name for f in value.type], value.flatten(), strict=True))
        types = {f.name: f for f in value.type}
        cols: dict[str, pa.Array] = {}
        if s.pk_mode == "record_key":
            key = batch.column("key")
            if key.null_count:
                bad = _first(key.is_null())
                raise ConnectException(
                    f"{where(bad)}: pk.mode=record_key but the record has no key"
                )
            if pa.types.is_struct(key.type):
                kids = dict(zip([f.name for f in key.type], key.flatten(), strict=True))
                missing = [f for f in s.pk_fields if f not in kids]
                if missing:
                    raise ConnectException(f"{where(0)}: the key has no field(s) {missing}")
                for f in key.type:
                    if f.name in (s.pk_fields or kids):
                        cols[f.name], types[f.name] = kids[f.name], f
            else:
                if len(s.pk_fields) != 1:
                    raise ConnectException(
                        f"{where(0)}: the key is a {key.type}, so pk.fields must name exactly "
                        f"one column, got {list(s.pk_fields)}"
                    )
                cols[s.pk_fields[0]] = key
                types[s.pk_fields[0]] = pa.field(s.pk_fields[0], key.type, nullable=False)
        elif s.pk_mode == "record_value":
            pk = s.pk_fields or tuple(children)
            missing = [f for f in pk if f not in children]
            if missing:
                raise ConnectException(f"{where(0)}: the value has no pk field(s) {missing}")
            cols.update({f: children[f] for f in pk})
        pk_names = list(cols)
        white = s.fields_whitelist
        for name, array in children.items():
            if name not in cols and (not white or name in white):
                cols[name] = array
        cols.update({_DELETE: deleted, _TOPIC: topic, _QUEUE: queue, _OFFSET: offset})
        data = pa.table(cols)
        topics = pc.unique(topic)
        for t in topics.to_pylist():
            part = data if len(topics) == 1 else data.filter(pc.equal(topic, t))
            table = self._table(t)
            table.segments.append(part)
            table.pk = pk_names
            for name, f in types.items():
                table.types.setdefault(name, f)
            table.where.add(_where(t, None, None))
            if self.db.dialect.early_writes:  # `_add` turns it off for the per-record path
                if self._early is None:
                    self._early = _EarlyWrites(self.db, self.settings)
                self._early.submit(table, part)
        self._count += n

    def _decode(
        self, column: pa.Array, what: str, *, json_objects_only: bool = False
    ) -> tuple[list[Any], dict[str, pa.Field]]:
        """Python values of a key/value column: dicts for structs, `_Raw` for JSON text."""
        type_ = column.type
        if pa.types.is_struct(type_):
            valid = column.is_valid().to_pylist()
            children = column.flatten()
            fields = [type_.field(i) for i in range(type_.num_fields)]
            lists = [self.db.dialect.driver_values(child) for child in children]
            names = [f.name for f in fields]
            rows = (
                [
                    dict(zip(names, vals, strict=True)) if ok else None
                    for ok, vals in zip(valid, zip(*lists, strict=True), strict=True)
                ]
                if lists
                else [{} if ok else None for ok in valid]
            )
            return rows, {f.name: f for f in fields}
        if (
            pa.types.is_string(type_)
            or pa.types.is_large_string(type_)
            or pa.types.is_binary(type_)
            or pa.types.is_large_binary(type_)
        ):
            out: list[Any] = []
            for raw in column.to_pylist():
                if raw is None:
                    out.append(None)
                    continue
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
                if json_objects_only and not text.lstrip().startswith("{"):
                    out.append(text)  # a plain string key
                else:
                    out.append(_Raw(raw))
            return out, {}
        if pa.types.is_null(type_):
            return [None] * len(column), {}
        return self.db.dialect.driver_values(column), {}

    def _add(
        self, table: _Table, value: Any, key: Any, where: str, types: dict[str, pa.Field]
    ) -> None:
        s = self.settings
        if isinstance(value, dict) and value.keys() >= _CHANGE_EVENT:
            value = value.get("after")  # a change event: its row, or None (a delete)
        if self._early is not None:
            self._early.abandon()  # the per-record path is written at flush, in order
        table.where.add(where.rsplit(" offset ", 1)[0])
        if types and not table.types:
            table.types = dict(types)
        key_fields: dict[str, Any] = {}
        if s.pk_mode == "record_key":
            if key is None:
                raise ConnectException(f"{where}: pk.mode=record_key but the record has no key")
            if isinstance(key, dict):
                names = s.pk_fields or tuple(key)
                missing = [n for n in names if n not in key]
                if missing:
                    raise ConnectException(f"{where}: the key has no field(s) {missing}")
                key_fields = {n: key[n] for n in names}
            else:
                if len(s.pk_fields) != 1:
                    raise ConnectException(
                        f"{where}: the key is a {type(key).__name__}, so pk.fields must name "
                        f"exactly one column, got {list(s.pk_fields)}"
                    )
                key_fields = {s.pk_fields[0]: key}
        if value is None:
            if not s.delete_enabled:
                raise ConnectException(
                    f"{where}: the record has a null value (a tombstone) but delete.enabled=false",
                    suggestion="set delete.enabled=true (with pk.mode=record_key) to delete rows",
                )
            pk_names = tuple(key_fields)
            table.ops.append(_Op(True, pk_names, (), tuple(key_fields[n] for n in pk_names)))
            return
        if not isinstance(value, dict):
            raise ConnectException(
                f"{where}: the value is a {type(value).__name__}; the JDBC sink needs a struct "
                "or a JSON object"
            )
        if s.pk_mode == "record_value":
            names = s.pk_fields or tuple(value)
            missing = [n for n in names if n not in value]
            if missing:
                raise ConnectException(f"{where}: the value has no pk field(s) {missing}")
            key_fields = {n: value[n] for n in names}
        row = dict(key_fields)
        white = s.fields_whitelist
        for name, v in value.items():
            if name in row or (white and name not in white):
                continue
            row[name] = _json_value(v)
        fields = tuple(row)
        table.ops.append(_Op(False, fields, tuple(row.values()), tuple(row[n] for n in key_fields)))
        self._count += 1

    # -- writing ------------------------------------------------------------------------------
    def flush(self, batch_id: BatchId) -> Any:
        tables = [t for t in self._tables.values() if t.ops or t.segments]
        if not tables:
            return None
        for table in tables:
            if table.ops and table.segments:
                _segments_to_ops(table)  # a table fed both ways: one (per-record) path
        rows = sum(len(t.ops) + sum(seg.num_rows for seg in t.segments) for t in tables)
        started = time.monotonic()
        early, self._early = self._early, None
        if early is not None and early.finish():
            writer = early.writer
        else:
            writer = _Writer(self.db, self.settings)
            _with_retries(self.settings, lambda: writer.write(tables), f"writing {rows} records")
        self._tables.clear()
        return {
            "rows": rows,
            "early": early is not None and writer is early.writer,
            "appended": writer.appended,
            "tables": [str(t.name) for t in tables],
            "seconds": round(time.monotonic() - started, 3),
        }

    def stop(self) -> None:
        if self._early is not None:
            self._early.abandon()
            self._early = None
        self._tables = {}


#: The fields that make a value a change event (Debezium's envelope, `sluice.connectors.cdc`).
_CHANGE_EVENT = frozenset({"before", "after", "source", "op"})


def _unwrap_change_events(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of change events (struct values with `before`, `after`, `source`, `op`) with each
    value replaced by its `after` row: null for a delete, which the sink then treats as a
    tombstone (`delete.enabled=true`, `pk.mode=record_key`: the key is the primary key)."""
    names = batch.schema.names
    if "value" not in names:
        return batch
    value = batch.column("value")
    if not pa.types.is_struct(value.type):
        return batch
    fields = [f.name for f in value.type]
    if not set(fields) >= _CHANGE_EVENT:
        return batch
    after = value.flatten()[fields.index("after")]  # null where the event itself is null
    index = names.index("value")
    return batch.set_column(index, pa.field("value", after.type), after)


def _nested(type_: pa.DataType) -> bool:
    return pa.types.is_nested(type_)


def _texty(type_: pa.DataType) -> bool:
    return (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
    )


def _count(mask: pa.Array | pa.ChunkedArray) -> int:
    """How many values of a boolean column are true."""
    return int(pc.sum(mask).as_py() or 0)


def _first(mask: pa.Array) -> int:
    """Index of the first true value of a boolean array."""
    return int(pc.index(mask, True).as_py())


def _segments_to_ops(table: _Table) -> None:
    """Move a table's columnar records into its per-record list, before the others (they came
    in the same micro-batch; the columnar ones are kept in their order)."""
    ops: list[_Op] = []
    for seg in table.segments:
        fields = [c for c in seg.column_names if c not in _META]
        columns = [seg.column(f).to_pylist() for f in fields]
        deleted = seg.column(_DELETE).to_pylist()
        npk = len(table.pk)
        for i, values in enumerate(zip(*columns, strict=True)):
            if deleted[i]:
                ops.append(_Op(True, tuple(fields[:npk]), (), tuple(values[:npk])))
            else:
                ops.append(_Op(False, tuple(fields), tuple(values), tuple(values[:npk])))
    table.ops[:0] = ops
    table.segments = []


@dataclass
class _Raw:
    """A JSON text not parsed yet (parsed per record, so that errors name the record)."""

    text: Any


def _where(topic: Any, partition: Any, offset: Any) -> str:
    out = f"record of topic {topic!r}"
    if partition and "queueId" in partition:
        out += f" queue {partition['queueId']}"
    if offset and "queueOffset" in offset:
        # queueOffset in a sink record is the position after it; show the record's own offset
        out += f" offset {offset['queueOffset']}"
    return out


def _with_retries(settings: SinkSettings, work: Any, what: str) -> None:
    """Run `work`, retrying transient database failures `max.retries` times, `retry.backoff.ms`
    apart (RocketMQ's keys). With `errors.retry.timeout` set, a transient failure is raised at
    once as a `RetriableException`: the engine retries `flush` as it retries `put`."""
    from sluice.connectors._sql.db import error_text

    def text(exc: BaseException) -> str:
        return exc.message if isinstance(exc, ConnectException) else error_text(exc)

    def transient(exc: BaseException) -> bool:
        if isinstance(exc, ConnectException):
            return isinstance(exc, RetriableException)
        return _transient(settings, exc)

    def give_up(exc: BaseException, retries: int, spent_s: float) -> NoReturn:
        if timed:
            raise RetriableException(f"{what}: {text(exc)}") from None
        raise ConnectException(
            f"{what} failed after {retries} retries: {text(exc)}",
            suggestion="raise max.retries or set errors.retry.timeout",
        ) from None

    def warn(exc: BaseException, number: int, wait_s: float) -> None:
        log.warning("%s failed (%s); retry %d in %d ms", what, text(exc), number, wait_s * 1000)

    timed = settings.retry_timeout_ms != 0
    try:
        retry(
            work,
            backoff=Backoff.fixed(settings.retry_backoff_ms / 1000),
            attempts=1 if timed else settings.max_retries + 1,
            retriable=transient,
            give_up=give_up,
            on_retry=warn,
        )
    except ConnectException:
        raise
    except Exception as exc:
        raise ConnectException(f"{what}: {error_text(exc)}") from None


def _transient(settings: SinkSettings, exc: BaseException) -> bool:
    from sluice.connectors._sql.dialects import dialect_for

    return dialect_for(settings.connection.dialect).is_transient(exc)


class _EarlyWrites:
    """Writes a task's Arrow batches to PostgreSQL while the task is still reading the next.

    A sink task receives its share of a micro-batch in pieces (`put_batch`), each read from the
    topic and decoded in turn. Written only at `flush`, PostgreSQL waits while the task decodes
    and the task waits while PostgreSQL ingests. Here a thread writes each piece as it arrives,
    in order (at least `min_rows` rows at a time), in one transaction that `flush` commits
    (`finish`), so both work at once. Writing the pieces one after the other in one transaction
    has the effect of writing them together: the last record per key still wins, because a later
    piece's upsert finds the earlier one's rows.

    It steps aside — rolls back and leaves everything to `_Writer.write` at `flush`, with its
    retries and error messages — on the per-record path, a field the table does not have yet
    (adding a column would wait on this very transaction), or any error.
    """

    _DONE, _ABORT = object(), object()
    #: pieces are written once a table has this many rows waiting: a topic read in small chunks
    #: must not cost a COPY (and a key probe) per chunk
    min_rows = 50_000

    def __init__(self, db: Any, settings: SinkSettings) -> None:
        self.db = db
        self.writer = _Writer(db, settings)
        self._pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._committed = False
        # the thread's own: each table's prepared columns, and pieces not yet written
        self._tables: dict[TableName, tuple[_Table, dict[str, str]]] = {}
        self._pending: dict[TableName, list[pa.Table]] = {}

    def submit(self, table: _Table, piece: pa.Table) -> None:
        if self._failed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sluice-jdbc-early", daemon=True)
            self._thread.start()
        self._pieces.put((table.name, table.pk, dict(table.types), piece))

    def finish(self) -> bool:
        """Commit what was written: True if that is everything submitted."""
        if self._thread is None or self._failed:
            self.abandon()
            return False
        self._pieces.put(self._DONE)
        self._thread.join()
        return self._committed

    def abandon(self) -> None:
        """Roll back and step aside."""
        self._failed = True
        if self._thread is not None and self._thread.is_alive():
            self._pieces.put(self._ABORT)
            self._thread.join()

    def _run(self) -> None:
        # Any exception ends the thread with `_failed` set: `finish` and `abandon` then find it
        # dead, and `submit` stops queueing.
        try:
            with self.db.connect(attempts=1) as conn:
                conn.commit()
                trans = conn.begin()
                try:
                    self._write_until_done(conn)
                    trans.commit()
                    self._committed = True
                finally:
                    if not self._committed:
                        with contextlib.suppress(Exception):  # the connection may be gone
                            trans.rollback()
        except Exception as exc:
            log.debug("writing early stepped aside: %s", exc)
            self._failed = True

    def _write_until_done(self, conn: Any) -> None:
        while (item := self._pieces.get()) is not self._DONE:
            if item is self._ABORT:
                raise ConnectException("abandoned")
            self._collect(conn, *item)
        for name in list(self._pending):
            self._write(conn, name)

    def _collect(
        self, conn: Any, name: TableName, pk: list[str], types: dict[str, pa.Field], piece: pa.Table
    ) -> None:
        if name not in self._tables:
            table = _Table(name, segments=[piece], pk=pk, types=types)
            with self.db.connect(attempts=1) as ddl:  # committed on its own, as in `write`
                self._tables[name] = (table, self.writer._prepare(ddl, table))
                ddl.commit()
        columns = self._tables[name][1]
        if any(c not in columns for c in piece.column_names if c not in _META):
            raise ConnectException(f"table {str(name)!r} needs new columns: written at flush")
        pending = self._pending.setdefault(name, [])
        pending.append(piece)
        if sum(p.num_rows for p in pending) >= self.min_rows:
            self._write(conn, name)

    def _write(self, conn: Any, name: TableName) -> None:
        table, columns = self._tables[name]
        table.segments = self._pending.pop(name)
        self.writer._write_columnar(conn, table, columns)


class _Writer:
    """Writes the collected records of all tables in one transaction."""

    def __init__(self, db: Any, settings: SinkSettings) -> None:
        self.db = db
        self.settings = settings
        self.d = db.dialect
        self.appended = 0  # upserted rows that took the plain-COPY path (see `_append`)

    def write(self, tables: list[_Table]) -> None:
        from sluice.connectors._sql.db import error_text

        self.appended = 0  # a retry starts over
        with self.db.connect(attempts=1) as conn:
            # DDL first, committed on its own: MySQL commits implicitly around DDL anyway.
            columns = {t.name: self._prepare(conn, t) for t in tables}
            conn.commit()
            trans = conn.begin()
            current = ""
            try:
                for table in tables:
                    current = f"table {str(table.name)!r} ({', '.join(sorted(table.where))})"
                    self._write_table(conn, table, columns[table.name])
                trans.commit()
            except Exception as exc:
                with contextlib.suppress(Exception):  # the connection may be gone
                    trans.rollback()
                if isinstance(exc, ConnectException) or self.d.is_transient(exc):
                    raise
                raise ConnectException(f"writing to {current}: {error_text(exc)}") from None

    # -- tables and columns -------------------------------------------------------------------
    def _fields(self, table: _Table) -> tuple[list[str], bool]:
        """The record fields to write (in order) and whether there is anything but deletes."""
        fields: list[str] = []
        writes = False
        for seg in table.segments:
            fields += [c for c in seg.column_names if c not in _META and c not in fields]
            writes = writes or _count(pc.invert(seg.column(_DELETE))) > 0
        for op in table.ops:
            fields += [name for name in op.fields if name not in fields]
            writes = writes or not op.delete
        return fields, writes

    def _prepare(self, conn: Any, table: _Table) -> dict[str, str]:
        """Create/evolve the table as configured; the record field → column name map."""
        fields, writes = self._fields(table)
        existing = self.db.columns(conn, table.name)
        if existing is None:
            if not writes:
                return {}  # only deletes, and nothing to delete from
            if not self.settings.auto_create:
                raise ConnectException(
                    f"table {str(table.name)!r} does not exist in {self.db.describe()}",
                    suggestion="create it, or set auto.create=true",
                )
            self._create(conn, table, fields)
            existing = self.db.columns(conn, table.name) or []
        names = {c.name: c.name for c in existing}

        def column_of(field: str) -> str | None:
            found = names.get(field)
            if found is None:  # MySQL: names match without regard to case
                found = next((c.name for c in existing if self.d.same_name(c.name, field)), None)
            return found

        missing = [f for f in fields if column_of(f) is None]
        if missing:
            if not self.settings.auto_evolve:
                raise ConnectException(
                    f"table {str(table.name)!r} has no column(s) {missing}",
                    suggestion="add them, or set auto.evolve=true",
                )
            for name in missing:
                self._add_column(conn, table, name)
            return self._prepare(conn, table)
        mapping = {f: column_of(f) or f for f in fields}
        if self.settings.insert_mode == "upsert" and writes:
            pk = {mapping[n] for n in self._pk_names(table)}
            if pk and pk not in self.db.unique_keys(conn, table.name):
                raise ConnectException(
                    f"table {str(table.name)!r} has no primary key or unique index on exactly "
                    f"({', '.join(sorted(pk))}): an upsert could not find the rows it replaces",
                    suggestion="add the key, or set pk.fields to the table's key columns",
                )
        return mapping

    def _field_sql(self, table: _Table, name: str, pk: bool) -> str:
        f = table.types.get(name)
        if f is None:
            raise ConnectException(
                f"table {str(table.name)!r}: cannot create column {name!r} without a type; "
                "auto.create and auto.evolve need record values with a schema (a struct)",
                suggestion="use a schema-carrying converter, or create the table yourself",
            )
        where = f"table {str(table.name)!r}: field {name!r}"
        return self.d.column_type(f.type, pk=pk, where=where)

    def _pk_names(self, table: _Table) -> list[str]:
        if self.settings.pk_mode == "none":
            return []
        if table.segments:
            return list(table.pk)
        for op in table.ops:
            return list(op.fields[: len(op.pk)]) if not op.delete else list(op.fields)
        return []

    def _create(self, conn: Any, table: _Table, fields: list[str]) -> None:
        pk = self._pk_names(table)
        lines = []
        for name in fields:
            f = table.types.get(name)
            null = "NOT NULL" if name in pk or (f is not None and not f.nullable) else "NULL"
            lines.append(f"{self.d.quote(name)} {self._field_sql(table, name, name in pk)} {null}")
        if pk:
            lines.append("PRIMARY KEY (" + ", ".join(self.d.quote(n) for n in pk) + ")")
        options = self.d.create_table_options
        sql = (
            f"CREATE TABLE IF NOT EXISTS {self.d.table(table.name)} (\n  "
            + ",\n  ".join(lines)
            + f"\n){options}"
        )
        log.info("auto.create: %s", sql)
        conn.exec_driver_sql(sql)

    def _add_column(self, conn: Any, table: _Table, name: str) -> None:
        from sqlalchemy.exc import DBAPIError

        sql = (
            f"ALTER TABLE {self.d.table(table.name)} ADD COLUMN "
            f"{self.d.quote(name)} {self._field_sql(table, name, False)} NULL"
        )
        log.info("auto.evolve: %s", sql)
        try:
            conn.exec_driver_sql(sql)
        except DBAPIError as exc:
            # Another task added it first (PostgreSQL 42701, MySQL 1060): that is fine.
            code = getattr(exc.orig, "sqlstate", None) or (exc.orig.args or [None])[0]
            if code not in ("42701", 1060):
                raise
            conn.rollback()

    # -- statements ---------------------------------------------------------------------------
    def _write_table(self, conn: Any, table: _Table, columns: dict[str, str]) -> None:
        if not columns:
            return
        if table.segments:
            self._write_columnar(conn, table, columns)
            return
        mode = self.settings.insert_mode
        if mode == "insert":
            for delete, fields, ops in _runs(table.ops):
                self._statement(conn, table, columns, "delete" if delete else "insert", fields, ops)
            return
        # upsert / update: the last record per key wins, so deletes and writes are disjoint
        last: dict[tuple, _Op] = {}
        for op in table.ops:
            last.pop(op.pk, None)
            last[op.pk] = op
        deletes = [op for op in last.values() if op.delete]
        if deletes:
            self._statement(conn, table, columns, "delete", deletes[0].fields, deletes)
        groups: dict[tuple[str, ...], list[_Op]] = {}
        for op in last.values():
            if not op.delete:
                groups.setdefault(op.fields, []).append(op)
        for fields, ops in groups.items():
            self._statement(conn, table, columns, mode, fields, ops)

    def _write_columnar(self, conn: Any, table: _Table, columns: dict[str, str]) -> None:
        """The columnar path: the same semantics as the per-record one, in Arrow."""
        try:
            data = pa.concat_tables(table.segments)
        except pa.ArrowInvalid:  # batches of different shapes: take the per-record path
            _segments_to_ops(table)
            self._write_table(conn, table, columns)
            return
        fields = [c for c in data.column_names if c not in _META]
        pk = list(table.pk)
        deleted = data.column(_DELETE)
        if self.settings.insert_mode == "insert":
            flags = deleted.to_pylist() if _count(deleted) else [False] * data.num_rows
            start = 0
            for i in range(1, len(flags) + 1):
                if i == len(flags) or flags[i] != flags[start]:
                    part = data.slice(start, i - start)
                    kind = "delete" if flags[start] else "insert"
                    self._emit(
                        conn,
                        table,
                        columns,
                        kind,
                        part.select(pk if flags[start] else fields),
                        len(pk),
                    )
                    start = i
            return
        # upsert / update: the last record per key wins
        last = _last_per_key(data, pk) if pk else None
        if last is not None:
            data = data.take(last)
        deleted = data.column(_DELETE)
        if _count(deleted):
            self._emit(conn, table, columns, "delete", data.filter(deleted).select(pk), len(pk))
        writes = data.filter(pc.invert(deleted)) if _count(deleted) else data
        if writes.num_rows:
            self._emit(
                conn, table, columns, self.settings.insert_mode, writes.select(fields), len(pk)
            )

    def _emit(
        self, conn: Any, table: _Table, columns: dict[str, str], kind: str, data: pa.Table, npk: int
    ) -> None:
        cols = [columns[f] for f in data.column_names]
        pk = cols if kind == "delete" else cols[:npk]
        self.d.write(self, conn, Write(table.name, kind, cols, pk, data))

    def _statement(
        self,
        conn: Any,
        table: _Table,
        columns: dict[str, str],
        kind: str,
        fields: tuple[str, ...],
        ops: list[_Op],
    ) -> None:
        cols = [columns[f] for f in fields]
        npk = len(ops[0].pk)
        pk = cols[:npk] if kind != "delete" else cols
        rows = [op.pk for op in ops] if kind == "delete" else [op.values for op in ops]
        self.d.write(self, conn, Write(table.name, kind, cols, pk, rows))

    def chunks(self, rows: list) -> Iterable[list]:
        """``rows`` in statements of at most `batch.size` rows and `MAX_STATEMENT_BYTES`."""
        limit = self.settings.batch_size
        chunk: list = []
        size = 0
        for row in rows:
            row_size = sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            if chunk and (len(chunk) >= limit or size + row_size > MAX_STATEMENT_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(row)
            size += row_size
        if chunk:
            yield chunk


def _runs(ops: list[_Op]) -> Iterable[tuple[bool, tuple[str, ...], list[_Op]]]:
    """Consecutive records of the same kind and fields (insert mode keeps record order)."""
    run: list[_Op] = []
    for op in ops:
        if run and (op.delete != run[0].delete or op.fields != run[0].fields):
            yield run[0].delete, run[0].fields, run
            run = []
        run.append(op)
    if run:
        yield run[0].delete, run[0].fields, run


def _last_per_key(data: pa.Table, pk: list[str]) -> pa.Array | None:
    """Row indices (ascending) of the last row of each key; None when no key repeats."""
    if len(pk) == 1:
        column = data.column(pk[0])
        if pa.types.is_integer(column.type) and not column.null_count:
            return _last_per_integer(column.to_numpy())
    try:
        numbered = data.append_column(_POS, pa.array(np.arange(data.num_rows, dtype=np.int64)))
        last = numbered.group_by(pk, use_threads=False).aggregate([(_POS, "max")])
        positions = last.column(f"{_POS}_max").combine_chunks()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        # key types Arrow cannot group by: do it in Python
        columns = [data.column(k).to_pylist() for k in pk]
        keys = [
            tuple(json.dumps(v, sort_keys=True, default=str) for v in key)
            for key in zip(*columns, strict=True)
        ]
        latest = {key: i for i, key in enumerate(keys)}
        return None if len(latest) == len(keys) else pa.array(sorted(latest.values()), pa.int64())
    if len(positions) == data.num_rows:
        return None
    return pc.take(positions, pc.sort_indices(positions))


def _last_per_integer(keys: np.ndarray) -> pa.Array | None:
    """`_last_per_key` for one integer key column, in numpy: a first load or an incrementing
    table arrives in key order, which one comparison pass proves free of repeats; otherwise a
    stable sort keeps each key's rows in arrival order, so the last of each run wins."""
    if len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1])):
        return None
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    last = np.empty(len(keys), dtype=bool)
    last[-1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    if bool(last.all()):
        return None
    return pa.array(np.sort(order[last]))


class JdbcSinkConnector(SinkConnector):
    """Writes records into MySQL/MariaDB or PostgreSQL tables (insert, upsert or update)."""

    config_def = SINK_CONFIG
    task_class = JdbcSinkTask

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """`connection.url`'s parameters that reach the driver (libpq, PyMySQL)."""
        return connection_client_options(config)

    @classmethod
    def delivery(cls, config: Mapping[str, str]) -> Delivery:
        """Exactly-once with insert.mode=upsert or update (idempotent writes); at-least-once
        with insert (a replayed micro-batch inserts its rows again)."""
        mode = config.get("insert.mode", "insert").strip().lower()
        return Delivery.AT_LEAST_ONCE if mode == "insert" else Delivery.EXACTLY_ONCE

    def validate(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        settings = SinkSettings.parse(config)
        # One attempt: a database that is down is reported at once (see the source's validate).
        Database(settings.connection).check(attempts=1)

    def start(self, config: Mapping[str, str]) -> None:
        # Cheap on purpose: the runtime starts a connector on the driver for every commit.
        super().start(config)
        self.settings = SinkSettings.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
