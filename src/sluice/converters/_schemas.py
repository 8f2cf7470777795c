"""Schemas as converters need them: Kafka Connect's JSON form, Arrow types, one-line descriptions.

The **Connect JSON form** is the schema shape of Kafka Connect's `JsonConverter` envelope
(`{"type": "struct", "fields": [{"field": "id", "type": "int32", "optional": false}, …]}`), with
logical types as named schemas (`org.apache.kafka.connect.data.Decimal` + `parameters.scale`,
`…Date`, `…Time`, `…Timestamp`). It is also what the schema registry stores, so one text names one
schema everywhere (registry id, Avro writer schema derivation). Time and Timestamp keep Kafka's
names but carry sluice's microseconds, so both are `int64` here (Kafka's Time is an `int32` of
milliseconds); `to_connect(schema, kafka=True)` gives the form Kafka's JsonConverter writes and
reads, with Time as `int32`, for the JSON envelope, whose payload carries milliseconds.

Arrow types come in two flavours here: `arrow_type` (logical, every field nullable: what decoders
return) and `physical_type` (dates as int32 days, times and timestamps as int64 microseconds): what
per-record Python code reads and builds, because Python's `date`/`datetime` cannot hold every value
Arrow can (year 0 or 10000), and ints are faster anyway.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sluice.sdk import Field, FieldType, Logical, Schema

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
#: Kafka Connect's decimal schema carries only the scale; JDBC connectors add the precision here.
PRECISION_PARAMETER = "connect.decimal.precision"

_LOGICAL_NAMES = {
    Logical.DECIMAL: DECIMAL,
    Logical.DATE: DATE,
    Logical.TIME: TIME,
    Logical.TIMESTAMP: TIMESTAMP,
}
_BY_NAME = {name: logical for logical, name in _LOGICAL_NAMES.items()}
_PHYSICAL = {
    Logical.DECIMAL: FieldType.BYTES,
    Logical.DATE: FieldType.INT32,
    Logical.TIME: FieldType.INT64,
    Logical.TIMESTAMP: FieldType.INT64,
}


class SchemaFormatError(ValueError):
    """A Connect JSON schema that cannot be read (the message says where)."""


# -- Connect JSON form -----------------------------------------------------------------------------
def to_connect(schema: Schema, *, kafka: bool = False) -> dict[str, Any]:
    """The Kafka Connect JSON form of `schema`; `kafka` writes Time as Kafka's `int32` (of
    milliseconds: what JsonConverter's payload carries) instead of sluice's `int64`."""
    type_ = schema.type
    if kafka and schema.logical is Logical.TIME:
        type_ = FieldType.INT32
    out: dict[str, Any] = {"type": type_.value.lower(), "optional": schema.optional}
    if schema.logical is not None:
        out["name"] = _LOGICAL_NAMES[schema.logical]
        out["version"] = 1
        if schema.logical is Logical.DECIMAL:
            out["parameters"] = {
                "scale": str(schema.scale),
                PRECISION_PARAMETER: str(schema.precision),
            }
    elif schema.name:
        out["name"] = schema.name
    if schema.type is FieldType.STRUCT:
        out["fields"] = [
            {"field": f.name, **to_connect(f.schema, kafka=kafka)} for f in schema.fields
        ]
    elif schema.type is FieldType.ARRAY:
        out["items"] = to_connect(_child(schema.value_schema, schema), kafka=kafka)
    elif schema.type is FieldType.MAP:
        out["keys"] = to_connect(_child(schema.key_schema, schema), kafka=kafka)
        out["values"] = to_connect(_child(schema.value_schema, schema), kafka=kafka)
    return out


def canonical(schema: Schema, *, kafka: bool = False) -> str:
    """The Connect JSON form as canonical text (sorted keys, no spaces): one text per schema."""
    return json.dumps(to_connect(schema, kafka=kafka), sort_keys=True, separators=(",", ":"))


def from_connect(data: Any, path: str = "schema") -> Schema:
    """Read a Kafka Connect JSON schema; `SchemaFormatError` names the offending path."""
    if not isinstance(data, dict):
        raise SchemaFormatError(f"{path}: expected an object, got {type(data).__name__}")
    raw_type = data.get("type")
    try:
        type_ = FieldType(str(raw_type).upper())
    except ValueError:
        raise SchemaFormatError(f"{path}.type: unknown type {raw_type!r}") from None
    optional = data.get("optional", False)
    if not isinstance(optional, bool):
        raise SchemaFormatError(f"{path}.optional: expected true or false, got {optional!r}")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise SchemaFormatError(f"{path}.name: expected a string, got {name!r}")
    logical = _BY_NAME.get(name) if name else None
    if logical is not None:
        if _PHYSICAL[logical] is not type_:
            # Reading an int32 Time as microseconds would be off by 1000: refuse it instead.
            hint = (
                " (sluice's Time is int64 microseconds; an int32 Time is Kafka's milliseconds)"
                if logical is Logical.TIME
                else ""
            )
            raise SchemaFormatError(
                f"{path}: {name} must have type {_PHYSICAL[logical].value.lower()}, "
                f"not {type_.value.lower()}{hint}"
            )
        if logical is Logical.DECIMAL:
            return _decimal(data, path, optional)
        return Schema(type_, optional=optional, logical=logical)
    if type_ is FieldType.STRUCT:
        fields = data.get("fields", [])
        if not isinstance(fields, list):
            raise SchemaFormatError(f"{path}.fields: expected a list")
        members = []
        for i, f in enumerate(fields):
            if not isinstance(f, dict) or not isinstance(f.get("field"), str):
                raise SchemaFormatError(f"{path}.fields[{i}]: needs a string 'field' name")
            members.append(Field(f["field"], from_connect(f, f"{path}.fields[{i}]")))
        try:
            return Schema.struct(*members, optional=optional, name=name)
        except ValueError as exc:
            raise SchemaFormatError(f"{path}: {exc}") from None
    if type_ is FieldType.ARRAY:
        items = from_connect(data.get("items"), f"{path}.items")
        return Schema(type_, optional=optional, name=name, value_schema=items)
    if type_ is FieldType.MAP:
        keys = from_connect(data.get("keys"), f"{path}.keys")
        values = from_connect(data.get("values"), f"{path}.values")
        return Schema(type_, optional=optional, name=name, key_schema=keys, value_schema=values)
    return Schema(type_, optional=optional, name=name)


def _decimal(data: dict, path: str, optional: bool) -> Schema:
    params = data.get("parameters") or {}
    if not isinstance(params, dict):
        raise SchemaFormatError(f"{path}.parameters: expected an object")
    try:
        scale = int(params.get("scale", 0))
        precision = int(params.get(PRECISION_PARAMETER, 38))
    except (TypeError, ValueError):
        raise SchemaFormatError(
            f"{path}.parameters: scale and precision must be integers"
        ) from None
    try:
        return Schema.decimal(precision, scale, optional=optional)
    except ValueError as exc:
        raise SchemaFormatError(f"{path}: {exc}") from None


def _child(child: Schema | None, parent: Schema) -> Schema:
    if child is None:
        raise SchemaFormatError(f"{parent.type.value} schema is missing its element schema")
    return child


# -- Arrow -----------------------------------------------------------------------------------------
def arrow_type(schema: Schema, *, physical: bool = False) -> pa.DataType:
    """The Arrow type of `schema` with every field nullable; `physical` keeps dates, times and
    timestamps as their integers (int32 days, int64 µs of the day, int64 µs since the epoch)."""
    if schema.logical is Logical.DATE:
        return pa.int32() if physical else pa.date32()
    if schema.logical is Logical.TIME:
        return pa.int64() if physical else pa.time64("us")
    if schema.logical is Logical.TIMESTAMP:
        return pa.int64() if physical else pa.timestamp("us", tz="UTC")
    if schema.type is FieldType.ARRAY:
        return pa.list_(arrow_type(_child(schema.value_schema, schema), physical=physical))
    if schema.type is FieldType.MAP:
        return pa.map_(
            arrow_type(_child(schema.key_schema, schema), physical=physical),
            arrow_type(_child(schema.value_schema, schema), physical=physical),
        )
    if schema.type is FieldType.STRUCT:
        return pa.struct(
            [pa.field(f.name, arrow_type(f.schema, physical=physical)) for f in schema.fields]
        )
    return schema.to_arrow()


def physical_type(schema: Schema) -> pa.DataType:
    """`arrow_type(schema, physical=True)`."""
    return arrow_type(schema, physical=True)


def to_physical(array: pa.Array, schema: Schema) -> pa.Array:
    """`array` (any Arrow form of `schema`: time64 of any unit or int64 times, any time zone, large
    strings…) cast to its physical type; a time64[ns] with sub-microsecond digits raises."""
    target = physical_type(schema)
    if array.type == target:
        return array
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    # Two steps: to the logical type first (a zoned timestamp or a time64 cannot always go to its
    # integer directly inside nested types), then to the integers.
    logical = arrow_type(schema)
    if array.type != logical:
        array = array.cast(logical)
    return array.cast(target)


def from_physical(values: list[Any], schema: Schema) -> pa.Array:
    """Python values in physical form → an Arrow array of `arrow_type(schema)`."""
    return pa.array(values, type=physical_type(schema)).cast(arrow_type(schema))


# -- descriptions ----------------------------------------------------------------------------------
def describe(schema: Schema) -> str:
    """A short readable form for messages: `struct<id:int32,price:decimal(10,2)>`."""
    if schema.logical is Logical.DECIMAL:
        return f"decimal({schema.precision},{schema.scale})"
    if schema.logical is not None:
        return schema.logical.value.lower()
    if schema.type is FieldType.ARRAY:
        return f"array<{describe(_child(schema.value_schema, schema))}>"
    if schema.type is FieldType.MAP:
        k, v = _child(schema.key_schema, schema), _child(schema.value_schema, schema)
        return f"map<{describe(k)},{describe(v)}>"
    if schema.type is FieldType.STRUCT:
        return "struct<" + ",".join(f"{f.name}:{describe(f.schema)}" for f in schema.fields) + ">"
    return schema.type.value.lower()


def walk(schema: Schema) -> list[Schema]:
    """`schema` and every schema nested in it."""
    out = [schema]
    for child in (schema.key_schema, schema.value_schema, *(f.schema for f in schema.fields)):
        if child is not None:
            out.extend(walk(child))
    return out
