"""JsonConverter's type table: one row per Connect type, its four codecs side by side.

A value goes to JSON and back in two forms: Spark SQL (`to_json` / `from_json`, vectorised in the
JVM) and Python (per record, the `json` module). Each row of `CODECS` says, for one leaf type
(a primitive or a logical type), how each of the four directions treats it:

=========== ==================== ================ ======================== ===================
type        SQL encode (to_json) Python encode    SQL decode (from_json)   Python decode
=========== ==================== ================ ======================== ===================
Date        unix_date            as is (days)     int, date_from_unix_date int32 days
Time        time_to_millis       us // 1000       int, time_from_millis    ms of day * 1000
Timestamp   unix_millis          us // 1000       bigint, timestamp_millis epoch ms * 1000
Decimal     base64 or number     base64 or number string or decimal        base64 or number
BYTES       base64               base64           string, try_to_binary    base64 text
INT8-INT64  as is                as is            tinyint ... bigint       int in range
FLOAT32/64  as is                NaN/Infinity     float, double            number, NaN text
BOOLEAN     as is                as is            boolean                  bool
STRING      as is                as is            string                   text (else JSON)
=========== ==================== ================ ======================== ===================

Structs, arrays and maps have no row: one walk per form (`sql_walk`, `py_encoder`,
`py_decoder`) goes through them, checks required (non-optional) nulls the same way in every
direction, and asks the table at each leaf. The leaf pieces themselves are in
`sluice.converters._json_sql` and `sluice.converters._json_python`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.converters import _json_python as py
from sluice.converters import _json_sql as sql
from sluice.converters._schemas import describe
from sluice.sdk import FieldType, Logical, Schema, literal, quote

#: Largest |epoch milliseconds| whose microseconds fit in a 64-bit timestamp.
MAX_MILLIS = 9_223_372_036_854_775
MILLIS_PER_DAY = 86_400_000
INT_RANGES = {
    FieldType.INT8: (-(2**7), 2**7 - 1),
    FieldType.INT16: (-(2**15), 2**15 - 1),
    FieldType.INT32: (-(2**31), 2**31 - 1),
    FieldType.INT64: (-(2**63), 2**63 - 1),
}

#: (condition, message) pairs: the SQL form's per-record problems, first true one reported.
Checks = list[tuple[str, str]]
#: A Python codec: a physical value (or parsed JSON) to parsed JSON (or a physical value).
PyCodec = Callable[[Any], Any]


@dataclass(frozen=True)
class Codec:
    """One leaf type's four codecs (see the module docstring for the table).

    ``ddl``: the Spark type `from_json` reads the JSON as; ``sql_encode(e, s, numeric)``: SQL of
    value ``e`` in the shape `to_json` writes; ``py_encode(s, where, numeric)``: a function from
    a physical value to what `json.dumps` writes; ``sql_decode(e, s, where, numeric, checks)``:
    SQL turning what `from_json` read into the value (problems appended to ``checks``);
    ``py_decode(s, where, numeric)``: a function from parsed JSON to the physical value, raising
    `Bad` when it does not fit.
    """

    ddl: Callable[[Schema, bool], str]
    sql_encode: Callable[[str, Schema, bool], str]
    py_encode: Callable[[Schema, str, bool], PyCodec]
    sql_decode: Callable[[str, Schema, str, bool, Checks], str]
    py_decode: Callable[[Schema, str, bool], PyCodec]


def _ddl(name: str) -> Callable[[Schema, bool], str]:
    return lambda s, numeric: name


def _as_is_sql(e: str, s: Schema, numeric: bool) -> str:
    return e


def _as_is_py(s: Schema, where: str, numeric: bool) -> PyCodec:
    return py.same


def _as_read(e: str, s: Schema, where: str, numeric: bool, checks: Checks) -> str:
    return e


def _in_range(low: str, high: str, message: str, convert: str) -> Callable[..., str]:
    """SQL decode of an integer that must lie in [low, high] before ``convert`` takes it."""

    def decode(e: str, s: Schema, where: str, numeric: bool, checks: Checks) -> str:
        bounds = f"{e} BETWEEN {low} AND {high}"
        checks.append((f"({e} IS NOT NULL AND NOT ({bounds}))", f"{where} {message}"))
        return f"CASE WHEN {bounds} THEN {convert}({e}) END"

    return decode


def _checked(
    convert: Callable[[str, Schema], str], message: Callable[[Schema], str], *, group: bool = True
) -> Any:
    """SQL decode by ``convert``, whose null result for a non-null input is a bad value."""

    def decode(e: str, s: Schema, where: str, numeric: bool, checks: Checks) -> str:
        out = convert(e, s)
        test = f"({out})" if group else out
        checks.append((f"({e} IS NOT NULL AND {test} IS NULL)", f"{where} {message(s)}"))
        return out

    return decode


def _decimal_sql_decode(e: str, s: Schema, where: str, numeric: bool, checks: Checks) -> str:
    if numeric:
        return e
    return _checked(
        lambda e, s: sql.base64_to_decimal(e, s.precision, s.scale),
        lambda s: f"is not a base64 decimal({s.precision},{s.scale})",
    )(e, s, where, numeric, checks)


def _int_codec(t: FieldType, ddl: str) -> Codec:
    low, high = INT_RANGES[t]
    what = t.value.lower()
    return Codec(
        _ddl(ddl),
        _as_is_sql,
        _as_is_py,
        _as_read,
        lambda s, where, numeric: py.int_reader(where, what, low, high),
    )


def _float_codec(ddl: str) -> Codec:
    return Codec(
        _ddl(ddl),
        _as_is_sql,
        lambda s, where, numeric: py.float_out,
        _as_read,
        lambda s, where, numeric: py.float_reader(where),
    )


CODECS: dict[FieldType | Logical, Codec] = {
    Logical.DATE: Codec(
        _ddl("int"),
        lambda e, s, numeric: f"unix_date({e})",
        _as_is_py,
        lambda e, s, where, numeric, checks: f"date_from_unix_date({e})",
        lambda s, where, numeric: py.int_reader(
            where, "a date (int32 days)", *INT_RANGES[FieldType.INT32]
        ),
    ),
    Logical.TIME: Codec(
        _ddl("int"),
        lambda e, s, numeric: f"CAST(time_to_millis({e}) AS INT)",  # whole ms, rounding down
        lambda s, where, numeric: py.millis_out,
        _in_range("0", str(MILLIS_PER_DAY - 1), "is not a time of day in ms", "time_from_millis"),
        lambda s, where, numeric: py.scaled(
            py.int_reader(where, "a time of day in ms", 0, MILLIS_PER_DAY - 1), 1000
        ),
    ),
    Logical.TIMESTAMP: Codec(
        _ddl("bigint"),
        lambda e, s, numeric: f"unix_millis({e})",
        lambda s, where, numeric: py.millis_out,
        _in_range(f"-{MAX_MILLIS}", str(MAX_MILLIS), "is out of range", "timestamp_millis"),
        lambda s, where, numeric: py.scaled(
            py.int_reader(where, "epoch milliseconds", -MAX_MILLIS, MAX_MILLIS), 1000
        ),
    ),
    Logical.DECIMAL: Codec(
        lambda s, numeric: f"decimal({s.precision},{s.scale})" if numeric else "string",
        lambda e, s, numeric: e if numeric else sql.decimal_to_base64(e),
        lambda s, where, numeric: py.decimal_out(s.scale, numeric),
        _decimal_sql_decode,
        lambda s, where, numeric: py.decimal_reader(where, s.precision, s.scale, numeric),
    ),
    FieldType.BYTES: Codec(
        _ddl("string"),
        lambda e, s, numeric: f"base64({e})",
        lambda s, where, numeric: py.base64_out,
        _checked(
            lambda e, s: f"try_to_binary({e}, 'base64')",
            lambda s: "is not valid base64",
            group=False,  # one function call
        ),
        lambda s, where, numeric: py.bytes_reader(where),
    ),
    FieldType.INT8: _int_codec(FieldType.INT8, "tinyint"),
    FieldType.INT16: _int_codec(FieldType.INT16, "smallint"),
    FieldType.INT32: _int_codec(FieldType.INT32, "int"),
    FieldType.INT64: _int_codec(FieldType.INT64, "bigint"),
    FieldType.FLOAT32: _float_codec("float"),
    FieldType.FLOAT64: _float_codec("double"),
    FieldType.BOOLEAN: Codec(
        _ddl("boolean"),
        _as_is_sql,
        _as_is_py,
        _as_read,
        lambda s, where, numeric: py.boolean_reader(where),
    ),
    FieldType.STRING: Codec(
        _ddl("string"),
        _as_is_sql,
        _as_is_py,
        _as_read,
        lambda s, where, numeric: py.string_reader,
    ),
}


def codec(s: Schema) -> Codec | None:
    """The row of a leaf schema (None for a struct, array or map)."""
    return CODECS.get(s.logical or s.type)


def string_keys(s: Schema) -> bool:
    """Whether map schema ``s`` has plain STRING keys (written as a JSON object)."""
    key = s.key_schema
    return key is not None and key.type is FieldType.STRING and key.logical is None


def sql_capable(schema: Schema) -> bool:
    """Whether the SQL form handles ``schema`` (every map in it has plain STRING keys)."""
    from sluice.converters._schemas import walk

    return all(
        s.type is not FieldType.MAP or s.key_schema is None or string_keys(s) for s in walk(schema)
    )


# -- the SQL form ---------------------------------------------------------------------------------
#: A leaf of the SQL walk: (expression, schema, where, checks) → expression.
SqlLeaf = Callable[[str, Schema, str, Checks], str]


def sql_walk(e: str, s: Schema, where: str, checks: Checks, leaf: SqlLeaf, depth: int = 0) -> str:
    """SQL turning ``e`` (typed by ``s``) into the other form, ``leaf`` converting each leaf;
    required-null checks (and the leaves' own) are appended to ``checks``. Used both ways: to the
    shape `to_json` writes, and from what `from_json` read."""
    if s.type is FieldType.STRUCT:
        parts, changed = [], False
        for f in s.fields:
            fe = f"{e}.{quote(f.name)}"
            if not f.schema.optional:
                checks.append(
                    (f"({e} IS NOT NULL AND {fe} IS NULL)", py.required(f"{where}.{f.name}"))
                )
            fx = sql_walk(fe, f.schema, f"{where}.{f.name}", checks, leaf, depth)
            changed = changed or fx != fe
            parts.append(f"{literal(f.name)}, {fx}")
        if not changed or not parts:
            return e
        return f"CASE WHEN {e} IS NULL THEN NULL ELSE named_struct({', '.join(parts)}) END"
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        var = f"x_{depth}"
        ix = _sql_item(var, s.value_schema, f"{where}[]", checks, leaf, depth, f"exists({e}, ")
        return e if ix == var else f"transform({e}, {var} -> {ix})"
    if s.type is FieldType.MAP and s.value_schema is not None:
        k, var = f"k_{depth}", f"v_{depth}"
        within = f"exists(map_values({e}), "
        vx = _sql_item(var, s.value_schema, f"{where}{{}}", checks, leaf, depth, within)
        return e if vx == var else f"transform_values({e}, ({k}, {var}) -> {vx})"
    return leaf(e, s, where, checks)


def _sql_item(
    var: str, item: Schema, where: str, checks: Checks, leaf: SqlLeaf, depth: int, within: str
) -> str:
    """An array item's or map value's SQL, its checks lifted to the container (``exists``)."""
    inner: Checks = []
    if not item.optional:
        inner.append((f"{var} IS NULL", py.required(where)))
    out = sql_walk(var, item, where, inner, leaf, depth + 1)
    checks.extend((f"{within}{var} -> {c})", m) for c, m in inner)
    return out


def sql_encode_leaf(numeric: bool) -> SqlLeaf:
    def leaf(e: str, s: Schema, where: str, checks: Checks) -> str:
        row = codec(s)
        return e if row is None else row.sql_encode(e, s, numeric)

    return leaf


def sql_decode_leaf(numeric: bool) -> SqlLeaf:
    def leaf(e: str, s: Schema, where: str, checks: Checks) -> str:
        row = codec(s)
        return e if row is None else row.sql_decode(e, s, where, numeric, checks)

    return leaf


def json_ddl(s: Schema, numeric: bool) -> str:
    """The Spark type `from_json` reads a value of ``s`` as (before the SQL decode)."""
    if s.type is FieldType.STRUCT:
        inner = ",".join(f"{quote(f.name)}:{json_ddl(f.schema, numeric)}" for f in s.fields)
        return f"struct<{inner}>"
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        return f"array<{json_ddl(s.value_schema, numeric)}>"
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        return f"map<string,{json_ddl(s.value_schema, numeric)}>"
    row = codec(s)
    assert row is not None, describe(s)
    return row.ddl(s, numeric)


# -- the Python form ------------------------------------------------------------------------------
def py_encoder(s: Schema, where: str, numeric: bool) -> PyCodec:
    """A function: physical Python value of ``s`` (not None) → what `json.dumps` writes."""
    return _py_walk(s, where, numeric, decoding=False)


def py_decoder(s: Schema, where: str, numeric: bool) -> PyCodec:
    """A function: parsed JSON (not None) → the physical Python value of ``s``; `Bad` when it
    does not fit."""
    return _py_walk(s, where, numeric, decoding=True)


def _py_walk(s: Schema, where: str, numeric: bool, *, decoding: bool) -> PyCodec:
    if s.type is FieldType.STRUCT:
        return _py_struct(s, where, numeric, decoding)
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        return _py_array(s.value_schema, where, numeric, decoding)
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        if decoding:
            return _py_map_decoder(s, where, numeric)
        return _py_map_encoder(s, where, numeric)
    row = codec(s)
    if row is None:
        if decoding:
            raise py.Bad(f"{where}: unsupported schema {describe(s)}")
        return py.same
    return (row.py_decode if decoding else row.py_encode)(s, where, numeric)


def _py_struct(s: Schema, where: str, numeric: bool, decoding: bool) -> PyCodec:
    fields = [
        (
            f.name,
            f.schema.optional,
            _py_walk(f.schema, f"{where}.{f.name}", numeric, decoding=decoding),
            f"{where}.{f.name}",
        )
        for f in s.fields
    ]

    def struct(v: Any) -> dict:
        if decoding and not isinstance(v, dict):
            raise py.Bad(f"{where}: expected an object, got {py.kind(v)}")
        out = {}
        for name, optional, convert, here in fields:
            x = v.get(name)
            if x is None:
                if not optional:
                    raise py.Bad(py.required(here))
                out[name] = None
            else:
                out[name] = convert(x)
        return out

    return struct


def _py_array(item: Schema, where: str, numeric: bool, decoding: bool) -> PyCodec:
    convert = _py_walk(item, f"{where}[]", numeric, decoding=decoding)
    item_optional = item.optional

    def encode(v: list) -> list:
        if not item_optional and any(x is None for x in v):
            raise py.Bad(py.required(f"{where}[]"))
        return [None if x is None else convert(x) for x in v]

    def decode(v: Any) -> list:
        # item by item: the first problem in the array is the one reported
        if not isinstance(v, list):
            raise py.Bad(f"{where}: expected an array, got {py.kind(v)}")
        out = []
        for x in v:
            if x is None:
                if not item_optional:
                    raise py.Bad(py.required(f"{where}[]"))
                out.append(None)
            else:
                out.append(convert(x))
        return out

    return decode if decoding else encode


def _map_parts(
    s: Schema, where: str, numeric: bool, decoding: bool
) -> tuple[PyCodec, PyCodec, bool, bool]:
    """A map's key and value codecs, whether its values may be null, whether it is an object."""
    assert s.key_schema is not None and s.value_schema is not None
    key = _py_walk(s.key_schema, f"{where}{{}}", numeric, decoding=decoding)
    val = _py_walk(s.value_schema, f"{where}{{}}", numeric, decoding=decoding)
    return key, val, s.value_schema.optional, string_keys(s)


def _py_map_encoder(s: Schema, where: str, numeric: bool) -> PyCodec:
    key, val, val_optional, as_object = _map_parts(s, where, numeric, decoding=False)

    def map_(v: list[tuple[Any, Any]]) -> Any:
        if not val_optional and any(x is None for _, x in v):
            raise py.Bad(py.required(f"{where}{{}}"))
        if as_object:
            return {k: None if x is None else val(x) for k, x in v}
        return [[key(k), None if x is None else val(x)] for k, x in v]

    return map_


def _py_map_decoder(s: Schema, where: str, numeric: bool) -> PyCodec:
    key, val, val_optional, as_object = _map_parts(s, where, numeric, decoding=True)

    def entry(k: Any, x: Any) -> tuple[Any, Any]:
        if k is None:
            raise py.Bad(f"{where}: a map key is null")
        if x is None:
            if not val_optional:
                raise py.Bad(py.required(f"{where}{{}}"))
            return key(k), None
        return key(k), val(x)

    def map_(v: Any) -> list[tuple[Any, Any]]:
        if as_object:
            if not isinstance(v, dict):
                raise py.Bad(f"{where}: expected an object, got {py.kind(v)}")
            return [entry(k, x) for k, x in v.items()]
        if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
            raise py.Bad(f"{where}: expected an array of [key, value] pairs")
        return [entry(k, x) for k, x in v]

    return map_
