"""Avro binary for flat schemas, column by column with numpy and Arrow compute (no Python loop
over records).

A *flat* schema is a STRUCT whose fields are all leaves (INT8 … INT64, FLOAT32/64, BOOLEAN, STRING,
BYTES, Decimal, Date, Time, Timestamp; optional or not), or a bare leaf. Its Avro encoding is the
fields one after another, each one of (Avro 1.11 specification, "Binary Encoding"):

* `int` / `long` (INT8 … INT64, Date, Time, Timestamp): zig-zag, then a little-endian base-128
  varint (7 bits per byte, high bit set on every byte but the last);
* `float` / `double`: 4 / 8 bytes IEEE 754, little-endian; `boolean`: one byte 0 or 1;
* `string` / `bytes`: a `long` byte count, then the bytes; a decimal is `bytes` holding the
  unscaled value's minimal big-endian two's complement;
* an optional field (`["null", T]`): the branch as a `long` (0 null, 1 value), then T if present.

Both also take *nested* schemas: structs whose fields are leaves or, again, such structs (a CDC
envelope's `before`/`after`/`source`). A record is its fields' encodings one after another, so a
nested struct is walked depth first, each leaf written (read) only for the records whose every
enclosing struct is present. Arrays and maps stay on the per-record path, and so do records of
another writer version of a nested schema (a flat one is read with its writer's columns and
projected onto the reader's).

Both work in blocks of `BLOCK` records. `encode` lays each run of fields between two string
payloads out as a byte matrix (one row a record) and compresses away the bytes no record uses;
Arrow then interleaves runs and payloads record by record. `decode` keeps a read position per
record and parses all records a field at a time: varints 8 bytes at a time (`_avro_varint`),
strings cut out of the buffer by Arrow.

Both produce exactly what the per-record fastavro path in `_avro` produces (the property tests
compare them byte for byte); anything the decoder is not sure of (another schema id, truncated or
trailing bytes, out-of-range values, invalid UTF-8) is left to that path, so its error texts stay
the only ones.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.converters import _avro_varint as varint
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


def _is_struct(schema: Schema) -> bool:
    return schema.type is FieldType.STRUCT and schema.logical is None


def _encodable(schema: Schema) -> bool:
    """A leaf, or a struct with at least one field, all of them encodable."""
    if _is_struct(schema):
        return bool(schema.fields) and all(_encodable(f.schema) for f in schema.fields)
    return kind(schema) is not None


def encodable_columns(schema: Schema) -> list[tuple[str | None, Schema]] | None:
    """The top-level columns `encode` takes: those of `flat_columns`, and also nested structs
    of leaves (each column a leaf or such a struct); None for arrays, maps and empty structs."""
    if _is_struct(schema):
        if _encodable(schema):
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


def _bitmap(valid: np.ndarray, offset: int = 0) -> pa.Buffer:
    """An Arrow validity bitmap whose bit `offset + i` is `valid[i]`."""
    bits = np.concatenate([np.zeros(offset, bool), valid]) if offset else valid
    return pa.py_buffer(np.packbits(bits, bitorder="little"))


def _binary(offsets: np.ndarray, data: np.ndarray | pa.Buffer) -> pa.Array:
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(
        pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets.astype(np.int32)), buffer]
    )


def _data_size(array: pa.Array) -> int:
    """Bytes of data a binary array's values span."""
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=array.offset + len(array) + 1)
    return int(offsets[-1]) - int(offsets[array.offset])


def _offsets(lens: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return offsets


class _Scratch:
    """Memory the runs of one `encode` reuse block after block: fresh megabytes from the
    allocator are fresh pages, and faulting them in cost a fifth of the encoding time."""

    def __init__(self) -> None:
        self.values = np.empty(0, np.uint8)
        self.used = np.empty(0, bool)

    def matrices(self, n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """An uninitialised (n, width) byte matrix and a bool matrix of the same shape."""
        if len(self.values) < n * width:
            self.values = np.empty(n * width, np.uint8)
            self.used = np.empty(n * width, bool)
        size = n * width
        return self.values[:size].reshape(n, width), self.used[:size].reshape(n, width)


class _Run:
    """The bytes of consecutive fields between two string payloads, one row per record: each
    field is a byte matrix plus how many of its bytes each record uses (left- or right-aligned).
    Laid side by side and compressed row-major, the used bytes are the records' bytes."""

    def __init__(self, n: int, scratch: _Scratch) -> None:
        self.n = n
        self.scratch = scratch
        self.parts: list[tuple[np.ndarray, np.ndarray, bool]] = []
        self.lens = np.zeros(n, dtype=np.int64)

    def add(self, values: np.ndarray, size: np.ndarray, *, right: bool = False) -> None:
        self.parts.append((values, size, right))
        self.lens += size

    def close(self) -> pa.Array:
        """The run as a binary array (one value per record)."""
        width = sum(values.shape[1] for values, _, _ in self.parts)
        matrix, used = self.scratch.matrices(self.n, width)
        col = 0
        # One byte column at a time: numpy copies a long strided column fast, but pays per row
        # for a block a few bytes wide.
        for values, size, right in self.parts:
            w = values.shape[1]
            for j in range(w):
                matrix[:, col] = values[:, j]
                np.greater(size, w - 1 - j if right else j, out=used[:, col])
                col += 1
        return _binary(_offsets(self.lens), matrix[used])


def _add_varints(run: _Run, values: np.ndarray, present: np.ndarray) -> None:
    z = np.where(present, varint.zigzag(values), np.uint64(0))
    size = varint.sizes(z) * present
    run.add(varint.encode(z, size, max(1, int(size.max(initial=0)))), size)


def _encode_leaf(
    array: pa.Array, schema: Schema, present: np.ndarray, run: _Run, pieces: list[pa.Array]
) -> _Run:
    """Adds one leaf column of the records `present` (the others take no bytes) to `run`; a
    string or bytes payload closes the run into `pieces` and the next run is returned."""
    k = kind(schema)
    n, off = len(array), array.offset
    if k in ("int", "long"):
        _add_varints(run, _fixed(array), present)
    elif k == "boolean":
        bits = np.unpackbits(_buffer(array, 1), bitorder="little")[off : off + n]
        bits = np.concatenate([bits, np.zeros(n - len(bits), np.uint8)])  # (no buffer)
        run.add(bits[:, None], present.astype(np.int64))
    elif k == "float":
        # fastavro writes a FLOAT32 that went through a Python float: do the same round trip so
        # a signalling NaN comes out quieted exactly as it does there.
        raw = _fixed(array, np.float32).astype(np.float64).astype("<f4")
        run.add(raw.view(np.uint8).reshape(-1, 4), present * 4)
    elif k == "double":
        raw = _fixed(array, np.float64).astype("<f8", copy=False)
        run.add(raw.view(np.uint8).reshape(-1, 8), present * 8)
    elif k == "decimal":
        flat = _buffer(array, 1)
        if len(flat) < (off + n) * 16:  # no buffer: every slot is null
            flat = np.zeros((off + n) * 16, np.uint8)
        # Arrow decimal128 is 16-byte little-endian two's complement; Avro wants big-endian.
        big = flat[off * 16 : (off + n) * 16].reshape(n, 16)[:, ::-1]
        sign = np.where(big[:, 0] >= 0x80, 0xFF, 0).astype(np.uint8)
        magnitude = big ^ sign[:, None]  # ~v for negatives: the bits that must be kept
        nonzero = magnitude != 0
        first = nonzero.argmax(axis=1)
        top = magnitude[np.arange(n), first]
        bits = np.where(nonzero.any(axis=1), (15 - first) * 8 + _BITLEN[top], 0)
        lens = (bits + 8) // 8 * present  # minimal length keeping the sign bit (toByteArray)
        _add_varints(run, lens, present)
        width = max(1, int(lens.max(initial=0)))
        run.add(big[:, 16 - width :], lens, right=True)
    else:
        # string / bytes: the Arrow data buffer already holds exactly the bytes Avro wants.
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[off : off + n + 1]
        _add_varints(run, (offsets[1:] - offsets[:-1]) * present, present)
        if run.parts:
            pieces.append(run.close())
        data = array.buffers()[2] or pa.py_buffer(b"")
        payload = pa.Array.from_buffers(
            pa.binary(), n, [_bitmap(present, off), array.buffers()[1], data], offset=off
        )
        pieces.append(payload)
        run = _Run(n, run.scratch)
    return run


def _constant(array: pa.Array) -> bool:
    """True if every record of `array` (two or more) has the same value, byte for byte (a CDC
    envelope's `source` block, `op` and `ts_ms` in a snapshot chunk): every null, or no null and
    each leaf equal to its first value (floats by their bits: 0.0 and -0.0 differ)."""
    n = len(array)
    if n < 2 or array.null_count == n:
        return n >= 2
    if array.null_count:
        return False
    if pa.types.is_struct(array.type):
        return all(_constant(array.field(i)) for i in range(array.type.num_fields))
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        bits = _fixed(array, np.dtype(f"u{array.type.bit_width // 8}"))
        return bool(bits[0] == bits[-1]) and bool((bits == bits[0]).all())
    if pa.types.is_string(array.type) or pa.types.is_binary(array.type):
        off = array.offset
        offsets = np.frombuffer(array.buffers()[1], np.int32)[off : off + n + 1]
        width = int(offsets[1] - offsets[0])
        if not (np.diff(offsets) == width).all():
            return False
        data = _buffer(array, 2)[offsets[0] : offsets[-1]].reshape(n, width)
        return bool((data == data[0]).all())
    first = array[0]
    return first == array[n - 1] and bool(pc.all(pc.equal(array, first)).as_py())


def _repeat(
    array: pa.Array, schema: Schema, run: _Run, pieces: list[pa.Array], *, union: bool
) -> _Run:
    """Adds a constant field of every record (`_constant`) as its first record's bytes, encoded
    once: a few bytes go into `run`, more as one payload of the bytes repeated (a `source`
    block's strings would otherwise each close a run and add a payload to interleave)."""
    one = _Run(1, _Scratch())
    parts: list[pa.Array] = []
    one = _encode_field(array.slice(0, 1), schema, np.ones(1, bool), one, parts, union=union)
    if one.parts or not parts:
        parts.append(one.close())
    joined = pc.binary_join_element_wise(*parts, b"", options=_JOIN)
    raw = np.frombuffer(joined[0].as_py(), np.uint8)
    n, width = run.n, len(raw)
    if width <= _SHORT:
        run.add(np.broadcast_to(raw, (n, width)), np.full(n, width, np.int64))
        return run
    if n * width >= 2**31:
        raise _TooLarge
    if run.parts:
        pieces.append(run.close())
    pieces.append(_binary(np.arange(n + 1, dtype=np.int64) * width, np.tile(raw, n)))
    return _Run(n, run.scratch)


#: The constant fields at most this long go into the run of the fields around them.
_SHORT = 16


def _encode_field(
    array: pa.Array,
    schema: Schema,
    parent: np.ndarray,
    run: _Run,
    pieces: list[pa.Array],
    *,
    union: bool = True,
) -> _Run:
    """Adds one field of the records `parent` (those whose enclosing structs are all present)
    to `run`: its union branch when optional, then its leaf or, depth first, its fields; a
    field constant over every record once (`_repeat`)."""
    if parent.all() and _constant(array):
        return _repeat(array, schema, run, pieces, union=union)
    present = parent & _valid(array)
    if schema.optional and union:
        # ["null", T]: branch 0 (byte 0x00) for null, 1 (zig-zag 2) for a value.
        run.add((present * 2).astype(np.uint8)[:, None], parent.astype(np.int64))
    if not _is_struct(schema):
        return _encode_leaf(array, schema, present, run, pieces)
    for i, field in enumerate(schema.fields):
        run = _encode_field(array.field(i), field.schema, present, run, pieces)
    return run


class _TooLarge(Exception):
    """A block's records would not fit a binary array (2 GiB)."""


_JOIN = pc.JoinOptions(null_handling="replace", null_replacement="")


def _encode_block(
    array: pa.Array, columns: list[tuple[str | None, Schema]], header: bytes, scratch: _Scratch
) -> pa.Array:
    n = len(array)
    rows = _valid(array)
    union = columns[0][0] is not None
    children = [array.field(i) for i in range(len(columns))] if union else [array]
    run = _Run(n, scratch)
    if header:
        run.add(
            np.broadcast_to(np.frombuffer(header, np.uint8), (n, len(header))),
            rows * len(header),
        )
    pieces: list[pa.Array] = []
    for (_, schema), child in zip(columns, children, strict=True):
        run = _encode_field(child, schema, rows, run, pieces, union=union)
    if run.parts or not pieces:
        pieces.append(run.close())
    if sum(_data_size(piece) for piece in pieces) >= 2**31:
        # (Null payloads may span bytes: an upper bound, so at worst a needless fallback.)
        raise _TooLarge
    # Arrow interleaves the runs and the string payloads record by record.
    joined = pc.binary_join_element_wise(*pieces, b"", options=_JOIN)
    nulls = n - int(rows.sum())
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [None if nulls == 0 else _bitmap(rows), *joined.buffers()[1:]],
        null_count=nulls,
        offset=joined.offset,
    )


#: Records per block: a block's intermediates (a few dozen bytes a record per column) stay
#: near the CPU's caches. On the 2-core EPYC VM (512 KiB L2 a core) 32,768 was 25-30% faster
#: than 65,536 or one block for the whole batch, at both ends; 16,384 no faster.
BLOCK = 32_768


def _nulls_in_required(
    array: pa.Array, schema: Schema, parent: np.ndarray, label: str
) -> list[tuple[int, str]]:
    """(first record, dotted label) of each non-optional field that is null where its enclosing
    structs are present, depth first: the order the per-record path checks them in."""
    valid = _valid(array)
    found = []
    if not schema.optional and (missing := parent & ~valid).any():
        found.append((int(missing.argmax()), label))
    if _is_struct(schema):
        for i, field in enumerate(schema.fields):
            inner = f"{label}.{field.name}"
            found += _nulls_in_required(array.field(i), field.schema, parent & valid, inner)
    return found


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
    bad = [
        found
        for (label, schema), child in zip(columns, children, strict=True)
        for found in _nulls_in_required(child, schema, rows, label or "")
    ]
    if bad:
        raise NullInRequired(*min(bad, key=lambda b: b[0]))
    try:
        scratch = _Scratch()
        blocks = [
            _encode_block(array.slice(s, BLOCK), columns, header, scratch)
            for s in range(0, n, BLOCK)
        ]
    except _TooLarge:
        return None
    if sum(_data_size(b) for b in blocks) >= 2**31:
        return None
    return pa.concat_arrays(blocks) if blocks else pa.array([], pa.binary())


# -- decoding --------------------------------------------------------------------------------------
_INT_RANGES = {
    FieldType.INT8: (-(2**7), 2**7 - 1),
    FieldType.INT16: (-(2**15), 2**15 - 1),
    FieldType.INT32: (-(2**31), 2**31 - 1),
}
_MICROS_PER_DAY = 86_400_000_000
# Zero bytes around the data: a varint or a word may be read up to 16 bytes past a record's end
# before its length is checked against that end, and a decimal's word 16 bytes before its end.
_PAD = 16


class _Reader:
    """The records of one binary array being parsed: every record has a read position, and
    `ok` turns False (for good) on the first thing the vectorised reader does not accept. Reads
    take a mask of the records to read; the others stay where they are."""

    def __init__(self, data: np.ndarray, start: np.ndarray, end: np.ndarray, ok: np.ndarray):
        pad = np.zeros(_PAD, np.uint8)
        self.data = np.concatenate([pad, data, pad])
        # The 8 bytes from every position as one little-endian word (overlapping, unaligned).
        self.words = np.ndarray((len(self.data) - 7,), "<u8", self.data, strides=(1,))
        self.pos = start + _PAD
        self.end = end + _PAD
        self.ok = ok

    def varints(self, rows: np.ndarray) -> np.ndarray:
        """Reads a zig-zag varint at each of `rows` (a mask), returns the int64 values; rows
        with a varint that is truncated or longer than 64 bits are marked not ok."""
        first = self.data[self.pos]
        if not (rows & (first >= 0x80)).any():
            # All one byte (branches, short strings): no word to unpack.
            self.advance(rows, 1)
            return (first >> 1).astype(np.int64) ^ -(first & 1).astype(np.int64)
        z, size = varint.decode(self.words[self.pos])
        long = np.nonzero((size > 8) & rows)[0]
        if len(long):
            z[long], size[long], fits = varint.decode_long(self.data, self.pos[long])
            self.ok[long[~fits]] = False
        self.advance(rows, size)
        return varint.unzigzag(z)

    def advance(self, rows: np.ndarray, size: np.ndarray | int) -> np.ndarray:
        """Moves `rows` on by `size` bytes (a row that would pass its end is marked not ok);
        returns the positions before."""
        before = self.pos
        # compared with the room left, not added first: a damaged length near 2**63 would wrap
        # the sum around to a position that looks in range
        room = self.end - before
        step = size * rows
        self.ok &= step <= room
        self.pos = before + np.minimum(step, room)
        return before


def _reject(reader: _Reader, rows: np.ndarray, bad: np.ndarray) -> None:
    reader.ok &= ~(rows & bad)


_Build = Callable[[np.ndarray], pa.Array]


def _leaf_column(reader: _Reader, rows: np.ndarray, schema: Schema) -> _Build:
    """Reads one leaf at each of `rows` (a mask), marks rows it refuses not ok, and returns how
    to build its Arrow column once the records kept are known."""
    k = kind(schema)
    type_ = physical_type(schema)
    if k in ("int", "long"):
        values = reader.varints(rows)
        if schema.logical is Logical.TIME:
            _reject(reader, rows, (values < 0) | (values >= _MICROS_PER_DAY))
        elif k == "int":
            low, high = _INT_RANGES.get(schema.type, _INT_RANGES[FieldType.INT32])
            _reject(reader, rows, (values < low) | (values > high))
        return lambda keep: _fixed_column(values, type_, keep)
    if k == "float":
        pos = reader.advance(rows, 4)
        raw = (reader.words[pos] & np.uint64(0xFFFFFFFF)).astype("<u4").view("<f4")
        # fastavro reads a float as a Python float, which Arrow narrows back: the same round
        # trip here, so NaN payloads match bit for bit (numpy warns of a signalling NaN's cast:
        # that quieting is the point, as it is for the bytes of a record refused later)
        with np.errstate(invalid="ignore"):
            floats = raw.astype(np.float64).astype(np.float32)
        return lambda keep: _fixed_column(floats, type_, keep)
    if k == "double":
        doubles = reader.words[reader.advance(rows, 8)].view("<f8")
        return lambda keep: _fixed_column(doubles, type_, keep)
    if k == "boolean":
        raw = reader.data[reader.advance(rows, 1)]
        _reject(reader, rows, raw > 1)
        flags = raw == 1
        return lambda keep: _fixed_column(flags, type_, keep)
    lens = reader.varints(rows)
    _reject(reader, rows, lens < 0)
    if k == "decimal":
        # 1 to 16 bytes of big-endian two's complement; longer (possible, never minimal for a
        # decimal(38)) or empty is left to fastavro, which says why.
        _reject(reader, rows, (lens < 1) | (lens > 16))
    lens = np.where(rows & reader.ok, lens, 0)
    starts = reader.advance(rows, lens)
    if k == "decimal":
        little = _decimals(reader, rows, starts, lens, schema.precision)
        return lambda keep: pa.Array.from_buffers(
            type_, len(keep), [_bitmap(keep), pa.py_buffer(little)], null_count=int((~keep).sum())
        )
    lens = np.where(reader.ok, lens, 0)
    offsets, joined = _gather(reader.data, starts, lens)
    if schema.type is FieldType.STRING:
        _check_utf8(reader, rows, offsets, joined)

    def strings(keep: np.ndarray) -> pa.Array:
        # Records dropped after their bytes were read keep them, hidden under a null.
        buffers = [_bitmap(keep), pa.py_buffer(offsets), joined]
        return pa.Array.from_buffers(type_, len(keep), buffers, null_count=int((~keep).sum()))

    return strings


def _field_column(reader: _Reader, rows: np.ndarray, schema: Schema, *, union: bool) -> _Build:
    """Reads one field at each of `rows` (a mask): its union branch if it is optional (`union`:
    it is a record's field), then a leaf, or each field of a struct in turn. Returns how to
    build its column from the records finally accepted (`ok`)."""
    if schema.optional and union:
        branch = reader.varints(rows)
        _reject(reader, rows, (branch != 0) & (branch != 1))
        rows = rows & (branch == 1) & reader.ok
    if not _is_struct(schema):
        leaf = _leaf_column(reader, rows, schema)
        return lambda ok: leaf(rows & ok)
    # each child reads only where no earlier field was refused (`reader.ok` as it is then: a
    # refused record's positions mean nothing any more)
    children = [
        _field_column(reader, rows & reader.ok, f.schema, union=True) for f in schema.fields
    ]
    fields = list(physical_type(schema))

    def struct(ok: np.ndarray) -> pa.Array:
        arrays = [child(ok) for child in children]
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=pa.array(~(rows & ok)))

    return struct


def _fixed_column(values: np.ndarray, type_: pa.DataType, keep: np.ndarray) -> pa.Array:
    # Values refused after they were read (out of range) must not reach the cast, even nulled.
    full = np.where(keep, values, values.dtype.type(0))
    return pa.array(full, mask=~keep).cast(type_)


def _gather(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, pa.Buffer]:
    """(offsets, bytes) of the slices `data[starts[i]:starts[i] + lens[i]]`, which follow one
    another in `data` (gaps allowed). Arrow copies them: seen as every other value of a binary
    array whose values in between are the gaps, they are a `take` of the even values."""
    n = len(starts)
    large = len(data) >= 2**31
    bounds = np.empty(2 * n, dtype=np.int64 if large else np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + lens
    type_ = pa.large_binary() if large else pa.binary()
    spread = pa.Array.from_buffers(
        type_, 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    )
    taken = spread.take(pa.array(np.arange(0, 2 * n, 2)))
    return _offsets(lens).astype(np.int32), taken.buffers()[2] or pa.py_buffer(b"")


def _decimals(
    reader: _Reader, rows: np.ndarray, starts: np.ndarray, lens: np.ndarray, precision: int
) -> np.ndarray:
    """The unscaled values of the decimals at `starts` (`lens` bytes big-endian, 1 to 16) as
    Arrow decimal128 (n, 2) little-endian int64 halves; marks out-of-range rows not ok."""
    ends = starts + lens
    # The 8 bytes ending at each decimal's end, and the 8 before; byte-swapped, bits beyond the
    # decimal's length are dropped by sign-extending from its top bit.
    low = reader.words[ends - 8].byteswap().view(np.int64)
    high = reader.words[ends - 16].byteswap().view(np.int64)
    size = np.clip(lens, 1, 16)
    drop = (64 - 8 * np.minimum(size, 8)).astype(np.int64)
    low = (low << drop) >> drop
    drop_high = (64 - 8 * np.clip(size - 8, 1, 8)).astype(np.int64)
    high = np.where(size > 8, (high << drop_high) >> drop_high, low >> 63)
    # |unscaled| < 10**precision, compared as 128-bit (high signed, low unsigned) halves.
    unsigned = low.view(np.uint64)
    bound = 10**precision
    b_hi, b_lo = bound >> 64, bound & (2**64 - 1)
    n_hi, n_lo = (-bound) >> 64, (-bound) & (2**64 - 1)
    below = (high < b_hi) | ((high == b_hi) & (unsigned < np.uint64(b_lo)))
    above = (high > n_hi) | ((high == n_hi) & (unsigned > np.uint64(n_lo)))
    _reject(reader, rows, ~(below & above))
    return np.stack([low, high], axis=1)


def _check_utf8(reader: _Reader, rows: np.ndarray, offsets: np.ndarray, joined: pa.Buffer) -> None:
    """Marks rows whose text is not UTF-8 not ok (fastavro refuses them)."""
    text = pa.Array.from_buffers(
        pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), joined]
    )
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        # Rare (corrupt data): find the culprits one by one.
        raw = memoryview(joined)
        for i in np.nonzero(rows)[0]:
            try:
                bytes(raw[offsets[i] : offsets[i + 1]]).decode("utf-8")
            except UnicodeDecodeError:
                reader.ok[i] = False


def _decode_block(
    array: pa.Array, columns: list[tuple[str | None, Schema]], header: bytes, schema: Schema
) -> tuple[pa.Array, np.ndarray]:
    n = len(array)
    valid = _valid(array)
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=array.offset + n + 1)
    offsets = offsets[array.offset :].astype(np.int64)
    data = _buffer(array, 2)[offsets[0] : offsets[-1]]
    start, end = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    reader = _Reader(data, start, end, valid & (end - start >= len(header)))
    pos = reader.advance(reader.ok, len(header))
    if len(header) <= 8:
        mask = np.uint64((1 << (8 * len(header))) - 1)
        wrong = (reader.words[pos] & mask) != np.uint64(int.from_bytes(header, "little"))
    else:
        got = reader.data[pos[:, None] + np.arange(len(header))]
        wrong = (got != np.frombuffer(header, np.uint8)).any(axis=1)
    _reject(reader, np.ones(n, bool), wrong)

    union = columns[0][0] is not None
    builds = [_field_column(reader, reader.ok.copy(), s, union=union) for _, s in columns]
    reader.ok &= reader.pos == reader.end  # trailing bytes: left to the per-record path's message
    arrays = [build(reader.ok) for build in builds]
    if union:
        fields = list(physical_type(schema))
        out = pa.StructArray.from_arrays(arrays, fields=fields, mask=pa.array(~reader.ok))
    else:
        out = arrays[0]
    return out, valid & ~reader.ok


def decode(
    array: pa.Array, columns: list[tuple[str | None, Schema]], header: bytes, schema: Schema
) -> tuple[pa.Array, np.ndarray]:
    """Parses a binary array of Avro records written with `header` and the schema whose
    `columns` these are (`encodable_columns`: leaves and structs of them). Returns the values
    (physical types; null where not decoded) and a mask of the records it left undecoded though
    they are not null: those the caller decodes one at a time (another schema id, bad bytes,
    values out of range…), to report them exactly."""
    n = len(array)
    if n == 0:
        return pa.array([], physical_type(schema)), np.zeros(0, bool)
    blocks = [
        _decode_block(array.slice(s, BLOCK), columns, header, schema) for s in range(0, n, BLOCK)
    ]
    if len(blocks) == 1:
        return blocks[0]
    return pa.concat_arrays([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])


__all__ = ["NullInRequired", "decode", "encode", "flat_columns", "kind"]
