"""The change-event envelope every CDC connector emits (Debezium's shape), and its key.

Value (one schema per table, named `<topic>.Envelope`)::

    before   struct of the table's columns (all optional) | null   — the row before the change
    after    struct of the table's columns | null                  — the row after the change
    source   struct: version, connector, name, ts_ms, db, schema, table, txId, lsn, file, pos, gtid
    op       "c" create, "u" update, "d" delete, "r" read (snapshot)
    ts_ms    when the connector built the event (ms since the epoch)

Key: the primary key as JSON object text (`{"id": 5}`), values tagged as in
`sluice.connectors._sql.values.encode` when JSON has no type for them. Debezium's key is a struct;
sluice's connector has one key schema for all its tables, so the key is text. An update that
changes the primary key is emitted as a delete of the old key followed by a create of the new one
(as Debezium does), so a keyed consumer never sees one key turn into another.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors._sql.dialect import UnmappableType
from sluice.connectors._sql.values import encode
from sluice.connectors.cdc._evolve import optional_columns
from sluice.sdk import ConfigException, FieldType, Schema

SOURCE_SCHEMA = Schema.struct(
    ("version", Schema.string()),
    ("connector", Schema.string()),
    ("name", Schema.string()),
    ("ts_ms", Schema.of(FieldType.INT64)),
    ("db", Schema.string()),
    ("schema", Schema.string()),
    ("table", Schema.string()),
    ("txId", Schema.of(FieldType.INT64)),
    ("lsn", Schema.of(FieldType.INT64)),
    ("file", Schema.string()),
    ("pos", Schema.of(FieldType.INT64)),
    ("gtid", Schema.string()),
    optional=False,
    name="sluice.cdc.Source",
)
SOURCE_VERSION = "sluice-cdc-1"
#: The field names of an envelope, as a sink recognises it.
ENVELOPE_FIELDS = ("before", "after", "source", "op", "ts_ms")


def envelope_schema(topic: str, columns: Sequence[tuple[str, Schema]]) -> Schema:
    """The value schema of `topic`'s change events for a table of `columns` (name, schema)."""
    after = Schema.struct(*columns, optional=True, name=f"{topic}.Value")
    before = Schema.struct(
        *[(name, replace(s, optional=True)) for name, s in columns],
        optional=True,
        name=f"{topic}.Value",
    )
    return Schema.struct(
        ("before", before),
        ("after", after),
        ("source", SOURCE_SCHEMA),
        ("op", Schema.string(optional=False)),
        ("ts_ms", Schema.of(FieldType.INT64)),
        optional=False,
        name=f"{topic}.Envelope",
    )


def source_block(connector: str, name: str, db: str | None, table: str, **known: Any) -> dict:
    """A `source` value: the connector, its `topic.prefix`, database and table, and whichever
    of `ts_ms` (default now), `schema`, `txId`, `lsn`, `file`, `pos`, `gtid` are `known`."""
    fields = dict.fromkeys(("schema", "txId", "lsn", "file", "pos", "gtid"))
    fields.update(known)
    return {
        "version": SOURCE_VERSION,
        "connector": connector,
        "name": name,
        "ts_ms": known.get("ts_ms", int(time.time() * 1000)),
        "db": db,
        "table": table,
        **{k: v for k, v in fields.items() if k != "ts_ms"},
    }


def key_text(row: dict[str, Any], pk: Sequence[str]) -> str:
    """The record key of a row: its primary key as JSON object text, in key order."""
    return json.dumps({name: encode(row.get(name)) for name in pk}, separators=(",", ":"))


def key_texts(rows: pa.StructArray, pk: Sequence[str]) -> pa.Array:
    """`key_text` of every row of a struct array, column by column: an integer key column as
    Arrow's text of it (which is JSON's), any other one value at a time through `encode`."""
    parts: list[Any] = []
    for i, name in enumerate(pk):
        column = rows.field(name)
        if pa.types.is_integer(column.type):
            text = pc.cast(column, pa.string())
        else:
            dumps = [json.dumps(encode(v), separators=(",", ":")) for v in column.to_pylist()]
            text = pa.array(dumps, pa.string())
        parts += [("{" if i == 0 else ",") + json.dumps(name) + ":", text]
    return pc.binary_join_element_wise(*parts, "}", "")


def is_envelope(names: Sequence[str]) -> bool:
    """True if a struct with these field names is a change-event envelope."""
    return {"before", "after", "op"} <= set(names)


def describe_table(
    db: Any, conn: Any, table: Any, prefix: str, delimiter: str = "."
) -> dict[str, Any]:
    """What a CDC task needs of one captured table (`db` is the JDBC connector's database
    helper): its topic, primary key and mapped columns (a column with a database default is
    optional, see `sluice.connectors.cdc._evolve`); a clear error naming the table when it
    does not exist, has no primary key, or has a column no type maps."""
    columns = db.columns(conn, table)
    if columns is None:
        raise ConfigException("table.include.list", f"there is no table {table} on {db.describe()}")
    pk = db.primary_key(conn, table)
    if not pk:
        raise ConfigException(
            "table.include.list",
            f"table {table} has no primary key; change events are keyed by it",
            suggestion=f"add a primary key to {table}, or exclude it (table.exclude.list)",
        )
    # A column with a default is optional: events logged before it was added carry none.
    defaulted = optional_columns(conn, table.schema, table.name) - set(pk)
    mapped, convs = [], {}
    for column in columns:
        try:
            m = db.dialect.map_column(column)
        except UnmappableType as exc:
            raise ConfigException(
                "table.include.list", f"table {table}, column {column.name!r}: {exc}"
            ) from None
        schema = replace(m.schema, optional=True) if m.name in defaulted else m.schema
        mapped.append([m.name, schema.to_json()])
        convs[m.name] = [m.conv, m.cast_text]
    return {
        "table": str(table),
        "topic": delimiter.join((prefix, table.schema, table.name)),
        "pk": pk,
        "columns": mapped,
        # how the JDBC dialect's page reads each column (a snapshot chunk read as Arrow)
        "convs": convs,
    }
