"""AvroConverter: Avro binary with the writer schema's registry id in front (Confluent's framing).

Each message is `0x00`, the 4-byte big-endian id of the writer schema in the schema registry, then
the Avro binary encoding of the value (fastavro). The id names a Connect schema (the registry stores
those); its Avro form is derived from it by `avro_schema`, deterministically.
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.converters import _avro_vector
from sluice.converters._base import (
    Converter,
    Decoded,
    Decoder,
    Encoder,
    RecordError,
    SchemaRegistry,
    string_errors,
)
from sluice.converters._compatibility import read_problems
from sluice.converters._json import _unscaled_bytes, decimal_of
from sluice.converters._schemas import (
    arrow_type,
    canonical,
    describe,
    from_connect,
    from_physical,
    physical_type,
    to_physical,
)
from sluice.sdk import ConfigException, FieldType, Logical, Schema
from sluice.sdk.extras import AVRO, require

MAGIC = b"\x00"
MICROS_PER_DAY = 86_400_000_000
_INVALID = re.compile(r"[^A-Za-z0-9_]")
_AVRO_PRIMITIVES = {
    FieldType.INT8: "int",
    FieldType.INT16: "int",
    FieldType.INT32: "int",
    FieldType.INT64: "long",
    FieldType.FLOAT32: "float",
    FieldType.FLOAT64: "double",
    FieldType.BOOLEAN: "boolean",
    FieldType.STRING: "string",
    FieldType.BYTES: "bytes",
}
_SMALL_INTS = {FieldType.INT8: (-(2**7), 2**7 - 1), FieldType.INT16: (-(2**15), 2**15 - 1)}


class _Bad(ValueError):
    """A value that does not fit its schema."""


class AvroConverter(Converter):
    """Avro (fastavro) with writer schemas versioned per topic in sluice's schema registry.

    Sources register the Connect schema of what they write under `<topic>-key` / `<topic>-value`
    and prefix every message with `0x00` + the schema's 4-byte id (Confluent's wire format, so
    `io.confluent.connect.avro.AvroConverter` is accepted as an alias; its `schema.registry.url`
    is accepted and ignored: the registry is sluice's own). Sinks decode with the writer schema the
    id names, resolved to the topic's latest registered schema (Avro's rules: fields the sink does
    not know are dropped, missing optional fields are null); a fused sink takes a newer version at
    its next micro-batch (`sluice.engine.sink.SinkRunner.codecs`), others when they start. An id
    the registry does not know is an error for that record; so is a writer version the sink's
    cannot read (the message says the versions are incompatible, see `_compatibility`).

    Mapping: INT8/INT16 → int (`"connect.type": "int8"`), INT32 → int, INT64 → long, FLOAT32 →
    float, FLOAT64 → double, BOOLEAN, STRING, BYTES; Decimal(p, s) → bytes `decimal`; Date →
    int `date`; Time → long `time-micros` (exact); Timestamp → long `timestamp-micros` (exact);
    optional → `["null", T]` with default null; maps with STRING keys → map, others → array of
    `{key,value}` records. Field names that Avro does not allow are rewritten (`_` for invalid
    characters) in the Avro schema only; records keep their names. Every type round-trips exactly.
    Flat schemas (a struct of leaves, or one leaf) and structs nested in structs (a CDC
    envelope) run vectorised with numpy (`_avro_vector`) both ways; arrays and maps per record in
    Python (fastavro), to the same bytes; no Spark SQL form.
    """

    uses_registry = True
    decodes_in_sql = False
    requires = (AVRO,)

    def needs_schema(self) -> bool:
        return True

    def _registry(self) -> SchemaRegistry:
        if self.registry is None:
            raise ConfigException(self.key, f"{self.name} needs the runtime's schema registry")
        return self.registry

    def encoder(self, schema: Schema) -> Encoder:
        schema_id = self._registry().schema_id(canonical(schema))
        return _AvroEncoder(self.name, self.role, schema, schema_id)

    def decoder(self, schema: Schema | None) -> Decoder:
        if schema is None:
            raise ValueError("AvroConverter needs a schema")
        registry = self._registry()
        return _AvroDecoder(
            self.name, self.role, schema, registry.schema_id(canonical(schema)), registry
        )


# -- Avro schemas ----------------------------------------------------------------------------------
def avro_name(name: str) -> str:
    """`name` as a valid Avro name (invalid characters → `_`, no leading digit)."""
    out = _INVALID.sub("_", name) or "_"
    return "_" + out if out[0].isdigit() else out


class _Names:
    """Record names, unique within one Avro schema."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, wanted: str) -> str:
        name, n = avro_name(wanted), 1
        while name in self.used:
            n += 1
            name = f"{avro_name(wanted)}_{n}"
        self.used.add(name)
        return name


def field_names(schema: Schema) -> list[str]:
    """The Avro names of a struct's fields, in order (made unique after rewriting)."""
    used: set[str] = set()
    out = []
    for f in schema.fields:
        name, n = avro_name(f.name), 1
        while name in used:
            n += 1
            name = f"{avro_name(f.name)}_{n}"
        used.add(name)
        out.append(name)
    return out


def avro_schema(schema: Schema, role: str = "value") -> Any:
    """The Avro schema (JSON-able) of a Connect schema; the top level is never a null union."""
    return _avro(schema, role.capitalize(), _Names(), top=True)


def _avro(s: Schema, path: str, names: _Names, top: bool = False) -> Any:
    out = _avro_type(s, path, names)
    return out if top or not s.optional else ["null", out]


def _avro_type(s: Schema, path: str, names: _Names) -> Any:
    if s.logical is Logical.DECIMAL:
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": s.precision,
            "scale": s.scale,
        }
    if s.logical is Logical.DATE:
        return {"type": "int", "logicalType": "date"}
    if s.logical is Logical.TIME:
        return {"type": "long", "logicalType": "time-micros"}
    if s.logical is Logical.TIMESTAMP:
        return {"type": "long", "logicalType": "timestamp-micros"}
    if s.type in _SMALL_INTS:
        return {"type": "int", "connect.type": s.type.value.lower()}
    if s.type in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[s.type]
    if s.type is FieldType.STRUCT:
        record = names.take(s.name.rsplit(".", 1)[-1] if s.name else path)
        fields = []
        for f, aname in zip(s.fields, field_names(s), strict=True):
            entry: dict[str, Any] = {
                "name": aname,
                "type": _avro(f.schema, f"{record}_{aname}", names),
            }
            if f.schema.optional:
                entry["default"] = None
            fields.append(entry)
        return {"type": "record", "name": record, "fields": fields}
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        return {"type": "array", "items": _avro(s.value_schema, f"{path}_item", names)}
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        if s.key_schema.type is FieldType.STRING and s.key_schema.logical is None:
            return {"type": "map", "values": _avro(s.value_schema, f"{path}_value", names)}
        entry_name = names.take(f"{path}_entry")
        return {
            "type": "array",
            "items": {
                "type": "record",
                "name": entry_name,
                "fields": [
                    {"name": "key", "type": _avro(s.key_schema, f"{entry_name}_key", names)},
                    {"name": "value", "type": _avro(s.value_schema, f"{entry_name}_value", names)},
                ],
            },
        }
    raise ValueError(f"no Avro form for {describe(s)}")


def _plain(avro: Any) -> Any:
    """The same Avro schema without logical types: fastavro then reads the raw ints and bytes,
    which sluice turns into Arrow values exactly (and with no Python date range limits)."""
    if isinstance(avro, list):
        return [_plain(a) for a in avro]
    if isinstance(avro, dict):
        if "logicalType" in avro:
            return avro["type"]
        return {k: _plain(v) for k, v in avro.items()}
    return avro


@functools.cache
def _fastavro(role: str) -> Any:
    """fastavro (the ``avro`` extra), imported on first use; missing, an error naming the key."""
    return require(AVRO, "AvroConverter", key=f"{role}.converter")


def _parsed(schema: Schema, role: str) -> Any:
    return _fastavro(role).parse_schema(_plain(avro_schema(schema, role)))


# -- encoding --------------------------------------------------------------------------------------
class _AvroEncoder(Encoder):
    """Flat and nested-struct schemas (see `_avro_vector`) are written column by column with
    numpy; others (arrays, maps) per record with fastavro. Both write the same bytes."""

    arrow_mode = "per-record"

    def __init__(self, converter: str, role: str, schema: Schema, schema_id: int) -> None:
        super().__init__(converter, role, schema)
        self.schema_id = schema_id
        self._state: tuple[Any, Callable[[Any], Any]] | None = None
        self._columns = _avro_vector.encodable_columns(schema)
        if self._columns is not None:
            self.arrow_mode = "vectorised"

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_state"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._state = None

    def arrow(self, array: pa.Array) -> pa.Array:
        header = MAGIC + self.schema_id.to_bytes(4, "big")
        physical = to_physical(array, self.schema)
        if self._columns is not None:
            try:
                out = _avro_vector.encode(physical, self._columns, header)
            except _avro_vector.NullInRequired as exc:
                reason = f"{self.role}.{exc.label} is null, but its schema is not optional"
                raise RecordError(exc.index, reason) from None
            if out is not None:
                return out
        return self._per_record(physical, header)

    def _per_record(self, physical: pa.Array, header: bytes) -> pa.Array:
        """fastavro, one record at a time (any schema)."""
        if self._state is None:
            self._state = (_parsed(self.schema, self.role), _to_avro(self.schema, self.role))
        parsed, convert = self._state
        write = _fastavro(self.role).schemaless_writer
        buf = io.BytesIO()
        out: list[bytes | None] = []
        for i, value in enumerate(physical.to_pylist()):
            if value is None:
                out.append(None)
                continue
            buf.seek(0)
            buf.truncate()
            try:
                write(buf, parsed, convert(value))
            except _Bad as exc:
                raise RecordError(i, str(exc)) from None
            except (ValueError, TypeError, OverflowError) as exc:
                raise RecordError(i, f"{self.role} does not fit its Avro schema: {exc}") from None
            out.append(header + buf.getvalue())
        return pa.array(out, pa.binary())


def _to_avro(s: Schema, where: str) -> Callable[[Any], Any]:
    """A function: physical Python value (not None) → the Avro datum fastavro writes."""
    if s.logical is Logical.DECIMAL:
        scale = s.scale
        return lambda v: _unscaled_bytes(v, scale)
    if s.logical is not None:
        return _same
    if s.type is FieldType.STRUCT:
        fields = [
            (f.name, aname, f.name, f.schema.optional, _to_avro(f.schema, f"{where}.{f.name}"))
            for f, aname in zip(s.fields, field_names(s), strict=True)
        ]
        return _struct(fields, where)
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        item = _to_avro(s.value_schema, f"{where}[]")
        return lambda v: [None if x is None else item(x) for x in v]
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        key = _to_avro(s.key_schema, f"{where}{{}}")
        val = _to_avro(s.value_schema, f"{where}{{}}")
        if s.key_schema.type is FieldType.STRING and s.key_schema.logical is None:
            return lambda v: {k: None if x is None else val(x) for k, x in v}
        return lambda v: [{"key": key(k), "value": None if x is None else val(x)} for k, x in v]
    return _same


def _same(v: Any) -> Any:
    return v


# -- decoding --------------------------------------------------------------------------------------
class _AvroDecoder(Decoder):
    arrow_mode = "per-record"

    def __init__(
        self,
        converter: str,
        role: str,
        schema: Schema,
        schema_id: int,
        registry: SchemaRegistry,
    ) -> None:
        super().__init__(converter, role, schema)
        self.schema_id = schema_id
        self.registry = registry
        self._writers: dict[int, tuple[Any, Any] | None] = {}
        self._flat_writers: dict[int, tuple[Schema, list] | None] = {}
        self._reader: tuple[Any, Callable[[Any], Any]] | None = None
        self._columns = _avro_vector.encodable_columns(schema)
        if self._columns is not None:
            self.arrow_mode = "vectorised"

    def __getstate__(self) -> dict:
        caches = ("_writers", "_flat_writers", "_reader")
        return {k: v for k, v in self.__dict__.items() if k not in caches}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._writers = {}
        self._flat_writers = {}
        self._reader = None

    def _writer(self, schema_id: int) -> tuple[Any, Any] | None:
        """(writer schema, reader schema or None) for an id; None when the registry lacks it."""
        if schema_id not in self._writers:
            text = self.registry.by_id(schema_id)
            if text is None:
                self._writers[schema_id] = None
            else:
                writer = _parsed(from_connect(json.loads(text)), self.role)
                reader = None if schema_id == self.schema_id else self._planned()[0]
                self._writers[schema_id] = (writer, reader)
        return self._writers[schema_id]

    def _planned(self) -> tuple[Any, Callable[[Any], Any]]:
        if self._reader is None:
            self._reader = (_parsed(self.schema, self.role), _from_avro(self.schema, self.role))
        return self._reader

    def arrow(self, array: pa.Array) -> Decoded:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        array = array.cast(pa.binary())
        if self._columns is None:
            values, reasons = self._per_record(array.to_pylist())
            return Decoded(from_physical(values, self.schema), string_errors(reasons))
        header = MAGIC + self.schema_id.to_bytes(4, "big")
        physical, undecoded = _avro_vector.decode(array, self._columns, header, self.schema)
        if undecoded.any():
            physical, undecoded = self._older_versions(array, physical, undecoded)
        out = physical.cast(arrow_type(self.schema))
        if not undecoded.any():
            return Decoded(out, None)
        # Records the vectorised reader left (an unknown or unresolvable schema id, bad bytes):
        # fastavro, one at a time, so their values and error texts are the per-record path's.
        rows = np.nonzero(undecoded)[0]
        values, found = self._per_record(array.take(pa.array(rows)).to_pylist())
        merged = _merge(out, rows, from_physical(values, self.schema))
        reasons: list[str | None] = [None] * len(array)
        for row, reason in zip(rows.tolist(), found, strict=True):
            reasons[row] = reason
        return Decoded(merged, string_errors(reasons))

    def _older_versions(
        self, array: pa.Array, physical: pa.Array, undecoded: np.ndarray
    ) -> tuple[pa.Array, np.ndarray]:
        """Records of other flat writer versions that resolve to the reader's (a sink replaying
        a topic after its schema evolved), decoded column by column with their writer schema and
        projected onto the reader's: about as fast as the reader's own version. The rest stays
        undecoded (for fastavro)."""
        undecoded = undecoded.copy()
        headers = pc.binary_slice(array, 0, 5)
        candidates = headers.filter(pa.array(undecoded)).unique().to_pylist()
        for head in candidates:
            writer = self._flat_writer(head)
            if writer is None:
                continue
            same = pc.fill_null(pc.equal(headers, pa.scalar(head, pa.binary())), False)
            rows = np.nonzero(undecoded & same.to_numpy(zero_copy_only=False))[0]
            decoded, left = _avro_vector.decode(
                array.take(pa.array(rows)), writer[1], head, writer[0]
            )
            try:
                projected = _project(decoded, writer[0], self.schema)
            except pa.ArrowInvalid:
                continue  # bytes read as text that are not UTF-8: fastavro names the record
            physical = _merge(physical, rows, projected)
            undecoded[rows] = left
        return physical, undecoded

    def _flat_writer(self, head: bytes | None) -> tuple[Schema, list] | None:
        """(writer schema, its flat columns) of a header naming another version that resolves
        to the reader's; None when it does not (the per-record path then says why)."""
        if not head or len(head) < 5 or head[:1] != MAGIC:
            return None
        schema_id = int.from_bytes(head[1:5], "big")
        if schema_id == self.schema_id:
            return None
        if schema_id not in self._flat_writers:
            text = self.registry.by_id(schema_id)
            found = None
            if text is not None:
                writer = from_connect(json.loads(text))
                columns = _avro_vector.flat_columns(writer)
                if columns is not None and not read_problems(self.schema, writer):
                    found = (writer, columns)
            self._flat_writers[schema_id] = found
        return self._flat_writers[schema_id]

    def _per_record(self, raws: list[bytes | None]) -> tuple[list[Any], list[str | None]]:
        """fastavro, one record at a time (any schema): values and error reasons."""
        convert = self._planned()[1]
        values: list[Any] = []
        reasons: list[str | None] = []
        for raw in raws:
            if raw is None:
                values.append(None)
                reasons.append(None)
                continue
            try:
                values.append(convert(self._read(raw)))
                reasons.append(None)
            except _Bad as exc:
                values.append(None)
                reasons.append(str(exc))
        return values, reasons

    def _read(self, raw: bytes) -> Any:
        if len(raw) < 5 or raw[:1] != MAGIC:
            raise _Bad(
                f"{self.role} is not Avro with a schema id (expected byte 0x00 and a 4-byte id, "
                f"got {raw[:5].hex() or 'no bytes'})"
            )
        schema_id = int.from_bytes(raw[1:5], "big")
        schemas = self._writer(schema_id)
        if schemas is None:
            raise _Bad(f"{self.role} names Avro schema id {schema_id}, which the registry lacks")
        buf = io.BytesIO(raw[5:])
        fastavro = _fastavro(self.role)
        try:
            datum = fastavro.schemaless_reader(buf, schemas[0], schemas[1])
        except fastavro.read.SchemaResolutionError as exc:
            # The bytes are fine: the two schema versions are not compatible (a version the
            # registry accepted before it checked compatibility). Say so, not "bad data".
            raise _Bad(
                f"{self.role} was written with schema id {schema_id}, which the sink's schema "
                f"(id {self.schema_id}) cannot read: {exc}; the topic's schema versions are "
                "not compatible (see schema.compatibility)"
            ) from None
        except Exception as exc:  # fastavro raises many kinds (EOFError, ValueError, …)
            raise _Bad(
                f"{self.role} is not valid Avro for schema id {schema_id}: {exc!r}"
            ) from None
        if buf.tell() != len(raw) - 5:
            raise _Bad(f"{self.role} has {len(raw) - 5 - buf.tell()} bytes after its Avro value")
        if datum is None:
            raise _Bad(f"{self.role} is an Avro null, but its schema is not optional")
        return datum


def _merge(base: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """`base` with its entries at `rows` replaced by `values` (same type, one per row)."""
    order = np.arange(len(base))
    order[rows] = len(base) + np.arange(len(rows))
    return pa.concat_arrays([base, values.cast(base.type)]).take(pa.array(order))


def _project(values: pa.Array, writer: Schema, reader: Schema) -> pa.Array:
    """Physical values of a flat `writer` schema as the `reader`'s (Avro resolution, checked
    beforehand): fields matched by name and widened, missing ones null, others dropped."""
    if reader.type is not FieldType.STRUCT:
        return _widen(values, physical_type(reader))
    written = {f.name for f in writer.fields}
    children = [
        _widen(values.field(f.name), physical_type(f.schema))
        if f.name in written
        else pa.nulls(len(values), physical_type(f.schema))
        for f in reader.fields
    ]
    fields = [pa.field(f.name, physical_type(f.schema)) for f in reader.fields]
    return pa.StructArray.from_arrays(children, fields=fields, mask=values.is_null())


def _widen(values: pa.Array, type_: pa.DataType) -> pa.Array:
    """A writer's column as the reader's type. Numbers widen as Avro promotes them (a long read
    as a double may round, as in Avro); bytes read as text must be UTF-8 (else ArrowInvalid)."""
    numeric = pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
    return values.cast(type_, safe=not numeric)


def _from_avro(s: Schema, where: str) -> Callable[[Any], Any]:
    """A function: Avro datum (not None) → the physical Python value of `s`."""
    if s.logical is Logical.DECIMAL:
        precision, scale = s.precision, s.scale

        def decimal(v: bytes) -> Decimal:
            d = decimal_of(int.from_bytes(v, "big", signed=True), scale) if v else None
            if d is None or (len(d.as_tuple().digits) > precision and d != 0):
                raise _Bad(f"{where} does not fit decimal({precision},{scale})")
            return d

        return decimal
    if s.logical is Logical.TIME:

        def time(v: int) -> int:
            if not 0 <= v < MICROS_PER_DAY:
                raise _Bad(f"{where}: {v} is not a time of day in µs")
            return v

        return time
    if s.logical is not None:
        return _same
    if s.type in _SMALL_INTS:
        low, high = _SMALL_INTS[s.type]

        def small(v: int) -> int:
            if not low <= v <= high:
                raise _Bad(f"{where}: {v} is out of range for {s.type.value.lower()}")
            return v

        return small
    if s.type is FieldType.STRUCT:
        fields = [
            (aname, f.name, f.name, f.schema.optional, _from_avro(f.schema, f"{where}.{f.name}"))
            for f, aname in zip(s.fields, field_names(s), strict=True)
        ]
        return _struct(fields, where)
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        item = _from_avro(s.value_schema, f"{where}[]")
        return lambda v: [None if x is None else item(x) for x in v]
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        key = _from_avro(s.key_schema, f"{where}{{}}")
        val = _from_avro(s.value_schema, f"{where}{{}}")
        if s.key_schema.type is FieldType.STRING and s.key_schema.logical is None:
            return lambda v: [(k, None if x is None else val(x)) for k, x in v.items()]
        return lambda v: [
            (key(e["key"]), None if e["value"] is None else val(e["value"])) for e in v
        ]
    return _same


def _struct(fields: list[tuple[str, str, str, bool, Any]], where: str) -> Any:
    """Converts a struct's dict: `fields` are (key read, key written, Connect name for errors,
    optional, value converter); used both ways, so Avro-renamed fields map back and forth."""
    required = [label for _, _, label, optional, _ in fields if not optional]
    if all(src == dst and convert is _same for src, dst, _, _, convert in fields):
        # Nothing to rename or convert (the common flat row): only check required fields.
        def plain(v: dict) -> dict:
            for name in required:
                if v.get(name) is None:
                    raise _Bad(f"{where}.{name} is null, but its schema is not optional")
            return v

        return plain

    def struct(v: dict) -> dict:
        out = {}
        for src, dst, label, optional, convert in fields:
            x = v.get(src)
            if x is None:
                if not optional:
                    raise _Bad(f"{where}.{label} is null, but its schema is not optional")
                out[dst] = None
            else:
                out[dst] = convert(x)
        return out

    return struct
