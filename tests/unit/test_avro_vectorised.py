"""AvroConverter's vectorised path for flat schemas against its per-record fastavro path: the
same bytes, the same refusals (same record), the same values and error texts when decoding."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.converters import Decoded, arrow_type, canonical, converter_from_config
from sluice.converters._avro import MAGIC, _AvroEncoder
from sluice.converters._base import string_errors
from sluice.converters._json import decimal_of
from sluice.converters._schemas import from_physical, to_physical
from sluice.sdk import Field, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.unit.test_converters import INT_RANGES, NAMES, TEXT, decoded_rows, normal

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
@given(data=flat_data())
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
@given(data=flat_data(nulls_anywhere=True))
def test_vectorised_encode_refuses_the_same_record(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int]
) -> None:
    schema, rows, skip = data
    array = from_physical(rows, schema).slice(skip)
    encoder = _avro(registry).encoder(schema)
    outcomes = []
    for encode in (encoder.arrow, lambda a: _per_record(encoder, a)):
        try:
            outcomes.append(encode(array).to_pylist())
        except ValueError as exc:  # RecordError
            outcomes.append((type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]


@PROPERTY
@given(data=flat_data())
def test_vectorised_round_trip(
    registry: SqliteSchemaRegistry, data: tuple[Schema, list[Any], int]
) -> None:
    schema, rows, skip = data
    converter = _avro(registry)
    topic = converter.encoder(schema).arrow(from_physical(rows, schema).slice(skip))
    result = converter.decoder(schema).arrow(topic)
    assert result.errors is None
    assert decoded_rows(result.values, schema) == normal(rows[skip:])


def test_nested_schemas_stay_per_record(registry: SqliteSchemaRegistry) -> None:
    inner = Schema.struct(("a", Schema.of(FieldType.INT32)))
    for schema in (
        Schema.struct(("s", inner)),
        Schema.struct(("l", Schema.array(Schema.string()))),
        Schema.array(Schema.string()),
    ):
        assert _avro(registry).encoder(schema).arrow_mode == "per-record"
    assert registry.schema_id(canonical(inner)) > 0


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
@given(data=flat_data(), st_data=st.data())
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
