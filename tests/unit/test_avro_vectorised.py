"""AvroConverter's vectorised path for flat schemas against its per-record fastavro path: the
same bytes, the same refusals (same record), the same values and error texts when decoding."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.converters import Decoded, arrow_type, canonical, converter_from_config
from sluice.converters._avro import MAGIC, _AvroEncoder
from sluice.converters._avro_vector import BLOCK
from sluice.converters._base import string_errors
from sluice.converters._json import decimal_of
from sluice.converters._schemas import from_physical, to_physical
from sluice.sdk import Field, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.converter_cases import INT_RANGES, NAMES, TEXT, decoded_rows, normal

DAY_0001_01_01, DAY_9999_12_31 = -719_162, 2_932_896
INT64 = (-(2**63), 2**63 - 1)
LEAF_TYPES = [*INT_RANGES, FieldType.FLOAT32, FieldType.FLOAT64, FieldType.BOOLEAN]
LEAF_TYPES += [FieldType.STRING, FieldType.BYTES]


@st.composite
def leaf(draw: Any) -> Schema:
    optional = draw(st.booleans())
    choice = draw(st.sampled_from([*LEAF_TYPES, "date", "time", "timestamp", "decimal"]))
    if choice == "decimal":
        precision = draw(st.integers(1, 38))
        return Schema.decimal(precision, draw(st.integers(0, precision)), optional=optional)
    if isinstance(choice, str):
        return getattr(Schema, choice)(optional=optional)
    return Schema.of(choice, optional=optional)


def flat_schemas() -> st.SearchStrategy[Schema]:
    struct = st.lists(st.tuples(NAMES, leaf()), min_size=1, max_size=8, unique_by=lambda p: p[0])
    return leaf() | st.builds(
        lambda fields, o: Schema.struct(*[Field(n, s) for n, s in fields], optional=o),
        struct,
        st.booleans(),
    )


def edges(low: int, high: int, *extra: int) -> st.SearchStrategy[int]:
    within = [v for v in (low, high, 0, -1, 1, *extra) if low <= v <= high]
    return st.integers(low, high) | st.sampled_from(within)


def leaf_values(s: Schema) -> st.SearchStrategy[Any]:
    """Physical values of a leaf, edges included (0001-01-01, 9999-12-31, int64 extremes…)."""
    if s.logical is not None:
        name = s.logical.value
        if name == "Date":
            return edges(-(2**31), 2**31 - 1, DAY_0001_01_01, DAY_9999_12_31)
        if name == "Time":
            return edges(0, 86_399_999_999, 45_296_000_001)
        if name == "Timestamp":
            return edges(*INT64, DAY_0001_01_01 * 86_400_000_000, 253_402_300_799_999_999)
        bound = 10**s.precision - 1
        return edges(-bound, bound, 127, 128, -128, -129).map(
            lambda u, sc=s.scale: decimal_of(u, sc)
        )
    if s.type in INT_RANGES:
        return edges(*INT_RANGES[s.type], 63, 64, -64, -65)
    if s.type is FieldType.FLOAT32:
        return st.floats(width=32)
    if s.type is FieldType.FLOAT64:
        return st.floats()
    if s.type is FieldType.BOOLEAN:
        return st.booleans()
    if s.type is FieldType.STRING:
        return TEXT | st.text(max_size=200) | st.just("😀" * 40)
    return st.binary(max_size=200)


def rows_of(schema: Schema, *, nulls_anywhere: bool = False) -> st.SearchStrategy[Any]:
    if schema.type is FieldType.STRUCT:
        fields = {
            f.name: (
                st.none() | leaf_values(f.schema)
                if f.schema.optional or nulls_anywhere
                else leaf_values(f.schema)
            )
            for f in schema.fields
        }
        row = st.fixed_dictionaries(fields)
    else:
        row = leaf_values(schema)
    return st.none() | row


@st.composite
def flat_data(draw: Any, nulls_anywhere: bool = False) -> tuple[Schema, list[Any], int]:
    schema = draw(flat_schemas())
    rows = draw(st.lists(rows_of(schema, nulls_anywhere=nulls_anywhere), min_size=1, max_size=8))
    skip = draw(st.integers(0, min(2, len(rows) - 1)))  # sliced arrays have an offset
    return schema, rows, skip


def nested_schemas(depth: int = 2) -> st.SearchStrategy[Schema]:
    """Structs whose fields are leaves or, down to `depth`, structs again (a CDC envelope's
    shape: optional `before`/`after` beside a required `source`)."""
    field = leaf() if depth == 0 else leaf() | nested_schemas(depth - 1)
    fields = st.lists(st.tuples(NAMES, field), min_size=1, max_size=4, unique_by=lambda p: p[0])
    return st.builds(
        lambda fs, o: Schema.struct(*[Field(n, s) for n, s in fs], optional=o),
        fields,
        st.booleans(),
    )


def nested_values(s: Schema, nulls_anywhere: bool) -> st.SearchStrategy[Any]:
    """Values of a struct's fields: None where the field is optional (or anywhere, to provoke
    refusals), structs recursively."""

    def field(f: Schema) -> st.SearchStrategy[Any]:
        value = nested_values(f, nulls_anywhere) if f.type is FieldType.STRUCT else leaf_values(f)
        return st.none() | value if f.optional or nulls_anywhere else value

    return st.fixed_dictionaries({f.name: field(f.schema) for f in s.fields})


@st.composite
def nested_data(draw: Any, nulls_anywhere: bool = False) -> tuple[Schema, list[Any], int]:
    schema = draw(nested_schemas())
    rows = st.none() | nested_values(schema, nulls_anywhere)
    drawn = draw(st.lists(rows, min_size=1, max_size=8))
    skip = draw(st.integers(0, min(2, len(drawn) - 1)))
    return schema, drawn, skip


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> SqliteSchemaRegistry:
    return SqliteSchemaRegistry(Path(tmp_path_factory.mktemp("avro")) / "schemas.sqlite")


def _avro(registry: SqliteSchemaRegistry) -> Any:
    return converter_from_config({"value.converter": "AvroConverter"}, "value", registry)


def _per_record(encoder: _AvroEncoder, array: pa.Array) -> pa.Array:
    header = MAGIC + encoder.schema_id.to_bytes(4, "big")
    return encoder._per_record(to_physical(array, encoder.schema), header)


@PROPERTY
@given(data=flat_data() | nested_data())
def test_vectorised_encode_is_byte_identical(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int]
) -> None:
    schema, rows, skip = data
    array = from_physical(rows, schema).slice(skip)
    encoder = _avro(registry).encoder(schema)
    assert encoder.arrow_mode == "vectorised"
    fast = encoder.arrow(array)
    assert fast.type == pa.binary()
    fast.validate(full=True)
    assert fast.to_pylist() == _per_record(encoder, array).to_pylist()


@PROPERTY
@given(data=flat_data(nulls_anywhere=True) | nested_data(nulls_anywhere=True))
def test_vectorised_encode_refuses_the_same_record(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int]
) -> None:
    """Flat and nested (structs in structs) schemas: the same bytes, or the same refusal of
    the same record naming the same (dotted) field."""
    schema, rows, skip = data
    array = from_physical(rows, schema).slice(skip)
    encoder = _avro(registry).encoder(schema)
    assert encoder.arrow_mode == "vectorised"
    fast, per_record = _both_outcomes(encoder, array)
    assert fast == per_record


def _both_outcomes(encoder: _AvroEncoder, array: pa.Array) -> list[Any]:
    """The vectorised and the per-record encoding of `array`: the values, or the refusal."""
    outcomes = []
    for encode in (encoder.arrow, lambda a: _per_record(encoder, a)):
        try:
            out = encode(array)
            out.validate(full=True)
            outcomes.append(out.to_pylist())
        except ValueError as exc:  # RecordError
            outcomes.append((type(exc).__name__, str(exc)))
    return outcomes


@PROPERTY
@given(data=flat_data() | nested_data())
def test_vectorised_round_trip(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int]
) -> None:
    schema, rows, skip = data
    converter = _avro(registry)
    topic = converter.encoder(schema).arrow(from_physical(rows, schema).slice(skip))
    decoder = converter.decoder(schema)
    assert decoder.arrow_mode == "vectorised"
    result = decoder.arrow(topic)
    assert result.errors is None
    assert decoded_rows(result.values, schema) == normal(rows[skip:])


def test_arrays_and_maps_stay_per_record(registry: SqliteSchemaRegistry) -> None:
    inner = Schema.struct(("a", Schema.of(FieldType.INT32)))
    for schema in (
        Schema.struct(("s", inner), ("l", Schema.array(Schema.string()))),
        Schema.struct(("m", Schema.map_(Schema.string(), Schema.string()))),
        Schema.array(Schema.string()),
    ):
        assert _avro(registry).encoder(schema).arrow_mode == "per-record"
        assert _avro(registry).decoder(schema).arrow_mode == "per-record"
    assert _avro(registry).encoder(Schema.struct(("s", inner))).arrow_mode == "vectorised"
    assert _avro(registry).decoder(Schema.struct(("s", inner))).arrow_mode == "vectorised"
    assert registry.schema_id(canonical(inner)) > 0


def test_nested_null_in_required_names_the_dotted_field(registry: SqliteSchemaRegistry) -> None:
    inner = Schema.struct(("id", Schema.of(FieldType.INT64, optional=False)), optional=True)
    schema = Schema.struct(("before", inner), ("after", inner), ("op", Schema.string()))
    rows = [
        {"before": None, "after": {"id": 1}, "op": "c"},
        {"before": {"id": None}, "after": None, "op": "d"},
    ]
    encoder = _avro(registry).encoder(schema)
    with pytest.raises(ValueError, match=r"value\.before\.id is null") as raised:
        encoder.arrow(from_physical(rows, schema))
    assert getattr(raised.value, "index", None) == 1
    good = encoder.arrow(from_physical(rows[:1], schema))
    assert good.to_pylist() == _per_record(encoder, from_physical(rows[:1], schema)).to_pylist()


def _decode_per_record(decoder: Any, array: pa.Array) -> Any:
    values, reasons = decoder._per_record(array.to_pylist())
    return Decoded(from_physical(values, decoder.schema), string_errors(reasons))


def _outcome(decode: Any, array: pa.Array, schema: Schema) -> Any:
    try:
        result = decode(array)
    except (ValueError, OverflowError, pa.ArrowException) as exc:
        # Values fastavro accepts but Arrow cannot hold (an int32 beyond 2**31): both fail.
        return type(exc).__name__
    errors = None if result.errors is None else result.errors.to_pylist()
    # fastavro's EOFError names its BytesIO by address (as the per-record path always did).
    errors = errors and [e and re.sub(r" at 0x[0-9a-f]+", " at 0x…", e) for e in errors]
    assert result.values.type == arrow_type(schema)
    return decoded_rows(result.values, schema), errors


@st.composite
def damaged(draw: Any, raw: bytes, other_id: bytes) -> bytes:
    """`raw` truncated, with a byte changed, with bytes appended, another id, or garbage."""
    how = draw(st.sampled_from(["keep", "cut", "poke", "append", "id", "garbage"]))
    if how == "cut":
        return raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    if how == "poke" and len(raw) > 5:
        at = draw(st.integers(5, len(raw) - 1))
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if how == "append":
        return raw + draw(st.binary(min_size=1, max_size=3))
    if how == "id":
        return raw[:1] + other_id + raw[5:]
    if how == "garbage":
        return draw(st.binary(max_size=20))
    return raw


@PROPERTY
@given(data=flat_data() | nested_data(), st_data=st.data())
def test_vectorised_decode_matches_per_record_on_damaged_bytes(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int], st_data: Any
) -> None:
    schema, rows, _ = data
    converter = _avro(registry)
    other = registry.schema_id(canonical(Schema.struct(("zz_other", Schema.string()))))
    raws = [
        None if raw is None else st_data.draw(damaged(raw, other.to_bytes(4, "big")))
        for raw in converter.encoder(schema).arrow(from_physical(rows, schema)).to_pylist()
    ]
    decoder = converter.decoder(schema)
    assert decoder.arrow_mode == "vectorised"
    array = pa.array(raws, pa.binary())
    fast = _outcome(decoder.arrow, array, schema)
    assert fast == _outcome(lambda a: _decode_per_record(decoder, a), array, schema)


def test_a_length_near_2_63_is_refused_like_the_per_record_path(
    registry: SqliteSchemaRegistry,
) -> None:
    """A damaged string length near 2**63 (found by the property above) once wrapped the
    reader's position around to one that looked in range: Arrow then refused the column
    (ArrowInvalid) instead of the record being refused with fastavro's reason."""
    schema = Schema.struct(("s", Schema.of(FieldType.STRING, optional=False)))
    good = _avro(registry).encoder(schema).arrow(pa.array([{"s": "abcd"}], arrow_type(schema)))
    header = good[0].as_py()[:5]
    # a length of 2**63 - 5 (zig-zag varint), read at a position past 4: the sum wraps
    damaged_bytes = header + b"\xf6\xff\xff\xff\xff\xff\xff\xff\xff\x01abcd"
    decoder = _avro(registry).decoder(schema)
    array = pa.array([damaged_bytes, good[0].as_py()], pa.binary())
    fast = _outcome(decoder.arrow, array, schema)
    assert fast == _outcome(lambda a: _decode_per_record(decoder, a), array, schema)
    values, errors = fast
    assert values[1] == {"s": "abcd"} and errors[0].startswith("value is not valid Avro")


def test_vectorised_decode_reads_other_writer_versions(registry: SqliteSchemaRegistry) -> None:
    """Records of an older schema id are resolved by fastavro, in place among the others."""
    v1 = Schema.struct(("a", Schema.of(FieldType.INT32, optional=False)), name="com.x.V")
    v2 = Schema.struct(
        ("a", Schema.of(FieldType.INT32, optional=False)), ("b", Schema.string()), name="com.x.V"
    )
    old = _avro(registry).encoder(v1).arrow(pa.array([{"a": 1}], arrow_type(v1)))
    new = _avro(registry).encoder(v2).arrow(pa.array([{"a": 2, "b": "x"}], arrow_type(v2)))
    topic = pa.concat_arrays([new, old, pa.array([None, b"\x00"], pa.binary()), new])
    result = _avro(registry).decoder(v2).arrow(topic)
    assert result.values.to_pylist() == [
        {"a": 2, "b": "x"},
        {"a": 1, "b": None},
        None,
        None,
        {"a": 2, "b": "x"},
    ]
    assert result.errors.to_pylist() == [
        None,
        None,
        None,
        "value is not Avro with a schema id (expected byte 0x00 and a 4-byte id, got 00)",
        None,
    ]


# -- edges: word-at-a-time varints, strings built by Arrow, blocks ------------------------------
def _same_as_per_record(registry: SqliteSchemaRegistry, schema: Schema, rows: list[Any]) -> None:
    """The vectorised encoding is fastavro's byte for byte, and decoding it gives the rows back
    (and the same as decoding it per record)."""
    converter = _avro(registry)
    encoder, decoder = converter.encoder(schema), converter.decoder(schema)
    array = from_physical(rows, schema)
    fast = encoder.arrow(array)
    fast.validate(full=True)
    assert fast.to_pylist() == _per_record(encoder, array).to_pylist()
    result = decoder.arrow(fast)
    assert result.errors is None
    assert decoded_rows(result.values, schema) == normal(rows)
    assert _outcome(decoder.arrow, fast, schema) == _outcome(
        lambda a: _decode_per_record(decoder, a), fast, schema
    )


def _varint_edges(low: int, high: int) -> list[int]:
    """Values whose zig-zag varint is 1 … 10 bytes, at both ends of each length."""
    values = {low, high, 0, -1, 1}
    for k in range(1, 10):
        for v in (2 ** (7 * k - 1), -(2 ** (7 * k - 1))):  # zig-zag 2**(7k): k+1 bytes
            values.update({v - 1, v, v + 1})
    return sorted(v for v in values if low <= v <= high)


@pytest.mark.parametrize("type_", [FieldType.INT32, FieldType.INT64])
@pytest.mark.parametrize("optional", [False, True])
def test_varints_at_every_length(
    registry: SqliteSchemaRegistry, type_: FieldType, optional: bool
) -> None:
    values = _varint_edges(*INT_RANGES[type_])
    if type_ is FieldType.INT64:
        sizes = {len(_per_record_varint(v)) for v in values}
        assert sizes == set(range(1, 11))
    schema = Schema.struct(("v", Schema.of(type_, optional=optional)), ("s", Schema.string()))
    # Each varint at every alignment of the 8-byte words, by a string of 0 … 7 bytes before.
    rows = [{"v": v, "s": "x" * (i % 8)} for i, v in enumerate(values)]
    _same_as_per_record(registry, schema, rows)
    _same_as_per_record(registry, Schema.of(type_, optional=optional), values)


def _per_record_varint(value: int) -> bytes:
    z = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes([*out, z])


def test_varint_module_against_python() -> None:
    import numpy as np

    from sluice.converters import _avro_varint as varint

    values = _varint_edges(*INT_RANGES[FieldType.INT64])
    z = varint.zigzag(np.array(values, dtype=np.int64))
    sizes = varint.sizes(z)
    matrix = varint.encode(z, sizes, 10)
    data = b"".join(_per_record_varint(v) for v in values)
    assert [bytes(row[:s]) for row, s in zip(matrix, sizes, strict=True)] == [
        _per_record_varint(v) for v in values
    ]
    assert not any(row[s:].any() for row, s in zip(matrix, sizes, strict=True))
    buffer = np.frombuffer(data + bytes(16), np.uint8)
    starts = np.cumsum([0, *(len(_per_record_varint(v)) for v in values[:-1])])
    words = np.ndarray((len(buffer) - 7,), "<u8", buffer, strides=(1,))
    got, got_sizes = varint.decode(words[starts])
    long = got_sizes > 8
    got[long], got_sizes[long], fits = varint.decode_long(buffer, starts[long])
    assert fits.all()
    assert varint.unzigzag(got).tolist() == values
    assert got_sizes.tolist() == sizes.tolist()


EDGE_SCHEMA = Schema.struct(
    ("i", Schema.of(FieldType.INT32)),
    ("l", Schema.of(FieldType.INT64)),
    ("f", Schema.of(FieldType.FLOAT32)),
    ("d", Schema.of(FieldType.FLOAT64)),
    ("b", Schema.of(FieldType.BOOLEAN)),
    ("s", Schema.string()),
    ("y", Schema.bytes_()),
    ("m", Schema.decimal(38, 2)),
    ("t", Schema.time()),
    ("ts", Schema.timestamp()),
    ("dt", Schema.date()),
)
FULL_ROW = {
    "i": -7,
    "l": 2**40,
    "f": 1.5,
    "d": -0.0,
    "b": True,
    "s": "naïve 😀",
    "y": b"\x00\xff",
    "m": decimal_of(-12345, 2),
    "t": 45_296_000_001,
    "ts": 1_704_067_200_000_000,
    "dt": 19_723,
}


def test_nulls_in_every_optional_column(registry: SqliteSchemaRegistry) -> None:
    rows: list[Any] = [FULL_ROW, None, dict.fromkeys(FULL_ROW)]
    for name in FULL_ROW:  # one null at a time, each column
        rows.append({**FULL_ROW, name: None})
    rows.append(FULL_ROW)
    _same_as_per_record(registry, EDGE_SCHEMA, rows)


def test_empty_and_multibyte_strings_and_bytes(registry: SqliteSchemaRegistry) -> None:
    texts = ["", "a", "é", "€", "😀", "😀👍🏽" * 30, "\x00", "", "ü" * 200, "end"]
    blobs = [b"", b"\x00", b"", b"\xff" * 300, b"\x80\x80", b"", b"x", b"", b"", b"\x7f"]
    schema = Schema.struct(("s", Schema.string(optional=False)), ("y", Schema.bytes_()))
    _same_as_per_record(
        registry, schema, [{"s": s, "y": y} for s, y in zip(texts, blobs, strict=True)]
    )
    _same_as_per_record(registry, Schema.string(), [*texts, None])
    _same_as_per_record(registry, Schema.bytes_(optional=False), blobs)
    # All values empty: the data buffers are empty.
    _same_as_per_record(registry, schema, [{"s": "", "y": b""}] * 3)


def test_decimals_at_every_length(registry: SqliteSchemaRegistry) -> None:
    """Two's complement of 1 … 16 bytes, both signs, both ends of each length."""
    unscaled = {0, 1, -1, 10**38 - 1, -(10**38 - 1)}
    for k in range(1, 17):
        for v in (2 ** (8 * k - 1), -(2 ** (8 * k - 1))):
            unscaled.update({v - 1, v, v + 1})
    values = [decimal_of(u, 3) for u in sorted(unscaled) if abs(u) < 10**38]
    schema = Schema.struct(("m", Schema.decimal(38, 3)), ("s", Schema.string()))
    rows = [{"m": v, "s": "x" * (i % 8)} for i, v in enumerate(values)]
    _same_as_per_record(registry, schema, rows)


def test_floats_keep_their_bits(registry: SqliteSchemaRegistry) -> None:
    values = [0.0, -0.0, math.inf, -math.inf, math.nan, 2.0**-149, 2.0**127, -1.25]
    schema = Schema.struct(
        ("f", Schema.of(FieldType.FLOAT32)), ("d", Schema.of(FieldType.FLOAT64, optional=False))
    )
    _same_as_per_record(registry, schema, [{"f": v, "d": v} for v in values])


def test_constant_fields_are_encoded_once_and_repeated(registry: SqliteSchemaRegistry) -> None:
    """A field with the same value in every record (a snapshot chunk's `source`, `op`, `ts_ms`)
    is encoded once and its bytes repeated: the same bytes as record by record, whether it is
    short (inside a run) or long (its own payload), a struct, all null, or equal floats of
    other bits (0.0 and -0.0 are not constant)."""
    source = Schema.struct(
        ("connector", Schema.string(optional=False)),
        ("db", Schema.string()),
        ("lsn", Schema.of(FieldType.INT64)),
        ("snapshot", Schema.string()),
        ("x", Schema.of(FieldType.FLOAT64)),
        optional=False,
    )
    schema = Schema.struct(
        ("before", Schema.struct(("id", Schema.of(FieldType.INT64)))),
        ("after", Schema.struct(("id", Schema.of(FieldType.INT64)), ("note", Schema.string()))),
        ("source", source),
        ("op", Schema.string(optional=False)),
        ("long", Schema.string()),
        ("zero", Schema.of(FieldType.FLOAT64)),
    )
    block = {"connector": "postgresql", "db": None, "lsn": 2**40, "snapshot": "true", "x": 0.5}
    for n in (2, 3, BLOCK + 1):
        rows = [
            {
                "before": None,
                "after": {"id": i, "note": f"n{i}"},
                "source": block,
                "op": "r",
                "long": "€" * 40,
                "zero": 0.0,
            }
            for i in range(n)
        ]
        _same_as_per_record(registry, schema, rows)
        rows[-1] = {**rows[-1], "zero": -0.0, "source": {**block, "snapshot": "last"}}
        _same_as_per_record(registry, schema, rows)
        rows[0] = None  # a null record: nothing is constant over every record
        _same_as_per_record(registry, schema, rows)


def _bench_like_rows(n: int) -> tuple[Schema, list[Any]]:
    schema = Schema.struct(
        ("id", Schema.of(FieldType.INT64, optional=False)),
        ("name", Schema.string()),
        ("x", Schema.of(FieldType.FLOAT64)),
    )
    rows = [
        None if i % 1000 == 999 else {"id": i * 7919, "name": f"n{i}" * (i % 3), "x": i / 3}
        for i in range(n)
    ]
    return schema, rows


@pytest.mark.parametrize(
    "n", [BLOCK - 1, BLOCK, BLOCK + 1, 65_535, 65_536, 65_537], ids=lambda n: f"{n}_records"
)
def test_record_counts_at_block_boundaries(registry: SqliteSchemaRegistry, n: int) -> None:
    schema, rows = _bench_like_rows(n)
    converter = _avro(registry)
    encoder, decoder = converter.encoder(schema), converter.decoder(schema)
    array = from_physical(rows, schema)
    fast = encoder.arrow(array)
    assert fast.equals(_per_record(encoder, array))
    result = decoder.arrow(fast)
    assert result.errors is None
    assert result.values.equals(array)


def test_damaged_records_mid_block_fall_back(registry: SqliteSchemaRegistry) -> None:
    """Records the vectorised reader refuses, in the middle of the first and second blocks, go
    through fastavro with its error texts; every other record decodes as written."""
    schema, rows = _bench_like_rows(BLOCK + 5_000)
    converter = _avro(registry)
    encoder, decoder = converter.encoder(schema), converter.decoder(schema)
    raws = encoder.arrow(from_physical(rows, schema)).to_pylist()
    other = registry.schema_id(canonical(Schema.struct(("zz_other", Schema.string()))))
    damage = {
        100: lambda r: r[:-1],  # truncated
        BLOCK // 2: lambda r: r + b"\x00",  # trailing byte
        BLOCK + 17: lambda r: r[:1] + other.to_bytes(4, "big") + r[5:],  # another writer
        BLOCK + 2_500: lambda r: r[:-1] + b"\x07",  # the last byte no longer ends a varint
    }
    for at, how in damage.items():
        assert raws[at] is not None
        raws[at] = how(raws[at])
    array = pa.array(raws, pa.binary())
    fast = _outcome(decoder.arrow, array, schema)
    assert fast == _outcome(lambda a: _decode_per_record(decoder, a), array, schema)
    values, errors = fast
    assert {100, BLOCK // 2} <= {i for i, e in enumerate(errors) if e} <= set(damage)
    kept = [i for i in range(len(rows)) if i not in damage]
    assert [values[i] for i in kept] == normal([rows[i] for i in kept])


def test_invalid_utf8_and_odd_encodings_fall_back(registry: SqliteSchemaRegistry) -> None:
    """Bytes fastavro refuses or reads differently than the usual encoding: invalid UTF-8, a
    branch written as a 2-byte varint, a 9-byte varint for a small value, varints past 64 bits,
    a Time past midnight."""
    schema = Schema.struct(
        ("s", Schema.string()), ("l", Schema.of(FieldType.INT64)), ("t", Schema.time())
    )
    converter = _avro(registry)
    encoder, decoder = converter.encoder(schema), converter.decoder(schema)
    header = MAGIC + encoder.schema_id.to_bytes(4, "big")
    good = b"\x02\x06abc\x02\x04\x02\x02"  # s="abc", l=2, t=1
    raws = [
        header + good,
        header + b"\x02\x04\xc3\x28\x02\x04\x02\x02",  # invalid UTF-8
        header + b"\x02\x08\xf0\x9f\x98\x80\x02\x04\x02\x02",  # 😀
        header + b"\x82\x00\x06abc\x02\x04\x02\x02",  # branch 1 as 0x82 0x00
        header + b"\x02\x06abc\x02" + b"\x84" + b"\x80" * 7 + b"\x00" + b"\x02\x02",  # l=2, 9 bytes
        header + b"\x02\x06abc\x02\x04\x02" + _per_record_varint(86_400_000_000),  # t: 24:00
        header + b"\x02\x06abc\x02\x80\x01\x02\x02",  # l=64: 2 bytes, the first 0x80
        # Past 64 bits: 10 bytes with more than bit 63 in the last, and 11 bytes (fastavro wraps).
        header + b"\x02\x06abc\x02" + b"\x80" * 9 + b"\x02\x02\x02",
        header + b"\x02\x06abc\x02" + b"\xff" * 10 + b"\x01\x02\x02",
        header + b"\x02\x06abc\x02\x04\x02\x02",
    ]
    # All together, and each alone beside a usual record (the one-byte shortcut then applies to
    # every other column).
    for some in [raws, *([raws[0], raw] for raw in raws)]:
        array = pa.array(some, pa.binary())
        fast = _outcome(decoder.arrow, array, schema)
        assert fast == _outcome(lambda a: _decode_per_record(decoder, a), array, schema)
    values, errors = _outcome(decoder.arrow, pa.array(raws, pa.binary()), schema)
    assert values[2]["s"] == "😀"
    assert values[3] == values[4] == values[0]
    assert errors[1] and errors[5] and not any(errors[i] for i in (0, 2, 3, 4, 6, 9))
    assert values[6]["l"] == 64


def test_output_past_2_gib_falls_back_to_fastavro(
    registry: SqliteSchemaRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.converters import _avro_vector

    schema = Schema.struct(("s", Schema.string()), ("i", Schema.of(FieldType.INT32)))
    array = from_physical([{"s": "x" * 100, "i": 1}, None, {"s": None, "i": 2}], schema)
    encoder = _avro(registry).encoder(schema)
    header = MAGIC + encoder.schema_id.to_bytes(4, "big")
    physical = to_physical(array, schema)
    assert _avro_vector.encode(physical, encoder._columns, header) is not None
    monkeypatch.setattr(_avro_vector, "_data_size", lambda _: 2**31)  # as if 2 GiB of text
    assert _avro_vector.encode(physical, encoder._columns, header) is None
    assert encoder.arrow(array).to_pylist() == _per_record(encoder, array).to_pylist()
