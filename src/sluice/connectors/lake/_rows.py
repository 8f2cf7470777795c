"""From the sink frame to table rows: the columns every lake sink writes, and its partitions.

A row is the record's value spread into columns (a struct's fields, or a JSON object's keys when
the value is JSON text), plus the record's metadata (`record.metadata=true`, the default):
`_topic`, `_queue_id`, `_queue_offset`, `_key`, `_timestamp` and `_headers` (JSON object text).
`value.format=raw` keeps the value whole in one `value` column instead.

Partitions: `partition.fields` names row columns; `partition.time.format` (a `strftime` pattern,
e.g. `%Y-%m-%d`) fills the column `partition.time.column` from `partition.time.field` (a
timestamp column; default the record's timestamp) and partitions by it, after the fields.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from sluice.connectors.lake._config import ROLL_CONFIG, RowSettings
from sluice.sdk import ConfigException, ConnectException


class RollInterval:
    """A lake sink's `roll.interval.ms` as its micro-batch interval: each micro-batch is one
    exactly-once commit, so rolling less often means fewer, larger micro-batches, not files
    held open across commits (docs/lake.md, *Roll interval*)."""

    config: dict[str, str]

    def micro_batch_interval_ms(self) -> int | None:
        return ROLL_CONFIG.parse(self.config)["roll.interval.ms"] or None


#: the metadata columns, from the sink frame's columns
METADATA = {
    "_topic": "topic",
    "_queue_id": "queue_id",
    "_queue_offset": "queue_offset",
    "_key": "key",
    "_timestamp": "timestamp",
    "_headers": "headers",
}


def _where(batch: pa.RecordBatch, row: int) -> str:
    names = batch.schema.names
    get = {
        n: batch.column(n)[row].as_py() for n in ("topic", "queue_id", "queue_offset") if n in names
    }
    return (
        f"record {{topic={get.get('topic')!r}, queue={get.get('queue_id')}, "
        f"offset={get.get('queue_offset')}}}"
    )


def _json_objects(batch: pa.RecordBatch, values: pa.Array) -> pa.Table:
    """Parse JSON object text (one per record; null → no fields) into columns, in C++."""
    text = pc.fill_null(values.cast(pa.binary()), b"{}")
    lines = pc.binary_join_element_wise(text, pa.scalar(b"", pa.binary()), b"\n")
    # a freshly computed array starts at offset 0: its data buffer's first `size` bytes are
    # the lines, read where they are (no copy)
    size = pc.sum(pc.binary_length(lines)).as_py() or 0
    try:
        # one block: types are inferred over the whole batch, not per megabyte of it
        options = pajson.ReadOptions(block_size=max(size, 1 << 20) + 1)
        table = pajson.read_json(
            pa.BufferReader(lines.buffers()[2].slice(0, size)), read_options=options
        )
    except pa.ArrowInvalid as exc:
        raise _bad_json(batch, values, exc) from None
    if table.num_rows != batch.num_rows:
        raise _bad_json(batch, values, ValueError("not one JSON object per record"))
    return table


def _bad_json(batch: pa.RecordBatch, values: pa.Array, exc: Exception) -> ConnectException:
    for i, text in enumerate(values.to_pylist()):
        if text is None:
            continue
        try:
            parsed = json.loads(text)
        except ValueError as err:
            return ConnectException(f"{_where(batch, i)}: value is not JSON: {err}")
        if not isinstance(parsed, dict):
            return ConnectException(
                f"{_where(batch, i)}: value is a JSON {type(parsed).__name__}, not an object",
                suggestion="set value.format=raw to keep values whole",
            )
    return ConnectException(f"values of {_where(batch, 0)} and after do not parse: {exc}")


def _value_columns(batch: pa.RecordBatch, settings: RowSettings) -> list[tuple[str, pa.Array]]:
    value = batch.column("value")
    if settings.raw:
        return [("value", value)]
    if pa.types.is_struct(value.type):
        valid = value.is_valid()
        return [
            (f.name, pc.if_else(valid, value.field(i), pa.nulls(len(value), f.type)))
            for i, f in enumerate(value.type)
        ]
    if pa.types.is_null(value.type):
        return []
    if value.type in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        table = _json_objects(batch, value)
        return [(name, table.column(name).combine_chunks()) for name in table.column_names]
    raise ConnectException(
        f"{_where(batch, 0)}: a value of type {value.type} has no fields",
        suggestion="set value.format=raw to write it in one `value` column",
    )


def to_rows(batch: pa.RecordBatch, settings: RowSettings) -> pa.Table:
    """The table rows of one sink frame batch, with their partition columns."""
    columns = _value_columns(batch, settings)
    if settings.metadata:
        names = batch.schema.names
        columns += [(col, batch.column(src)) for col, src in METADATA.items() if src in names]
    seen: set[str] = set()
    for name, _ in columns:
        if name in seen:
            raise ConnectException(
                f"{_where(batch, 0)}: the value has a field {name!r}, which is also a metadata "
                "column",
                suggestion="set record.metadata=false, or rename the field with a transform",
            )
        seen.add(name)
    table = pa.table(dict(columns)) if columns else pa.table({"value": batch.column("value")})
    return _with_partitions(table, batch, settings)


def _with_partitions(table: pa.Table, batch: pa.RecordBatch, settings: RowSettings) -> pa.Table:
    for name in settings.fields:
        if name not in table.column_names:
            raise ConfigException(
                "partition.fields",
                f"field {name!r} is not in {_where(batch, 0)} (its columns: "
                f"{', '.join(table.column_names)})",
            )
    if not settings.time_format:
        return table
    if settings.time_field:
        if settings.time_field not in table.column_names:
            raise ConfigException(
                "partition.time.field",
                f"field {settings.time_field!r} is not in {_where(batch, 0)}",
            )
        times = table.column(settings.time_field)
    else:
        times = batch.column("timestamp")
    if not pa.types.is_timestamp(times.type):
        raise ConfigException(
            "partition.time.field",
            f"field {settings.time_field or 'timestamp'!r} is a {times.type}, not a timestamp",
        )
    if times.type.tz is None:
        times = times.cast(pa.timestamp(times.type.unit, tz="UTC"))
    stamped = pc.strftime(times, format=settings.time_format)
    return table.append_column(settings.time_column, stamped)


_UNSIGNED = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}


def _lake_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_null(t):
        return pa.string()  # a column with no value yet: table formats have no null type
    if t in _UNSIGNED:
        return _UNSIGNED[t]
    if t == pa.uint64():
        return pa.decimal128(20, 0)
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return pa.timestamp("us", tz=t.tz)  # Delta and Iceberg (v2) keep microseconds
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_lake_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(_lake_type(t.value_type)))
    return t


def lake_types(table: pa.Table) -> pa.Table:
    """`table` with types every table format stores (no null or unsigned columns)."""
    schema = pa.schema([f.with_type(_lake_type(f.type)) for f in table.schema])
    return table if schema.equals(table.schema) else table.cast(schema)
