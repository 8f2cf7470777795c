"""Avro binary for flat schemas, column by column with numpy (no Python loop over records).

A *flat* schema is a STRUCT whose fields are all leaves (INT8 … INT64, FLOAT32/64, BOOLEAN, STRING,
BYTES, Decimal, Date, Time, Timestamp; optional or not), or a bare leaf. Its Avro encoding is the
fields one after another, each one of (Avro 1.11 specification, "Binary Encoding"):

* `int` / `long` (INT8 … INT64, Date, Time, Timestamp): zig-zag, then a little-endian base-128
  varint (7 bits per byte, high bit set on every byte but the last);
* `float` / `double`: 4 / 8 bytes IEEE 754, little-endian; `boolean`: one byte 0 or 1;
* `string` / `bytes`: a `long` byte count, then the bytes; a decimal is `bytes` holding the
  unscaled value's minimal big-endian two's complement;
* an optional field (`["null", T]`): the branch as a `long` (0 null, 1 value), then T if present.

`encode` writes every record of an Arrow array into one buffer; `decode` parses all records a
field at a time. Both produce exactly what the per-record fastavro path in `_avro` produces (the
property tests compare them byte for byte); anything the decoder is not sure of (another schema
id, truncated or trailing bytes, out-of-range values, invalid UTF-8) is left to that path, so its
error texts stay the only ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.converters._schemas import physical_type
from sluice.sdk import FieldType, Logical, Schema

#: The Avro kind of each leaf (logical types by their physical Avro type).
_INT_KINDS = {FieldType.INT8, FieldType.INT16, FieldType.INT32}
_KIND = {
    FieldType.INT64: "long",
    FieldType.FLOAT32: "float",
    FieldType.FLOAT64: "double",
    FieldType.BOOLEAN: "boolean",
    FieldType.STRING: "bytes",
    FieldType.BYTES: "bytes",
}
_LOGICAL_KIND = {
    Logical.DECIMAL: "decimal",
    Logical.DATE: "int",
    Logical.TIME: "long",
    Logical.TIMESTAMP: "long",
}
# Bit length of each byte value (for the minimal two's complement of decimals).
_BITLEN = np.array([int(b).bit_length() for b in range(256)], dtype=np.int64)
# Varint byte counts: a value needs k+1 bytes once it reaches 2**(7k).
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def kind(schema: Schema) -> str | None:
    """The Avro kind of a leaf schema ("int", "long", "float", …), None if it is not a leaf."""
    if schema.logical is not None:
        return _LOGICAL_KIND.get(schema.logical)
    if schema.type in _INT_KINDS:
        return "int"
    return _KIND.get(schema.type)


def flat_columns(schema: Schema) -> list[tuple[str | None, Schema]] | None:
    """The (field name, leaf schema) columns of a flat schema, in Avro order; one column named
    None for a bare leaf; None when the schema is not flat (nested structs, arrays, maps)."""
    if schema.type is FieldType.STRUCT and schema.logical is None:
        if schema.fields and all(kind(f.schema) is not None for f in schema.fields):
            return [(f.name, f.schema) for f in schema.fields]
        return None
    return [(None, schema)] if kind(schema) is not None else None


# -- encoding --------------------------------------------------------------------------------------
class NullInRequired(Exception):
    """Record `index` has a null in the non-optional field `label`."""

    def __init__(self, index: int, label: str) -> None:
        super().__init__(index, label)
        self.index = index
        self.label = label


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return array.is_valid().to_numpy(zero_copy_only=False)


def _buffer(array: pa.Array, i: int) -> np.ndarray:
    """Buffer `i` of `array` as bytes (empty when Arrow left it out, e.g. no values)."""
    buffer = array.buffers()[i]
    return np.zeros(0, np.uint8) if buffer is None else np.frombuffer(buffer, np.uint8)


def _fixed(array: pa.Array, dtype: type | None = None) -> np.ndarray:
    """The values buffer of a fixed-width array as numpy (null slots hold anything)."""
    dtype = np.dtype(dtype or array.type.to_pandas_dtype())
    n, off = len(array), array.offset
    raw = _buffer(array, 1)
    if len(raw) < (off + n) * dtype.itemsize:  # no buffer: every slot is null
        return np.zeros(n, dtype=dtype)
    return raw[: (off + n) * dtype.itemsize].view(dtype)[off:]


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _varint_sizes(z: np.ndarray) -> np.ndarray:
    return 1 + (z[:, None] >= _VARINT_STEPS).sum(axis=1)


def _write_varints(out: np.ndarray, pos: np.ndarray, z: np.ndarray, sizes: np.ndarray) -> None:
    """Writes varint `z[i]` (of `sizes[i]` bytes) at `out[pos[i]]`."""
    for j in range(10):
        rows = np.nonzero(sizes > j)[0]
        if len(rows) == 0:
            return
        byte = (z[rows] >> np.uint64(7 * j)) & np.uint64(0x7F)
        more = (sizes[rows] > j + 1).astype(np.uint64) << np.uint64(7)
        out[pos[rows] + j] = (byte | more).astype(np.uint8)


def _copy(
    out: np.ndarray, pos: np.ndarray, src: np.ndarray, starts: np.ndarray, lens: np.ndarray
) -> None:
    """Copies `src[starts[i]:starts[i]+lens[i]]` to `out[pos[i]:]` for every i, in one go."""
    total = int(lens.sum())
    if total == 0:
        return
    # One index per byte: int32 when it fits halves the memory traffic, which is the cost here.
    small = max(len(out), len(src)) < 2**31
    itype = np.int32 if small else np.int64
    before = np.cumsum(lens) - lens
    k = np.arange(total, dtype=itype)
    dst = np.repeat((pos - before).astype(itype), lens)
    dst += k
    if starts[0] + total == starts[-1] + lens[-1] and (starts - before == starts[0]).all():
        # Segments back to back in `src` (strings without gaps): a plain slice.
        out[dst] = src[starts[0] : starts[0] + total]
        return
    src_idx = np.repeat((starts - before).astype(itype), lens)
    src_idx += k
    out[dst] = src[src_idx]


_Writer = Callable[[np.ndarray, np.ndarray], None]


def _leaf(array: pa.Array, schema: Schema, present: np.ndarray) -> tuple[np.ndarray, _Writer]:
    """(bytes per record, writer) of one leaf column; records not `present` take no bytes. The
    writer gets the output buffer and the positions of the present records."""
    k = kind(schema)
    if k in ("int", "long"):
        z = _zigzag(_fixed(array))[present]
        sizes = _varint_sizes(z)

        def varints(out: np.ndarray, pos: np.ndarray) -> None:
            _write_varints(out, pos, z, sizes)

        return _spread(sizes, present), varints
    if k in ("float", "double", "boolean"):
        if k == "boolean":
            n, off = len(array), array.offset
            bits = np.unpackbits(_buffer(array, 1), bitorder="little")[off : off + n]
            bits = np.concatenate([bits, np.zeros(n - len(bits), np.uint8)])  # (no buffer)
            raw = bits[present].reshape(-1, 1)
        elif k == "float":
            # fastavro writes a FLOAT32 that went through a Python float: do the same round
            # trip so a signalling NaN comes out quieted exactly as it does there.
            raw = _fixed(array, np.float32)[present].astype(np.float64).astype(np.float32)
            raw = raw.view(np.uint8).reshape(-1, 4)
        else:
            raw = _fixed(array, np.float64)[present].view(np.uint8).reshape(-1, 8)
        width = raw.shape[1]

        def fixed(out: np.ndarray, pos: np.ndarray) -> None:
            out[(pos[:, None] + np.arange(width)).ravel()] = raw.ravel()

        return _spread(np.full(len(raw), width, np.int64), present), fixed
    if k == "decimal":
        n, off = len(array), array.offset
        flat = _buffer(array, 1)
        if len(flat) < (off + n) * 16:  # no buffer: every slot is null
            flat = np.zeros((off + n) * 16, np.uint8)
        # Arrow decimal128 is 16-byte little-endian two's complement; Avro wants big-endian.
        big = np.ascontiguousarray(flat[off * 16 : (off + n) * 16].reshape(n, 16)[present, ::-1])
        sign = np.where(big[:, 0] >= 0x80, 0xFF, 0).astype(np.uint8)
        magnitude = big ^ sign[:, None]  # ~v for negatives: the bits that must be kept
        nonzero = magnitude != 0
        first = nonzero.argmax(axis=1)
        top = magnitude[np.arange(len(big)), first]
        bits = np.where(nonzero.any(axis=1), (15 - first) * 8 + _BITLEN[top], 0)
        lens = (bits + 8) // 8  # minimal length keeping the sign bit (Java's toByteArray)
        starts = np.arange(len(big), dtype=np.int64) * 16 + 16 - lens
        return _bytes_field(big.ravel(), starts, lens, present)
    # string / bytes: the Arrow data buffer already holds exactly the bytes Avro wants.
    n, off = len(array), array.offset
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[off : off + n + 1]
    src = _buffer(array, 2)
    starts = offsets[:-1].astype(np.int64)[present]
    lens = (offsets[1:] - offsets[:-1]).astype(np.int64)[present]
    return _bytes_field(src, starts, lens, present)


def _bytes_field(
    src: np.ndarray, starts: np.ndarray, lens: np.ndarray, present: np.ndarray
) -> tuple[np.ndarray, _Writer]:
    z = _zigzag(lens)
    sizes = _varint_sizes(z)

    def write(out: np.ndarray, pos: np.ndarray) -> None:
        _write_varints(out, pos, z, sizes)
        _copy(out, pos + sizes, src, starts, lens)

    return _spread(sizes + lens, present), write


def _spread(sizes: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Per-record sizes of the present records → sizes of all records (0 where absent)."""
    out = np.zeros(len(present), dtype=np.int64)
    out[present] = sizes
    return out


def encode(
    array: pa.Array, columns: list[tuple[str | None, Schema]], header: bytes
) -> pa.Array | None:
    """Avro records of a physical-typed array (`to_physical`), `header` before each; null stays
    null. Raises `NullInRequired` for the first record with a null in a non-optional field.
    None when the result would not fit a binary array (2 GiB): the caller falls back."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    n = len(array)
    rows = _valid(array)
    if columns and columns[0][0] is None:
        children = [array]
    else:
        children = [array.field(i) for i in range(len(columns))]
    valids = [_valid(child) for child in children]
    missing = [
        rows & ~valid
        for (_, schema), valid in zip(columns, valids, strict=True)
        if not schema.optional
    ]
    labels = [label for label, schema in columns if not schema.optional]
    bad = [int(m.argmax()) if m.any() else n for m in missing]
    if bad and min(bad) < n:
        index = min(bad)
        raise NullInRequired(index, labels[bad.index(index)] or "")

    sizes = np.where(rows, len(header), 0).astype(np.int64)
    fields: list[tuple[np.ndarray, np.ndarray | None, np.ndarray, _Writer]] = []
    for (_, schema), child, valid in zip(columns, children, valids, strict=True):
        present = rows & valid
        lens, write = _leaf(child, schema, present)
        branch = rows if schema.optional and columns[0][0] is not None else None
        fields.append((sizes.copy(), branch, present, write))
        sizes += lens + (rows if branch is not None else 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        return None
    out = np.empty(total, dtype=np.uint8)
    starts = offsets[:-1][rows]
    if len(header):
        out[(starts[:, None] + np.arange(len(header))).ravel()] = np.tile(
            np.frombuffer(header, np.uint8), len(starts)
        )
    for before, branch, present, write in fields:
        pos = offsets[:-1] + before
        if branch is not None:
            # ["null", T]: branch 0 (byte 0x00) for null, 1 (zig-zag 2) for a value.
            out[pos[branch]] = np.where(present[branch], 2, 0).astype(np.uint8)
            pos = pos + 1
        write(out, pos[present])
    validity = None if rows.all() else pa.array(rows).buffers()[1]
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)],
        null_count=n - int(rows.sum()),
    )


# -- decoding --------------------------------------------------------------------------------------
_INT_RANGES = {
    FieldType.INT8: (-(2**7), 2**7 - 1),
    FieldType.INT16: (-(2**15), 2**15 - 1),
    FieldType.INT32: (-(2**31), 2**31 - 1),
}
_MICROS_PER_DAY = 86_400_000_000


class _Reader:
    """The records of one binary array being parsed: every record has a read position, and
    `ok` turns False (for good) on the first thing the vectorised reader does not accept."""

    def __init__(self, data: np.ndarray, start: np.ndarray, end: np.ndarray, ok: np.ndarray):
        # Zero padding: a varint may be read 10 bytes past the last record's end before its
        # length is checked against that end.
        self.data = np.concatenate([data, np.zeros(16, np.uint8)])
        self.pos = start
        self.end = end
        self.ok = ok

    def varints(self, rows: np.ndarray) -> np.ndarray:
        """Reads a zig-zag varint at each of `rows` (indexes), returns the int64 values; rows
        with a varint that is truncated or longer than 64 bits are marked not ok."""
        pos = self.pos[rows]
        # Most varints are one byte: that one is read for all rows without index arrays.
        first = self.data[pos].astype(np.uint64)
        value = first & np.uint64(0x7F)
        size = np.ones(len(rows), dtype=np.int64)
        active = np.nonzero(first >= 0x80)[0]
        for j in range(1, 10):
            if len(active) == 0:
                break
            byte = self.data[pos[active] + j].astype(np.uint64)
            if j == 9:
                # The 10th byte holds bit 63 only; more would not fit a long.
                self.ok[rows[active[byte > 1]]] = False
            value[active] |= (byte & np.uint64(0x7F)) << np.uint64(7 * j)
            done = (byte & np.uint64(0x80)) == 0
            size[active[done]] = j + 1
            active = active[~done]
        self.ok[rows[active]] = False
        self.advance(rows, size)
        return (value >> np.uint64(1)).view(np.int64) ^ -(value & np.uint64(1)).view(np.int64)

    def advance(self, rows: np.ndarray, size: np.ndarray) -> None:
        """Moves `rows` on by `size` bytes; a row that would pass its end is marked not ok."""
        pos = self.pos[rows] + size
        past = pos > self.end[rows]
        self.ok[rows[past]] = False
        self.pos[rows] = np.where(past, self.end[rows], pos)

    def fixed(self, rows: np.ndarray, width: int) -> np.ndarray:
        """`width` bytes at each of `rows`, shape (len(rows), width)."""
        pos = self.pos[rows]
        self.advance(rows, np.int64(width))
        return self.data[pos[:, None] + np.arange(width)]


def _leaf_values(
    reader: _Reader, rows: np.ndarray, schema: Schema, n: int
) -> tuple[np.ndarray | tuple[np.ndarray, np.ndarray], pa.DataType]:
    """Reads one leaf at each of `rows`; returns its values for them (or, for bytes and
    strings, (lengths, joined bytes)) and the Arrow type. Marks rows it refuses not ok."""
    k = kind(schema)
    if k in ("int", "long"):
        values = reader.varints(rows)
        if schema.logical is Logical.TIME:
            reader.ok[rows[(values < 0) | (values >= _MICROS_PER_DAY)]] = False
        elif k == "int":
            low, high = _INT_RANGES.get(schema.type, _INT_RANGES[FieldType.INT32])
            reader.ok[rows[(values < low) | (values > high)]] = False
        return values, physical_type(schema)
    if k == "float":
        raw = reader.fixed(rows, 4).copy().view(np.float32).ravel()
        # fastavro reads a float as a Python float, which Arrow narrows back: the same round
        # trip here, so NaN payloads match bit for bit.
        return raw.astype(np.float64).astype(np.float32), pa.float32()
    if k == "double":
        return reader.fixed(rows, 8).copy().view(np.float64).ravel(), pa.float64()
    if k == "boolean":
        raw = reader.fixed(rows, 1).ravel()
        reader.ok[rows[raw > 1]] = False
        return raw == 1, pa.bool_()
    lens = reader.varints(rows)
    reader.ok[rows[lens < 0]] = False
    lens = np.where(reader.ok[rows], lens, 0)
    if k == "decimal":
        # 1 to 16 bytes of big-endian two's complement; longer (possible, never minimal for a
        # decimal(38)) or empty is left to fastavro, which says why.
        reader.ok[rows[(lens < 1) | (lens > 16)]] = False
        lens = np.where(reader.ok[rows], lens, 0)
    starts = reader.pos[rows].copy()
    reader.advance(rows, lens)
    lens = np.where(reader.ok[rows], lens, 0)
    if k != "decimal":
        joined = np.empty(int(lens.sum()), dtype=np.uint8)
        before = np.cumsum(lens) - lens
        _copy(joined, before, reader.data, starts, lens)
        if schema.type is FieldType.STRING:
            _check_utf8(reader, rows, lens, joined)
        return (lens, joined), physical_type(schema)
    m = len(rows)
    negative = (reader.data[starts] >= 0x80) & (lens > 0)
    big = np.repeat(np.where(negative, 0xFF, 0).astype(np.uint8), 16).reshape(m, 16)
    _copy(big.reshape(-1), np.arange(m, dtype=np.int64) * 16 + 16 - lens, reader.data, starts, lens)
    little = np.ascontiguousarray(big[:, ::-1])
    # |unscaled| < 10**precision, compared as 128-bit (high signed, low unsigned) halves.
    low = little[:, :8].copy().view(np.uint64).ravel()
    high = little[:, 8:].copy().view(np.int64).ravel()
    bound = 10**schema.precision
    b_hi, b_lo = bound >> 64, bound & (2**64 - 1)
    n_hi, n_lo = (-bound) >> 64, (-bound) & (2**64 - 1)
    below = (high < b_hi) | ((high == b_hi) & (low < np.uint64(b_lo)))
    above = (high > n_hi) | ((high == n_hi) & (low > np.uint64(n_lo)))
    reader.ok[rows[~(below & above)]] = False
    return little, physical_type(schema)


def _check_utf8(reader: _Reader, rows: np.ndarray, lens: np.ndarray, joined: np.ndarray) -> None:
    """Marks rows whose text is not UTF-8 not ok (fastavro refuses them)."""
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    text = pa.Array.from_buffers(
        pa.string(), len(lens), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(joined)]
    )
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        # Rare (corrupt data): find the culprits one by one.
        for i, (a, b) in enumerate(itertools.pairwise(offsets)):
            try:
                joined[a:b].tobytes().decode("utf-8")
            except UnicodeDecodeError:
                reader.ok[rows[i]] = False


def _column(
    values: np.ndarray | tuple[np.ndarray, np.ndarray],
    type_: pa.DataType,
    rows: np.ndarray,
    keep: np.ndarray,
    n: int,
) -> pa.Array:
    """An Arrow array of `n` records holding `values` (read at `rows`) where `keep`."""
    kept = keep[rows]
    valid = np.zeros(n, dtype=bool)
    valid[rows[kept]] = True
    validity = pa.array(valid).buffers()[1]
    nulls = n - int(valid.sum())
    if isinstance(values, tuple):
        lens, joined = values
        all_lens = np.zeros(n, dtype=np.int64)
        all_lens[rows] = lens
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(all_lens, out=offsets[1:])
        # Records dropped after their bytes were read keep them, hidden under a null.
        buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(joined)]
        return pa.Array.from_buffers(type_, n, buffers, null_count=nulls)
    if pa.types.is_decimal(type_):
        full = np.zeros((n, 16), dtype=np.uint8)
        full[rows] = values
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(full)], null_count=nulls)
    full = np.zeros(n, dtype=values.dtype)
    # Values refused after they were read (out of range) must not reach the cast, even nulled.
    full[rows] = np.where(kept, values, values.dtype.type(0))
    return pa.array(full, mask=~valid).cast(type_)


def decode(
    array: pa.Array, columns: list[tuple[str | None, Schema]], header: bytes, schema: Schema
) -> tuple[pa.Array, np.ndarray]:
    """Parses a binary array of Avro records written with `header` and the flat schema whose
    `columns` these are. Returns the values (physical types; null where not decoded) and a mask
    of the records it left undecoded though they are not null: those the caller decodes one at
    a time (another schema id, bad bytes, values out of range…), to report them exactly."""
    n = len(array)
    valid = _valid(array)
    if n == 0:
        return pa.array([], physical_type(schema)), valid
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=array.offset + n + 1)
    offsets = offsets[array.offset :].astype(np.int64)
    buffer = array.buffers()[2]
    data = np.frombuffer(buffer, np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    start, end = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    reader = _Reader(data, start.copy(), end, valid & (end - start >= len(header)))
    rows = np.nonzero(reader.ok)[0]
    got = reader.fixed(rows, len(header))
    reader.ok[rows[(got != np.frombuffer(header, np.uint8)).any(axis=1)]] = False

    union = columns[0][0] is not None
    read: list[tuple[Any, pa.DataType, np.ndarray]] = []
    for _, leaf_schema in columns:
        rows = np.nonzero(reader.ok)[0]
        if leaf_schema.optional and union:
            branch = reader.varints(rows)
            reader.ok[rows[(branch != 0) & (branch != 1)]] = False
            rows = rows[(branch == 1) & reader.ok[rows]]
        values, type_ = _leaf_values(reader, rows, leaf_schema, n)
        read.append((values, type_, rows))
    reader.ok &= reader.pos == end  # trailing bytes: left to the per-record path's message
    arrays = [_column(v, t, r, reader.ok, n) for v, t, r in read]
    if union:
        fields = list(physical_type(schema))
        out = pa.StructArray.from_arrays(arrays, fields=fields, mask=pa.array(~reader.ok))
    else:
        out = arrays[0]
    return out, valid & ~reader.ok


__all__ = ["NullInRequired", "decode", "encode", "flat_columns", "kind"]
