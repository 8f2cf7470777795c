"""JsonConverter: Kafka Connect's JSON format, with or without the schema envelope.

Spark SQL form (`to_json` / `from_json`, vectorised in the JVM) for every schema whose maps have
STRING keys; a per-record Python form (the `json` module) for the rest and for fused pipelines.
Both produce the same bytes up to number spelling (`0.1` vs `0.10000000149011612` for a FLOAT32)
and read each other's output.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

import pyarrow as pa

from sluice.converters._base import (
    Converter,
    Decoded,
    Decoder,
    DecodeSql,
    Encoder,
    RecordError,
    string_errors,
)
from sluice.converters._schemas import canonical, describe, from_physical, to_physical, walk
from sluice.sdk import ConfigDef, ConfigKey, FieldType, Logical, Schema, literal, quote

#: Largest |epoch milliseconds| whose microseconds fit in a 64-bit timestamp.
MAX_MILLIS = 9_223_372_036_854_775
MILLIS_PER_DAY = 86_400_000
_TWO64 = "18446744073709551616"
_CORRUPT = "__sluice_corrupt"
_OPTIONS = "map('ignoreNullFields', 'false')"
_INT_RANGES = {
    FieldType.INT8: (-(2**7), 2**7 - 1),
    FieldType.INT16: (-(2**15), 2**15 - 1),
    FieldType.INT32: (-(2**31), 2**31 - 1),
    FieldType.INT64: (-(2**63), 2**63 - 1),
}
_SQL_TYPES = {
    FieldType.INT8: "tinyint",
    FieldType.INT16: "smallint",
    FieldType.INT32: "int",
    FieldType.INT64: "bigint",
    FieldType.FLOAT32: "float",
    FieldType.FLOAT64: "double",
    FieldType.BOOLEAN: "boolean",
    FieldType.STRING: "string",
    FieldType.BYTES: "string",
}
# Spellings of non-finite numbers Spark's JSON reader accepts; its writer uses the first three.
_NON_FINITE = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
    "+Infinity": math.inf,
    "+INF": math.inf,
    "-INF": -math.inf,
    "INF": math.inf,
}
# Marks a NUMERIC decimal's text inside `json.dumps` output so it can be unquoted afterwards. A
# lone surrogate cannot occur in real text (Arrow strings are valid UTF-8).
_RAW = "\ud800"
_RAW_RE = re.compile('"' + _RAW + '([^"]*)"')


class _Bad(ValueError):
    """A value that does not fit its schema (message: where and why)."""


class JsonConverter(Converter):
    """Kafka Connect's JSON format (`org.apache.kafka.connect.json.JsonConverter`).

    Options (under `key.converter.` / `value.converter.`):

    * `schemas.enable` (default true): write `{"schema": {…}, "payload": …}` with the schema in
      Kafka Connect's JSON form; false writes the payload alone.
    * `decimal.format`: `BASE64` (default, as Kafka: the unscaled two's-complement bytes) or
      `NUMERIC` (a JSON number). Read back in the same format.
    * `schemas.cache.size`: accepted for compatibility; sluice keeps no schema cache.

    Types as Kafka writes them: bytes as base64 text, Date as int32 days, Time as int32
    **milliseconds** of the day (the envelope's schema says `int32`, as Kafka's does), Timestamp
    as int64 epoch **milliseconds**. sluice keeps microseconds in both: the sub-millisecond part
    is lost, rounding down (23:59:59.999999 is written as 86399999), and values read back are
    whole milliseconds. Use AvroConverter to carry them exactly. Maps with non-STRING keys are
    written as an array of `[key, value]` pairs. NaN and ±Infinity are written as the strings
    `"NaN"`, `"Infinity"`, `"-Infinity"` (as Spark writes them). A null key/value is written as
    null (a tombstone); an envelope whose payload is null reads back as null.

    Sinks decode with the topic's registered schema (see `sluice.converters`); the per-record
    schema in an envelope is checked to be present, not compared. Where the SQL form reads
    differently from Kafka: a NUMERIC decimal with more fraction digits than its scale is rounded
    half-up instead of rejected, and a number or object where a STRING is expected is read as its
    JSON text (both as Spark's JSON reader does; the Python form does the same, for consistency).
    Runs as Spark SQL except for schemas holding maps with non-STRING keys, which run per record
    in Python.
    """

    config_def = ConfigDef(
        ConfigKey("schemas.enable", type="bool", default=True, doc="schema envelope"),
        ConfigKey(
            "decimal.format",
            default="BASE64",
            choices=("BASE64", "NUMERIC"),
            doc="how decimals are written",
        ),
        ConfigKey("schemas.cache.size", type="int", default=1000, min=0, doc="ignored"),
    )
    uses_registry = True

    def prepare_options(self, options: dict[str, str]) -> dict[str, str]:
        if "decimal.format" in options:
            options["decimal.format"] = options["decimal.format"].strip().upper()
        return options

    @property
    def envelope(self) -> bool:
        return bool(self.options.get("schemas.enable", True))

    @property
    def numeric(self) -> bool:
        return self.options.get("decimal.format", "BASE64") == "NUMERIC"

    def needs_schema(self) -> bool:
        return self.envelope

    def encoder(self, schema: Schema) -> Encoder:
        return _JsonEncoder(self.name, self.role, schema, self.envelope, self.numeric)

    def decoder(self, schema: Schema | None) -> Decoder:
        if schema is None:
            if self.envelope:
                raise ValueError("JsonConverter with schemas.enable=true needs a schema")
            return _JsonTextDecoder(self.name, self.role, Schema.string())
        return _JsonDecoder(self.name, self.role, schema, self.envelope, self.numeric)


def _sql_capable(schema: Schema) -> bool:
    return not any(
        s.type is FieldType.MAP
        and s.key_schema is not None
        and (s.key_schema.type is not FieldType.STRING or s.key_schema.logical is not None)
        for s in walk(schema)
    )


def _string_keys(schema: Schema) -> bool:
    key = schema.key_schema
    return key is not None and key.type is FieldType.STRING and key.logical is None


def _here(where: str, name: str) -> str:
    return f"{where}.{name}"


class _PerProcessPython:
    """Keeps the per-record Python function (`_py`, built on first use) out of pickles: it holds
    closures, and each Spark process builds its own."""

    _py: Callable[[Any], Any] | None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_py"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._py = None


# -- encoding --------------------------------------------------------------------------------------
class _JsonEncoder(_PerProcessPython, Encoder):
    """JSON text of values of one schema (SQL `to_json`, or per record with `json.dumps`)."""

    arrow_mode = "per-record"

    def __init__(
        self, converter: str, role: str, schema: Schema, envelope: bool, numeric: bool
    ) -> None:
        super().__init__(converter, role, schema)
        self.envelope = envelope
        self.numeric = numeric
        self.has_sql = _sql_capable(schema)
        # Kafka's form (Time as int32): the payload carries Kafka's milliseconds.
        self.schema_text = canonical(schema, kafka=True)
        self._py: Callable[[Any], Any] | None = None

    # SQL ------------------------------------------------------------------------------------------
    def _payload_sql(self, column: str) -> tuple[str, list[tuple[str, str]]]:
        checks: list[tuple[str, str]] = []
        expr = _to_json_ready(column, self.schema, self.role, checks, self.numeric, 0)
        return expr, checks

    def sql(self, column: str) -> str | None:
        if not self.has_sql:
            return None
        payload, _ = self._payload_sql(column)
        wrapped = f"to_json(named_struct('payload', {payload}), {_OPTIONS})"
        if self.envelope:
            # `{"payload":…}` minus its `{`, behind the (constant) schema: one to_json per record.
            head = literal('{"schema":' + self.schema_text + ",")
            text = f"concat({head}, substr({wrapped}, 2))"
        elif self.schema.type in (FieldType.STRUCT, FieldType.ARRAY, FieldType.MAP):
            text = f"to_json({payload}, {_OPTIONS})"
        else:
            # to_json only writes objects and arrays: take the payload out of `{"payload":…}`.
            text = f"substr({wrapped}, 12, length({wrapped}) - 12)"
        return f"CASE WHEN {column} IS NULL THEN NULL ELSE CAST({text} AS BINARY) END"

    def sql_error(self, column: str) -> str | None:
        if not self.has_sql:
            return None
        _, checks = self._payload_sql(column)
        return _case(checks)

    # Arrow ----------------------------------------------------------------------------------------
    def arrow(self, array: pa.Array) -> pa.Array:
        if self._py is None:
            self._py = _py_encoder(self.schema, self.role, self.numeric)
        encode = self._py
        head = ('{"schema":' + self.schema_text + ',"payload":') if self.envelope else ""
        tail = "}" if self.envelope else ""
        out: list[bytes | None] = []
        for i, value in enumerate(to_physical(array, self.schema).to_pylist()):
            if value is None:
                out.append(None)
                continue
            try:
                payload = encode(value)
            except _Bad as exc:
                raise RecordError(i, str(exc)) from None
            text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
            if self.numeric:
                text = _RAW_RE.sub(r"\1", text)
            out.append((head + text + tail).encode("utf-8"))
        return pa.array(out, pa.binary())


def _case(checks: list[tuple[str, str]]) -> str | None:
    if not checks:
        return None
    branches = " ".join(f"WHEN {cond} THEN {literal(msg)}" for cond, msg in checks)
    return f"CASE {branches} END"


def _required(where: str) -> str:
    return f"{where} is null, but its schema is not optional"


def _to_json_ready(
    e: str, s: Schema, where: str, checks: list[tuple[str, str]], numeric: bool, depth: int
) -> str:
    """SQL of `e` (typed by `s`) in the shape `to_json` must write; required-null checks are
    appended to `checks` as (condition, message)."""
    if s.logical is Logical.DATE:
        return f"unix_date({e})"
    if s.logical is Logical.TIME:
        return f"CAST(time_to_millis({e}) AS INT)"  # whole ms, rounding down
    if s.logical is Logical.TIMESTAMP:
        return f"unix_millis({e})"
    if s.logical is Logical.DECIMAL:
        return e if numeric else _decimal_to_base64(e)
    if s.logical is None and s.type is FieldType.BYTES:
        return f"base64({e})"
    if s.type is FieldType.STRUCT:
        parts, changed = [], False
        for f in s.fields:
            fe = f"{e}.{quote(f.name)}"
            if not f.schema.optional:
                checks.append(
                    (f"({e} IS NOT NULL AND {fe} IS NULL)", _required(f"{where}.{f.name}"))
                )
            fx = _to_json_ready(fe, f.schema, _here(where, f.name), checks, numeric, depth)
            changed = changed or fx != fe
            parts.append(f"{literal(f.name)}, {fx}")
        if not changed or not parts:
            return e
        return f"CASE WHEN {e} IS NULL THEN NULL ELSE named_struct({', '.join(parts)}) END"
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        var = f"x_{depth}"
        inner: list[tuple[str, str]] = []
        item = s.value_schema
        if not item.optional:
            inner.append((f"{var} IS NULL", _required(f"{where}[]")))
        ix = _to_json_ready(var, item, f"{where}[]", inner, numeric, depth + 1)
        checks.extend((f"exists({e}, {var} -> {c})", m) for c, m in inner)
        return e if ix == var else f"transform({e}, {var} -> {ix})"
    if s.type is FieldType.MAP and s.value_schema is not None:
        k, var = f"k_{depth}", f"v_{depth}"
        inner = []
        item = s.value_schema
        if not item.optional:
            inner.append((f"{var} IS NULL", _required(f"{where}{{}}")))
        vx = _to_json_ready(var, item, f"{where}{{}}", inner, numeric, depth + 1)
        checks.extend((f"exists(map_values({e}), {var} -> {c})", m) for c, m in inner)
        return e if vx == var else f"transform_values({e}, ({k}, {var}) -> {vx})"
    return e


def _let(value: str, name: str, body: str) -> str:
    """SQL evaluating `value` once and `body` with it bound to `name` (Spark SQL has no `LET`; a
    one-element `transform` is one): large expressions would otherwise repeat it many times."""
    return f"transform(array({value}), {name} -> {body})[0]"


def _hex64(e: str) -> str:
    return f"lpad(conv(CAST({e} AS STRING), 10, 16), 16, '0')"


def _hex128(u: str) -> str:
    """32 hex digits of a non-negative DECIMAL(38,0) below 2^128."""
    # `div` on decimals divides at 6 decimal places and may round the quotient up to the next
    # integer. Start one below it (never above the true quotient, so the products below cannot
    # overflow DECIMAL(38,0)) and carry the remainder's excess back.
    carry = f"(CASE WHEN dec_r >= {_TWO64} THEN 1 ELSE 0 END)"
    digits = f"concat({_hex64(f'(dec_q + {carry})')}, {_hex64(f'(dec_r - {carry} * {_TWO64})')})"
    rest = _let(f"dec_m - dec_q * {_TWO64}", "dec_r", digits)
    return _let(u, "dec_m", _let(f"(dec_m div {_TWO64}) - 1", "dec_q", rest))


def _decimal_to_base64(e: str) -> str:
    """Base64 of the minimal big-endian two's complement of the unscaled value (Java's
    `BigInteger.toByteArray`), in SQL: Spark has no function for it."""
    # Spark prints decimals in plain notation with exactly `scale` digits after the point. Work
    # on the magnitude only: Spark 4.3 miscomputes some negations of DECIMAL(38,0) (`-u - 1`).
    # The sign comes from the text too: `e >= 0` would widen e to a smaller scale (1E-38 >= 0).
    positive = "regexp_replace({hex}, '^(00)+(?=[0-7])', '')".format(hex=_hex128("dec_u"))
    # -m in two's complement is the bitwise complement of m - 1.
    complement = "translate({hex}, '0123456789ABCDEF', 'FEDCBA9876543210')".format(
        hex=_hex128("(dec_u - 1)")
    )
    negative = f"regexp_replace({complement}, '^(FF)+(?=[89A-F])', '')"
    body = (
        f"CASE WHEN dec_t NOT LIKE '-%' THEN base64(unhex({positive})) "
        f"ELSE base64(unhex({negative})) END"
    )
    magnitude = "CAST(translate(dec_t, '.-', '') AS DECIMAL(38,0))"
    return (
        f"CASE WHEN {e} IS NULL THEN NULL ELSE "
        f"{_let(f'CAST({e} AS STRING)', 'dec_t', _let(magnitude, 'dec_u', body))} END"
    )


def _py_encoder(schema: Schema, where: str, numeric: bool) -> Callable[[Any], Any]:
    """A function: physical Python value of `schema` (not None) → what `json.dumps` writes."""
    s = schema
    if s.logical in (Logical.TIME, Logical.TIMESTAMP):
        return lambda v: v // 1000  # microseconds → Kafka's milliseconds, rounding down
    if s.logical is Logical.DECIMAL:
        if numeric:
            return lambda v: _RAW + format(v, "f")
        scale = s.scale
        return lambda v: base64.b64encode(_unscaled_bytes(v, scale)).decode("ascii")
    if s.logical is not None:
        return _same
    if s.type in (FieldType.FLOAT32, FieldType.FLOAT64):
        return _float_out
    if s.type is FieldType.BYTES:
        return lambda v: base64.b64encode(v).decode("ascii")
    if s.type is FieldType.STRUCT:
        fields = [
            (
                f.name,
                f.schema.optional,
                _py_encoder(f.schema, _here(where, f.name), numeric),
                _here(where, f.name),
            )
            for f in s.fields
        ]

        def struct(v: dict) -> dict:
            out = {}
            for name, optional, enc, here in fields:
                x = v.get(name)
                if x is None:
                    if not optional:
                        raise _Bad(_required(here))
                    out[name] = None
                else:
                    out[name] = enc(x)
            return out

        return struct
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        item = _py_encoder(s.value_schema, f"{where}[]", numeric)
        item_optional = s.value_schema.optional

        def array(v: list) -> list:
            if not item_optional and any(x is None for x in v):
                raise _Bad(_required(f"{where}[]"))
            return [None if x is None else item(x) for x in v]

        return array
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        key = _py_encoder(s.key_schema, f"{where}{{}}", numeric)
        val = _py_encoder(s.value_schema, f"{where}{{}}", numeric)
        val_optional = s.value_schema.optional
        as_object = _string_keys(s)

        def map_(v: list[tuple[Any, Any]]) -> Any:
            if not val_optional and any(x is None for _, x in v):
                raise _Bad(_required(f"{where}{{}}"))
            if as_object:
                return {k: None if x is None else val(x) for k, x in v}
            return [[key(k), None if x is None else val(x)] for k, x in v]

        return map_
    return _same


def _same(v: Any) -> Any:
    return v


def _float_out(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _unscaled_bytes(value: Decimal, scale: int) -> bytes:
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (int(exponent) + scale)
    if sign:
        unscaled = -unscaled
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return unscaled.to_bytes(length, "big", signed=True)


# -- decoding --------------------------------------------------------------------------------------
class _JsonDecoder(_PerProcessPython, Decoder):
    """Decodes JSON (with or without envelope) into values of a known schema."""

    arrow_mode = "per-record"

    def __init__(
        self, converter: str, role: str, schema: Schema, envelope: bool, numeric: bool
    ) -> None:
        super().__init__(converter, role, schema)
        self.envelope = envelope
        self.numeric = numeric
        self.has_sql = _sql_capable(schema)
        self._py: Callable[[Any], Any] | None = None

    # SQL ------------------------------------------------------------------------------------------
    def sql(self, column: str, tmp: str) -> DecodeSql | None:
        if not self.has_sql:
            return None
        body = _json_ddl(self.schema, self.numeric)
        corrupt = f"`{_CORRUPT}` string"
        options = f"map('columnNameOfCorruptRecord', '{_CORRUPT}')"
        text = f"CAST({column} AS STRING)"
        if self.envelope:
            ddl = literal(f"schema struct<>, payload {body}, {corrupt}")
            parse = f"from_json({text}, {ddl}, {options})"
            payload = f"{tmp}.payload"
        else:
            # The bare value may be a number or a string: parse it as the field of an object.
            wrapped = f"concat('{{\"p\":', {text}, '}}')"
            parse = f"from_json({wrapped}, {literal(f'p {body}, {corrupt}')}, {options})"
            payload = f"{tmp}.p"
        checks: list[tuple[str, str]] = []
        if not self.schema.optional:
            checks.append((f"{payload} IS NULL", _required(self.role)))
        value = _from_json_ready(payload, self.schema, self.role, checks, self.numeric, 0)
        invalid = (
            f"concat({literal(f'{self.role} is not valid JSON for {describe(self.schema)}: ')},"
            f" left({text}, 200))"
        )
        branches = [(f"({tmp} IS NULL OR {tmp}.`{_CORRUPT}` IS NOT NULL)", None)]
        if self.envelope:
            missing = f'{self.role} has no "schema" and "payload" fields (schemas.enable=true)'
            branches.append((f"{tmp}.`schema` IS NULL", missing))
        cases = [f"WHEN {column} IS NULL THEN NULL"]
        cases.append(f"WHEN {branches[0][0]} THEN {invalid}")
        cases.extend(f"WHEN {c} THEN {literal(m)}" for c, m in branches[1:] if m)
        cases.extend(f"WHEN {c} THEN {literal(m)}" for c, m in checks)
        return DecodeSql(value=value, error=f"CASE {' '.join(cases)} END", parse=parse)

    # Arrow ----------------------------------------------------------------------------------------
    def arrow(self, array: pa.Array) -> Decoded:
        if self._py is None:
            self._py = _py_decoder(self.schema, self.role, self.numeric)
        decode = self._py
        values: list[Any] = []
        reasons: list[str | None] = []
        for raw in _binary_values(array):
            if raw is None:
                values.append(None)
                reasons.append(None)
                continue
            try:
                payload = self._payload(raw)
                if payload is None:
                    if not self.schema.optional:
                        raise _Bad(_required(self.role))
                    values.append(None)
                else:
                    values.append(decode(payload))
                reasons.append(None)
            except _Bad as exc:
                values.append(None)
                reasons.append(str(exc))
        return Decoded(from_physical(values, self.schema), string_errors(reasons))

    def _payload(self, raw: bytes) -> Any:
        doc = _parse(raw, self.role, trailing=self.envelope)
        if not self.envelope:
            return doc
        if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict):
            raise _Bad(f'{self.role} has no "schema" and "payload" fields (schemas.enable=true)')
        return doc.get("payload")


class _JsonTextDecoder(Decoder):
    """Schemaless JSON with no registered schema: the JSON text itself (checked to be JSON)."""

    has_sql = True
    arrow_mode = "per-record"

    def sql(self, column: str, tmp: str) -> DecodeSql:
        text = f"CAST({column} AS STRING)"
        wrapped = f"concat('{{\"p\":', {text}, '}}')"
        options = f"map('columnNameOfCorruptRecord', '{_CORRUPT}')"
        parse = f"from_json({wrapped}, 'p string, `{_CORRUPT}` string', {options})"
        message = literal(f"{self.role} is not valid JSON: ")
        error = (
            f"CASE WHEN {column} IS NULL THEN NULL WHEN {tmp} IS NULL OR "
            f"{tmp}.`{_CORRUPT}` IS NOT NULL THEN concat({message}, left({text}, 200)) END"
        )
        return DecodeSql(value=text, error=error, parse=parse)

    def arrow(self, array: pa.Array) -> Decoded:
        values: list[str | None] = []
        reasons: list[str | None] = []
        for raw in _binary_values(array):
            if raw is None:
                values.append(None)
                reasons.append(None)
                continue
            try:
                _parse(raw, self.role)
                values.append(raw.decode("utf-8"))
                reasons.append(None)
            except _Bad as exc:
                values.append(None)
                reasons.append(str(exc))
        return Decoded(pa.array(values, pa.string()), string_errors(reasons))


def _binary_values(array: pa.Array) -> list[bytes | None]:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_binary(array.type):
        array = array.cast(pa.binary())
    return array.to_pylist()


_READER = json.JSONDecoder(parse_float=Decimal)


def _parse(raw: bytes, role: str, *, trailing: bool = False) -> Any:
    """Parse JSON bytes; `trailing` ignores text after the first value (as Spark's and Kafka's
    readers do for an envelope)."""
    try:
        # Decode first: given bytes, json.loads would also guess UTF-16 and UTF-32.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"{role} is not valid UTF-8: {exc}") from None
    try:
        if trailing:
            return _READER.raw_decode(text.lstrip(" \t\n\r"))[0]
        return _READER.decode(text)
    except ValueError as exc:
        raise _Bad(f"{role} is not valid JSON: {exc}") from None


def _json_ddl(s: Schema, numeric: bool) -> str:
    """The Spark type `from_json` reads a value of `s` as (before logical conversions)."""
    if s.logical in (Logical.DATE, Logical.TIME):
        return "int"
    if s.logical is Logical.TIMESTAMP:
        return "bigint"
    if s.logical is Logical.DECIMAL:
        return f"decimal({s.precision},{s.scale})" if numeric else "string"
    if s.type is FieldType.STRUCT:
        inner = ",".join(
            f"`{f.name.replace('`', '``')}`:{_json_ddl(f.schema, numeric)}" for f in s.fields
        )
        return f"struct<{inner}>"
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        return f"array<{_json_ddl(s.value_schema, numeric)}>"
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        return f"map<string,{_json_ddl(s.value_schema, numeric)}>"
    return _SQL_TYPES[s.type]


def _from_json_ready(
    e: str, s: Schema, where: str, checks: list[tuple[str, str]], numeric: bool, depth: int
) -> str:
    """SQL turning `e` (as `from_json` read it) into a value of `s`; problems → `checks`."""
    if s.logical is Logical.DATE:
        return f"date_from_unix_date({e})"
    if s.logical is Logical.TIME:
        bounds = f"{e} BETWEEN 0 AND {MILLIS_PER_DAY - 1}"
        checks.append(
            (f"({e} IS NOT NULL AND NOT ({bounds}))", f"{where} is not a time of day in ms")
        )
        return f"CASE WHEN {bounds} THEN time_from_millis({e}) END"
    if s.logical is Logical.TIMESTAMP:
        bounds = f"{e} BETWEEN -{MAX_MILLIS} AND {MAX_MILLIS}"
        checks.append((f"({e} IS NOT NULL AND NOT ({bounds}))", f"{where} is out of range"))
        return f"CASE WHEN {bounds} THEN timestamp_millis({e}) END"
    if s.logical is Logical.DECIMAL:
        if numeric:
            return e
        out = _base64_to_decimal(e, s.precision, s.scale)
        message = f"{where} is not a base64 decimal({s.precision},{s.scale})"
        checks.append((f"({e} IS NOT NULL AND ({out}) IS NULL)", message))
        return out
    if s.logical is None and s.type is FieldType.BYTES:
        out = f"try_to_binary({e}, 'base64')"
        checks.append((f"({e} IS NOT NULL AND {out} IS NULL)", f"{where} is not valid base64"))
        return out
    if s.type is FieldType.STRUCT:
        parts, changed = [], False
        for f in s.fields:
            fe = f"{e}.{quote(f.name)}"
            if not f.schema.optional:
                checks.append(
                    (f"({e} IS NOT NULL AND {fe} IS NULL)", _required(f"{where}.{f.name}"))
                )
            fx = _from_json_ready(fe, f.schema, _here(where, f.name), checks, numeric, depth)
            changed = changed or fx != fe
            parts.append(f"{literal(f.name)}, {fx}")
        if not changed or not parts:
            return e
        return f"CASE WHEN {e} IS NULL THEN NULL ELSE named_struct({', '.join(parts)}) END"
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        var = f"x_{depth}"
        inner: list[tuple[str, str]] = []
        if not s.value_schema.optional:
            inner.append((f"{var} IS NULL", _required(f"{where}[]")))
        ix = _from_json_ready(var, s.value_schema, f"{where}[]", inner, numeric, depth + 1)
        checks.extend((f"exists({e}, {var} -> {c})", m) for c, m in inner)
        return e if ix == var else f"transform({e}, {var} -> {ix})"
    if s.type is FieldType.MAP and s.value_schema is not None:
        k, var = f"k_{depth}", f"v_{depth}"
        inner = []
        if not s.value_schema.optional:
            inner.append((f"{var} IS NULL", _required(f"{where}{{}}")))
        vx = _from_json_ready(var, s.value_schema, f"{where}{{}}", inner, numeric, depth + 1)
        checks.extend((f"exists(map_values({e}), {var} -> {c})", m) for c, m in inner)
        return e if vx == var else f"transform_values({e}, ({k}, {var}) -> {vx})"
    return e


def _base64_to_decimal(e: str, precision: int, scale: int) -> str:
    """SQL: base64 of a big-endian two's-complement unscaled value (≤ 16 bytes) → DECIMAL(p,s),
    null when it is not base64, too long, or out of range."""
    # Sign-extended to 32 hex digits; a negative value's complemented digits are |value| - 1
    # (no negation: see `_decimal_to_base64`).
    padded = "lpad(dec_h, 32, CASE WHEN dec_n THEN 'F' ELSE '0' END)"
    flipped = f"translate({padded}, '0123456789ABCDEF', 'FEDCBA9876543210')"
    digits = f"CASE WHEN dec_n THEN {flipped} ELSE {padded} END"
    hi = "CAST(conv(substr(dec_d, 1, 16), 16, 10) AS DECIMAL(38,0))"
    lo = "CAST(conv(substr(dec_d, 17, 16), 16, 10) AS DECIMAL(38,0))"
    value = f"try_add(try_multiply({hi}, {_TWO64}), {lo})"
    magnitude = f"CAST(CASE WHEN dec_n THEN try_add({value}, 1) ELSE {value} END AS STRING)"
    text = "dec_a"
    if scale:
        # lpad also cuts longer text: pad only up to the length the point needs.
        text = _let(
            f"lpad(dec_a, greatest(length(dec_a), {scale + 1}), '0')",
            "dec_p",
            f"concat(substr(dec_p, 1, length(dec_p) - {scale}), '.', "
            f"substr(dec_p, length(dec_p) - {scale} + 1))",
        )
    signed = f"concat(CASE WHEN dec_n THEN '-' ELSE '' END, {text})"
    number = _let(magnitude, "dec_a", f"try_cast({signed} AS DECIMAL({precision},{scale}))")
    unpacked = _let(
        "hex(dec_b)",
        "dec_h",
        _let("substr(dec_h, 1, 1) >= '8'", "dec_n", _let(digits, "dec_d", number)),
    )
    checked = f"CASE WHEN length(dec_b) BETWEEN 1 AND 16 THEN {unpacked} END"
    return _let(f"try_to_binary({e}, 'base64')", "dec_b", checked)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | Decimal | float):
        return f"the number {v}"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _py_decoder(schema: Schema, where: str, numeric: bool) -> Callable[[Any], Any]:
    """A function: parsed JSON (not None) → the physical Python value of `schema`; `_Bad` when
    it does not fit."""
    s = schema
    if s.logical is Logical.DATE:
        return _int_reader(where, "a date (int32 days)", *_INT_RANGES[FieldType.INT32])
    if s.logical is Logical.TIME:
        time_millis = _int_reader(where, "a time of day in ms", 0, MILLIS_PER_DAY - 1)
        return lambda v: time_millis(v) * 1000
    if s.logical is Logical.TIMESTAMP:
        millis = _int_reader(where, "epoch milliseconds", -MAX_MILLIS, MAX_MILLIS)
        return lambda v: millis(v) * 1000
    if s.logical is Logical.DECIMAL:
        return _decimal_reader(where, s.precision, s.scale, numeric)
    if s.type in _INT_RANGES:
        return _int_reader(where, s.type.value.lower(), *_INT_RANGES[s.type])
    if s.type in (FieldType.FLOAT32, FieldType.FLOAT64):
        return _float_reader(where)
    if s.type is FieldType.BOOLEAN:

        def boolean(v: Any) -> bool:
            if type(v) is not bool:
                raise _Bad(f"{where}: expected a boolean, got {_kind(v)}")
            return v

        return boolean
    if s.type is FieldType.STRING:
        return _string_reader
    if s.type is FieldType.BYTES:

        def binary(v: Any) -> bytes:
            if not isinstance(v, str):
                raise _Bad(f"{where}: expected base64 text, got {_kind(v)}")
            return _b64decode(v, where)

        return binary
    if s.type is FieldType.STRUCT:
        fields = [
            (
                f.name,
                f.schema.optional,
                _py_decoder(f.schema, _here(where, f.name), numeric),
                _here(where, f.name),
            )
            for f in s.fields
        ]

        def struct(v: Any) -> dict:
            if not isinstance(v, dict):
                raise _Bad(f"{where}: expected an object, got {_kind(v)}")
            out = {}
            for name, optional, dec, here in fields:
                x = v.get(name)
                if x is None:
                    if not optional:
                        raise _Bad(_required(here))
                    out[name] = None
                else:
                    out[name] = dec(x)
            return out

        return struct
    if s.type is FieldType.ARRAY and s.value_schema is not None:
        item = _py_decoder(s.value_schema, f"{where}[]", numeric)
        item_optional = s.value_schema.optional

        def array(v: Any) -> list:
            if not isinstance(v, list):
                raise _Bad(f"{where}: expected an array, got {_kind(v)}")
            out = []
            for x in v:
                if x is None:
                    if not item_optional:
                        raise _Bad(_required(f"{where}[]"))
                    out.append(None)
                else:
                    out.append(item(x))
            return out

        return array
    if s.type is FieldType.MAP and s.key_schema is not None and s.value_schema is not None:
        key = _py_decoder(s.key_schema, f"{where}{{}}", numeric)
        val = _py_decoder(s.value_schema, f"{where}{{}}", numeric)
        val_optional = s.value_schema.optional
        as_object = _string_keys(s)

        def entry(k: Any, x: Any) -> tuple[Any, Any]:
            if k is None:
                raise _Bad(f"{where}: a map key is null")
            if x is None:
                if not val_optional:
                    raise _Bad(_required(f"{where}{{}}"))
                return key(k), None
            return key(k), val(x)

        def map_(v: Any) -> list[tuple[Any, Any]]:
            if as_object:
                if not isinstance(v, dict):
                    raise _Bad(f"{where}: expected an object, got {_kind(v)}")
                return [entry(k, x) for k, x in v.items()]
            if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
                raise _Bad(f"{where}: expected an array of [key, value] pairs")
            return [entry(k, x) for k, x in v]

        return map_
    raise _Bad(f"{where}: unsupported schema {describe(s)}")


def _int_reader(where: str, what: str, low: int, high: int) -> Callable[[Any], int]:
    def read(v: Any) -> int:
        if type(v) is not int:
            raise _Bad(f"{where}: expected {what}, got {_kind(v)}")
        if not low <= v <= high:
            raise _Bad(f"{where}: {v} is out of range for {what}")
        return v

    return read


def _float_reader(where: str) -> Callable[[Any], float]:
    def read(v: Any) -> float:
        if isinstance(v, str) and v in _NON_FINITE:
            return _NON_FINITE[v]
        if type(v) is bool or not isinstance(v, int | float | Decimal):
            raise _Bad(f"{where}: expected a number, got {_kind(v)}")
        return float(v)

    return read


def _string_reader(v: Any) -> str:
    if isinstance(v, str):
        return v
    # Spark's JSON reader gives a non-string value's JSON text for a STRING field: so do we.
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str)


def _b64decode(text: str, where: str) -> bytes:
    try:
        # Spark accepts base64 without its padding: so do we.
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(f"{where} is not valid base64") from None


def _decimal_reader(
    where: str, precision: int, scale: int, numeric: bool
) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def fits(d: Decimal) -> Decimal:
        if len(d.as_tuple().digits) > precision and d != 0:
            raise _Bad(f"{where}: {d} does not fit decimal({precision},{scale})")
        return d

    def from_number(v: Any) -> Decimal:
        if type(v) is bool or not isinstance(v, int | Decimal | str | float):
            raise _Bad(f"{where}: expected a decimal number, got {_kind(v)}")
        try:
            with localcontext() as ctx:
                ctx.prec = 80
                d = Decimal(v) if not isinstance(v, float) else Decimal(repr(v))
                if not d.is_finite():
                    raise InvalidOperation
                return fits(d.quantize(quantum, rounding=ROUND_HALF_UP))
        except InvalidOperation:
            raise _Bad(f"{where}: {v!r} is not a decimal number") from None

    def from_base64(v: Any) -> Decimal:
        if not isinstance(v, str):
            raise _Bad(f"{where}: expected base64 decimal bytes, got {_kind(v)}")
        raw = _b64decode(v, where)
        if not 1 <= len(raw) <= 16:
            raise _Bad(f"{where}: {len(raw)} bytes do not fit decimal({precision},{scale})")
        unscaled = int.from_bytes(raw, "big", signed=True)
        return fits(decimal_of(unscaled, scale))

    return from_number if numeric else from_base64


def decimal_of(unscaled: int, scale: int) -> Decimal:
    """The exact Decimal `unscaled * 10**-scale` (no context rounding)."""
    return Decimal((1 if unscaled < 0 else 0, tuple(int(c) for c in str(abs(unscaled))), -scale))
