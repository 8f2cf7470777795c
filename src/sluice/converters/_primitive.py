"""String, bytes and fixed-width number converters: vectorised, both as SQL and in Arrow."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.converters._base import Converter, Decoded, Decoder, DecodeSql, Encoder
from sluice.sdk import FieldType, Schema


def _binary(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary() if pa.types.is_large_binary(array.type) else pa.string())
    return array


# -- StringConverter -------------------------------------------------------------------------------
class _StringEncoder(Encoder):
    has_sql = True

    def __init__(self, converter: str, role: str, schema: Schema) -> None:
        super().__init__(converter, role, schema)
        trivial = schema.type in (FieldType.STRING, FieldType.BYTES) and schema.logical is None
        self.arrow_mode = "vectorised" if trivial else None

    def sql(self, column: str) -> str:
        s = self.schema
        if s.logical is None and s.type is FieldType.BYTES:
            return column
        if s.type in (FieldType.STRUCT, FieldType.MAP, FieldType.ARRAY):
            return f"CAST(to_json({column}) AS BINARY)"
        if s.logical is None and s.type is FieldType.STRING:
            return f"CAST({column} AS BINARY)"
        return f"CAST(CAST({column} AS STRING) AS BINARY)"

    def arrow(self, array: pa.Array) -> pa.Array:
        array = _binary(array)
        # A view, not a copy: UTF-8 text is already its bytes.
        return array.view(pa.binary()) if pa.types.is_string(array.type) else array


class _StringDecoder(Decoder):
    has_sql = True
    arrow_mode = "vectorised"

    def sql(self, column: str, tmp: str) -> DecodeSql:
        return DecodeSql(f"CAST({column} AS STRING)")

    def arrow(self, array: pa.Array) -> Decoded:
        # A view, not a validating cast: like Spark's CAST, invalid UTF-8 is not rejected here.
        return Decoded(_binary(array).view(pa.string()))


class StringConverter(Converter):
    """UTF-8 text (the default). Keys/values that are not strings are written as text: numbers,
    booleans, dates and timestamps as Spark's `CAST(… AS STRING)` renders them, structs, maps and
    arrays as JSON. Sinks receive STRING. Invalid UTF-8 is passed on as is, not rejected."""

    def encoder(self, schema: Schema) -> Encoder:
        return _StringEncoder(self.name, self.role, schema)

    def decoder(self, schema: Schema | None) -> Decoder:
        return _StringDecoder(self.name, self.role, Schema.string())


# -- ByteArrayConverter ----------------------------------------------------------------------------
class ByteArrayConverter(Converter):
    """Raw bytes in, raw bytes out. Writes BYTES (or STRING as its UTF-8 bytes); sinks receive
    BYTES."""

    def encoder(self, schema: Schema) -> Encoder:
        if schema.logical is not None or schema.type not in (FieldType.STRING, FieldType.BYTES):
            raise self.cannot(schema)
        return _StringEncoder(self.name, self.role, schema)

    def decoder(self, schema: Schema | None) -> Decoder:
        return _BytesDecoder(self.name, self.role, Schema.bytes_())


class _BytesDecoder(Decoder):
    has_sql = True
    arrow_mode = "vectorised"

    def sql(self, column: str, tmp: str) -> DecodeSql:
        return DecodeSql(column)

    def arrow(self, array: pa.Array) -> Decoded:
        return Decoded(_binary(array))


# -- numbers ---------------------------------------------------------------------------------------
class _NumberEncoder(Encoder):
    arrow_mode = "vectorised"

    def __init__(self, converter: str, role: str, schema: Schema, dtype: str) -> None:
        super().__init__(converter, role, schema)
        self.dtype = dtype

    def arrow(self, array: pa.Array) -> pa.Array:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        width = np.dtype(self.dtype).itemsize
        values = array.fill_null(0).to_numpy(zero_copy_only=False).astype(self.dtype)
        validity = None
        if array.null_count:
            validity = pc.is_valid(array).buffers()[1]
        fixed = pa.Array.from_buffers(
            pa.binary(width),
            len(array),
            [validity, pa.py_buffer(values.tobytes())],
            null_count=array.null_count,
        )
        return fixed.cast(pa.binary())


class _NumberDecoder(Decoder):
    arrow_mode = "vectorised"

    def __init__(self, converter: str, role: str, schema: Schema, dtype: str) -> None:
        super().__init__(converter, role, schema)
        self.dtype = dtype

    def arrow(self, array: pa.Array) -> Decoded:
        array = _binary(array)
        width = np.dtype(self.dtype).itemsize
        n = len(array)
        lengths = pc.binary_length(array)
        ok = pc.fill_null(pc.equal(lengths, width), False)
        bad = pc.and_(pc.is_valid(array), pc.invert(ok))
        errors = None
        if pc.any(bad).as_py():
            lens = lengths.to_pylist()
            flags = bad.to_pylist()
            errors = pa.array(
                [
                    f"{self.role} has {lens[i]} bytes, expected {width}" if flags[i] else None
                    for i in range(n)
                ],
                pa.string(),
            )
        filler = pa.scalar(b"\0" * width, pa.binary())
        fixed = pc.if_else(ok, array, filler).cast(pa.binary(width))
        data = fixed.buffers()[1]
        raw = np.frombuffer(data, dtype=self.dtype, count=n, offset=fixed.offset * width)
        values = pa.array(raw.astype(np.dtype(self.dtype).newbyteorder("=")), mask=~_mask(ok))
        return Decoded(values.cast(self.schema.to_arrow()), errors)


def _mask(ok: pa.Array) -> np.ndarray:
    return ok.to_numpy(zero_copy_only=False).astype(bool)


class _NumberConverter(Converter):
    """Fixed-width big-endian numbers, as Kafka's serializers write them; null ↔ null."""

    field_type: ClassVar[FieldType]
    dtype: ClassVar[str]

    def encoder(self, schema: Schema) -> Encoder:
        if schema.logical is not None or schema.type is not self.field_type:
            raise self.cannot(schema)
        return _NumberEncoder(self.name, self.role, schema, self.dtype)

    def decoder(self, schema: Schema | None) -> Decoder:
        return _NumberDecoder(self.name, self.role, Schema.of(self.field_type), self.dtype)


class DoubleConverter(_NumberConverter):
    """FLOAT64 as 8 big-endian bytes (IEEE 754), like Kafka's `DoubleSerializer`."""

    field_type = FieldType.FLOAT64
    dtype = ">f8"


class FloatConverter(_NumberConverter):
    """FLOAT32 as 4 big-endian bytes (IEEE 754), like Kafka's `FloatSerializer`."""

    field_type = FieldType.FLOAT32
    dtype = ">f4"


class LongConverter(_NumberConverter):
    """INT64 as 8 big-endian bytes, like Kafka's `LongSerializer`."""

    field_type = FieldType.INT64
    dtype = ">i8"


class IntegerConverter(_NumberConverter):
    """INT32 as 4 big-endian bytes, like Kafka's `IntegerSerializer`."""

    field_type = FieldType.INT32
    dtype = ">i4"


class ShortConverter(_NumberConverter):
    """INT16 as 2 big-endian bytes, like Kafka's `ShortSerializer`."""

    field_type = FieldType.INT16
    dtype = ">i2"
