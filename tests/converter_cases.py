"""Hypothesis strategies and helpers for the converter round-trip tests (shared by the Arrow-level
tests in tests/unit/test_converters.py and the Spark SQL ones in
tests/integration/test_converters_spark.py)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from sluice.converters._json import MAX_MILLIS, decimal_of
from sluice.converters._schemas import to_physical
from sluice.sdk import Field, FieldType, Schema

INT_RANGES = {
    FieldType.INT8: (-(2**7), 2**7 - 1),
    FieldType.INT16: (-(2**15), 2**15 - 1),
    FieldType.INT32: (-(2**31), 2**31 - 1),
    FieldType.INT64: (-(2**63), 2**63 - 1),
}
#: Microseconds since midnight: 00:00:00, 00:00:00.000001, 12:34:56.000001, 23:59:59.999999.
TIME_EDGES = [0, 1, 45_296_000_001, 86_399_999_999]
# Text without lone surrogates (Arrow strings are UTF-8), emoji included.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["😀👍🏽", "naïve", "", '"quoted" \\ back', "line\nbreak", "\x00nul"]
)
NAMES = st.text(
    st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6
) | st.sampled_from(["id", "a b", "1st", "x.y", "`tick`", "ünï"])


@st.composite
def decimals(draw: Any, optional: bool) -> Schema:
    precision = draw(st.integers(1, 38))
    return Schema.decimal(precision, draw(st.integers(0, precision)), optional=optional)


def leaves(optional: st.SearchStrategy[bool]) -> st.SearchStrategy[Schema]:
    types = [*INT_RANGES, FieldType.FLOAT32, FieldType.FLOAT64, FieldType.BOOLEAN]
    types += [FieldType.STRING, FieldType.BYTES]
    primitive = st.builds(lambda t, o: Schema.of(t, optional=o), st.sampled_from(types), optional)
    logical = st.builds(
        lambda f, o: f(optional=o),
        st.sampled_from([Schema.date, Schema.time, Schema.timestamp]),
        optional,
    )
    return primitive | logical | optional.flatmap(decimals)


def schemas(*, string_keys_only: bool = False, max_leaves: int = 8) -> st.SearchStrategy[Schema]:
    optional = st.booleans()
    keys = st.sampled_from([Schema.string(optional=False)])
    if not string_keys_only:
        keys = keys | st.sampled_from(
            [Schema.of(FieldType.INT32, optional=False), Schema.date(optional=False)]
        )

    def extend(children: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
        struct = st.lists(
            st.tuples(NAMES, children), min_size=1, max_size=4, unique_by=lambda p: p[0]
        ).flatmap(
            lambda fields: optional.map(
                lambda o: Schema.struct(*[Field(n, s) for n, s in fields], optional=o)
            )
        )
        array = st.builds(lambda c, o: Schema.array(c, optional=o), children, optional)
        map_ = st.builds(lambda k, c, o: Schema.map_(k, c, optional=o), keys, children, optional)
        return struct | array | map_

    return st.recursive(leaves(optional), extend, max_leaves=max_leaves)


def values(schema: Schema, *, top: bool = False) -> st.SearchStrategy[Any]:
    """Physical Python values of `schema` (ints for dates, times and µs timestamps)."""
    s = schema
    if s.logical is not None:
        if s.logical.value == "Date":
            base = st.integers(-(2**31), 2**31 - 1)
        elif s.logical.value == "Time":
            base = st.integers(0, 86_399_999_999) | st.sampled_from(TIME_EDGES)
        elif s.logical.value == "Timestamp":
            # The JSON form carries epoch milliseconds: ±292,471 years (Spark's own bounds).
            base = st.integers(-MAX_MILLIS * 1000, MAX_MILLIS * 1000)
        else:
            bound = 10**s.precision - 1
            base = st.integers(-bound, bound).map(lambda u, sc=s.scale: decimal_of(u, sc))
    elif s.type in INT_RANGES:
        base = st.integers(*INT_RANGES[s.type])
    elif s.type is FieldType.FLOAT32:
        base = st.floats(width=32)
    elif s.type is FieldType.FLOAT64:
        base = st.floats()
    elif s.type is FieldType.BOOLEAN:
        base = st.booleans()
    elif s.type is FieldType.STRING:
        base = TEXT
    elif s.type is FieldType.BYTES:
        base = st.binary(max_size=12)
    elif s.type is FieldType.STRUCT:
        base = st.fixed_dictionaries({f.name: values(f.schema) for f in s.fields})
    elif s.type is FieldType.ARRAY:
        base = st.lists(values(s.value_schema), max_size=3)
    else:
        base = st.lists(
            st.tuples(values(s.key_schema), values(s.value_schema)),
            max_size=3,
            unique_by=lambda p: p[0],
        )
    return st.none() | base if (s.optional or top) else base


@st.composite
def schema_and_rows(draw: Any, **kwargs: Any) -> tuple[Schema, list[Any]]:
    schema = draw(schemas(**kwargs))
    rows = draw(st.lists(values(schema, top=True), min_size=1, max_size=6))
    return schema, rows


def normal(value: Any) -> Any:
    """Comparable form: NaN equal to itself, maps and structs as lists/dicts."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    return value


def millis(schema: Schema, value: Any) -> Any:
    """What the JSON form keeps of a physical value: times and timestamps floored to
    milliseconds."""
    if value is None:
        return None
    s = schema
    if s.logical is not None and s.logical.value in ("Time", "Timestamp"):
        return (value // 1000) * 1000
    if s.type is FieldType.STRUCT:
        return {f.name: millis(f.schema, value[f.name]) for f in s.fields}
    if s.type is FieldType.ARRAY:
        return [millis(s.value_schema, v) for v in value]
    if s.type is FieldType.MAP:
        return [(millis(s.key_schema, k), millis(s.value_schema, v)) for k, v in value]
    return value


def decoded_rows(array: pa.Array, schema: Schema) -> list[Any]:
    return normal(to_physical(array, schema).to_pylist())


JSON_OPTIONS = [
    {},
    {"decimal.format": "NUMERIC"},
    {"schemas.enable": "false"},
    {"schemas.enable": "false", "decimal.format": "numeric"},
]
