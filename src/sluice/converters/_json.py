"""JsonConverter: Kafka Connect's JSON format, with or without the schema envelope.

Spark SQL form (`to_json` / `from_json`, vectorised in the JVM) for every schema whose maps have
STRING keys; a per-record Python form (the `json` module) for the rest and for fused pipelines.
Both produce the same bytes up to number spelling (`0.1` vs `0.10000000149011612` for a FLOAT32)
and read each other's output. What each Connect type becomes in each form is one row of the table
in `sluice.converters._json_table`; the leaf pieces are in `_json_sql` and `_json_python`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice.converters import _json_table as table
from sluice.converters._base import (
    Converter,
    Decoded,
    Decoder,
    DecodeSql,
    Encoder,
    RecordError,
    string_errors,
)
from sluice.converters._json_python import RAW_RE, Bad, decimal_of, parse, required
from sluice.converters._json_python import unscaled_bytes as _unscaled_bytes
from sluice.converters._json_table import MAX_MILLIS
from sluice.converters._schemas import canonical, describe, from_physical, to_physical
from sluice.sdk import ConfigDef, ConfigKey, FieldType, Schema, literal

# `decimal_of`, `_unscaled_bytes` and `MAX_MILLIS` are imported from here by the Avro converter
# and the tests.
__all__ = ["MAX_MILLIS", "JsonConverter", "_unscaled_bytes", "decimal_of"]

_CORRUPT = "__sluice_corrupt"
_OPTIONS = "map('ignoreNullFields', 'false')"


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


class _PerProcessPython:
    """Keeps the per-record Python function (`_py`, built on first use) out of pickles: it holds
    closures, and each Spark process builds its own."""

    _py: Callable[[Any], Any] | None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_py"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._py = None

    def _options(self, schema: Schema, envelope: bool, numeric: bool) -> None:
        self.envelope = envelope
        self.numeric = numeric
        self.has_sql = table.sql_capable(schema)
        self._py = None


# -- encoding --------------------------------------------------------------------------------------
class _JsonEncoder(_PerProcessPython, Encoder):
    """JSON text of values of one schema (SQL `to_json`, or per record with `json.dumps`)."""

    arrow_mode = "per-record"

    def __init__(
        self, converter: str, role: str, schema: Schema, envelope: bool, numeric: bool
    ) -> None:
        super().__init__(converter, role, schema)
        self._options(schema, envelope, numeric)
        # Kafka's form (Time as int32): the payload carries Kafka's milliseconds.
        self.schema_text = canonical(schema, kafka=True)

    # SQL ------------------------------------------------------------------------------------------
    def _payload_sql(self, column: str) -> tuple[str, list[tuple[str, str]]]:
        checks: table.Checks = []
        leaf = table.sql_encode_leaf(self.numeric)
        expr = table.sql_walk(column, self.schema, self.role, checks, leaf)
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
            self._py = table.py_encoder(self.schema, self.role, self.numeric)
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
            except Bad as exc:
                raise RecordError(i, str(exc)) from None
            text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
            if self.numeric:
                text = RAW_RE.sub(r"\1", text)
            out.append((head + text + tail).encode("utf-8"))
        return pa.array(out, pa.binary())


def _case(checks: list[tuple[str, str]]) -> str | None:
    if not checks:
        return None
    branches = " ".join(f"WHEN {cond} THEN {literal(msg)}" for cond, msg in checks)
    return f"CASE {branches} END"


# -- decoding --------------------------------------------------------------------------------------
class _JsonDecoder(_PerProcessPython, Decoder):
    """Decodes JSON (with or without envelope) into values of a known schema."""

    arrow_mode = "per-record"

    def __init__(
        self, converter: str, role: str, schema: Schema, envelope: bool, numeric: bool
    ) -> None:
        super().__init__(converter, role, schema)
        self._options(schema, envelope, numeric)

    # SQL ------------------------------------------------------------------------------------------
    def sql(self, column: str, tmp: str) -> DecodeSql | None:
        if not self.has_sql:
            return None
        body = table.json_ddl(self.schema, self.numeric)
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
        checks: table.Checks = []
        if not self.schema.optional:
            checks.append((f"{payload} IS NULL", required(self.role)))
        leaf = table.sql_decode_leaf(self.numeric)
        value = table.sql_walk(payload, self.schema, self.role, checks, leaf)
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
            self._py = table.py_decoder(self.schema, self.role, self.numeric)
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
                        raise Bad(required(self.role))
                    values.append(None)
                else:
                    values.append(decode(payload))
                reasons.append(None)
            except Bad as exc:
                values.append(None)
                reasons.append(str(exc))
        return Decoded(from_physical(values, self.schema), string_errors(reasons))

    def _payload(self, raw: bytes) -> Any:
        doc = parse(raw, self.role, trailing=self.envelope)
        if not self.envelope:
            return doc
        if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict):
            raise Bad(f'{self.role} has no "schema" and "payload" fields (schemas.enable=true)')
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
                parse(raw, self.role)
                values.append(raw.decode("utf-8"))
                reasons.append(None)
            except Bad as exc:
                values.append(None)
                reasons.append(str(exc))
        return Decoded(pa.array(values, pa.string()), string_errors(reasons))


def _binary_values(array: pa.Array) -> list[bytes | None]:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_binary(array.type):
        array = array.cast(pa.binary())
    return array.to_pylist()
