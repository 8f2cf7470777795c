"""The Spark face of converters (`sluice.converters`): columns, `mapInArrow` steps, fused batches.

Source side, `plan_encoders` builds the key/value `Encoder`s of a connector and `encode_frame` turns
a source frame into what the topic writer takes: each side as Spark SQL when its encoder has a SQL
form, else as a `mapInArrow` step running the encoder's Arrow form. Sink side, `plan_decoders`
looks the topics' schemas up in the registry and `decode_frame` decodes a topic frame the same way,
adding the error columns described in `sluice.converters` (`error`, `raw_key`, `raw_value`).
What happens to a record with an error with `errors.tolerance=none` (with `all`, see
`sluice.engine.errors`):

* no transforms: the columns reach the sink writer, whose `check_errors` fails the task with
  `ConnectException(<error>)` before the sink task sees the batch;
* transforms: `fail_on_errors` makes every record column raise the record's error in the JVM
  (`raise_error`), so no transform can filter a bad record away first.

Fused hops (no transforms, both sides' Arrow forms preferred: `StringConverter`,
`ByteArrayConverter` and the number converters, which are vectorised, and `AvroConverter`, which
has no SQL form) use `encode_batch` / `decode_batch` on Arrow batches and never enter the JVM.
Sources register the schemas they write (`register_schemas`, `SchemaRegistration`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import DataType, StructType

from sluice import converters
from sluice.converters import (
    Converter,
    Decoded,
    Decoder,
    Encoder,
    RecordError,
    SchemaRegistry,
    canonical,
    converter_from_config,
    from_connect,
    record_error,
    subject,
)
from sluice.sdk import ConfigException, ConnectException, Field, FieldType, Logical, Schema

CONVERTER_KEYS = ("key.converter", "value.converter")
#: Time at the Spark boundary (Spark's TIME(6) in Arrow) and inside sluice (`Schema.time()`).
SPARK_TIME = pa.time64("ns")
SLUICE_TIME = pa.time64("us")
_TIME = re.compile(r"time\((\d)\)")
ERROR_COLUMNS = ("error", "raw_key", "raw_value")
RECORD_COLUMNS = ("topic", "queue_id", "queue_offset", "key", "value", "timestamp", "headers")
_TMP = "__sluice_"


#: what a sink waiting for a schema does (the suggestion of `SchemaNotRegisteredError`)
WAITS = (
    "the sink waits, and starts once the source connector that writes {what} has registered "
    "its schemas (with its first micro-batch)"
)


class SchemaNotRegisteredError(ConfigException):
    """A sink's converter needs a topic's registered schema and none is registered yet: the
    source that writes the topic registers it with its first micro-batch, perhaps not yet
    started. Not the user's mistake to fix: the runtime waits and starts the sink again
    (`sluice.runtime.herder.restarts`, kind `waiting`) instead of leaving it FAILED."""


# -- configuration ---------------------------------------------------------------------------------
def converter_for(
    config: dict[str, str], key: str, registry: SchemaRegistry | None = None
) -> Converter:
    """The converter configured under `key` ("key.converter" / "value.converter")."""
    return converter_from_config(config, key.split(".", 1)[0], registry)


def uses_registry(config: dict[str, str]) -> bool:
    """True when the key or value converter takes its schemas from the registry."""
    return any(converter_for(config, key).uses_registry for key in CONVERTER_KEYS)


@dataclass(frozen=True)
class SourceCodecs:
    """A source's key and value encoders, and the schemas it registers for every topic it writes
    (`(role, canonical schema)` pairs)."""

    key: Encoder
    value: Encoder
    registered: tuple[tuple[str, str], ...] = ()

    @property
    def fusable(self) -> bool:
        return self.key.prefers_arrow and self.value.prefers_arrow


@dataclass(frozen=True)
class SinkCodecs:
    """A sink's key and value decoders.

    A sink whose topics have different registered schemas has decoders per topic (`topics`) and
    decodes each topic's records with its own (`of`); it runs fused, since a Spark frame has one
    type. `key`/`value` are then the first topic's.
    """

    key: Decoder
    value: Decoder
    topics: tuple[tuple[str, SinkCodecs], ...] = ()

    @property
    def mixed(self) -> bool:
        """True when the topics differ in schema."""
        return bool(self.topics)

    def of(self, topic: str | None) -> SinkCodecs:
        """The decoders of `topic`'s records."""
        for name, codecs in self.topics:
            if name == topic:
                return codecs
        return self

    def resolve_late(self) -> None:
        """Look up now the schemas of topics that had none when the sink was planned (see
        `_LateDecoder`); `ConfigException` naming the topic if one still has none."""
        for decoder in self.decoders():
            if isinstance(decoder, _LateDecoder):
                decoder.resolve()

    def decoders(self) -> list[Decoder]:
        """Every decoder: key and value, of each topic when they differ."""
        return [d for c in ([c for _, c in self.topics] or [self]) for d in (c.key, c.value)]

    @property
    def fusable(self) -> bool:
        return all(d.prefers_arrow for d in self.decoders())

    @property
    def can_fail(self) -> bool:
        return not all(isinstance(d, _NEVER_FAIL) for d in self.decoders())


def plan_encoders(
    config: dict[str, str],
    key_schema: Schema,
    value_schema: Schema,
    registry: SchemaRegistry | None,
) -> SourceCodecs:
    """Encoders for a source's keys and values (driver, when its query is planned)."""
    encoders = []
    registered = []
    for role, schema in (("key", key_schema), ("value", value_schema)):
        converter = converter_from_config(config, role, registry)
        encoders.append(converter.encoder(schema))
        if converter.uses_registry:
            registered.append((role, canonical(schema)))
    return SourceCodecs(encoders[0], encoders[1], tuple(registered))


def register_schemas(registry: SchemaRegistry, topic: str, codecs: SourceCodecs) -> None:
    """Make the source's schemas the latest versions of `topic`'s subjects (idempotent)."""
    for role, text in codecs.registered:
        name = subject(topic, role)
        latest = registry.latest(name)
        if latest is None or latest.schema != text:
            registry.register(name, text)


def plan_decoders(
    config: dict[str, str], topics: Sequence[str], registry: SchemaRegistry | None
) -> SinkCodecs:
    """Decoders for a sink reading `topics`, with their registered schemas (driver)."""
    names = list(topics) or [""]
    decoders: dict[str, dict[str, Decoder]] = {}
    for role in ("key", "value"):
        converter = converter_from_config(config, role, registry)
        schemas: dict[str, Schema | None] = dict.fromkeys(names)
        # a topic not registered yet takes its schema when its first records arrive (fused)
        late = converter.uses_registry and converter.needs_schema() and not converter.decodes_in_sql
        if converter.uses_registry:
            schemas = _topics_schemas(converter, names, registry, late=late)
            if converter.needs_schema() and not late and not any(schemas.values()):
                raise SchemaNotRegisteredError(
                    converter.key,
                    f"{converter.name} needs the {role} schema of topic(s) "
                    f"{', '.join(topics)}, and none is registered",
                    suggestion=WAITS.format(what="them"),
                )
        made: dict[Schema | None, Decoder] = {}  # one decoder per distinct schema
        decoders[role] = {}
        for topic, schema in schemas.items():
            if schema is None and late:
                decoders[role][topic] = _LateDecoder(converter, topic)
                continue
            if schema not in made:
                made[schema] = converter.decoder(schema)
            decoders[role][topic] = made[schema]
    key, value = decoders["key"], decoders["value"]
    first = SinkCodecs(key[names[0]], value[names[0]])
    if all(key[t] is first.key and value[t] is first.value for t in names):
        return first
    return SinkCodecs(
        first.key, first.value, tuple((t, SinkCodecs(key[t], value[t])) for t in names)
    )


class _LateDecoder(Decoder):
    """The decoder of a topic that had no registered schema when the sink started: built from
    the topic's registered schema when the topic's first records are decoded (on an executor,
    once per process). Only for converters with no SQL form, so the sink runs in Arrow (fused)
    and nothing needs the type before records arrive."""

    arrow_mode = "per-record"  # not known before the schema is; no SQL form either way

    def __init__(self, converter: Converter, topic: str) -> None:
        self.converter = converter.name
        self.role = converter.role
        self.topic = topic
        self._factory = converter
        self._inner: Decoder | None = None

    def resolve(self) -> Decoder:
        if self._inner is None:
            registry = self._factory.registry
            found = registry.latest(subject(self.topic, self.role)) if registry else None
            if found is None:
                raise SchemaNotRegisteredError(
                    self._factory.key,
                    f"{self.converter} needs the {self.role} schema of topic {self.topic!r}, and "
                    "none is registered",
                    suggestion=WAITS.format(what="it"),
                )
            self._inner = self._factory.decoder(from_connect(json.loads(found.schema)))
        return self._inner

    @property
    def schema(self) -> Schema:  # type: ignore[override]
        return self.resolve().schema

    def arrow(self, array: pa.Array) -> Decoded:
        return self.resolve().arrow(array)


def _topics_schemas(
    converter: Converter, topics: Sequence[str], registry: SchemaRegistry | None, *, late: bool
) -> dict[str, Schema | None]:
    """The registered schema of each topic (for `converter`'s role): all of them, or none,
    unless the missing ones may come `late`."""
    if registry is None:
        raise ConfigException(converter.key, f"{converter.name} needs a schema registry")
    found = {t: registry.latest(subject(t, converter.role)) for t in topics}
    known = {t: r for t, r in found.items() if r is not None}
    missing = sorted(t for t, r in found.items() if r is None)
    if known and missing and not late:
        raise SchemaNotRegisteredError(
            converter.key,
            f"topic(s) {', '.join(missing)} have no registered {converter.role} schema yet "
            f"({', '.join(sorted(known))} do)",
            suggestion=WAITS.format(what="them"),
        )
    return {t: (from_connect(json.loads(r.schema)) if r else None) for t, r in found.items()}


# -- Spark types → schemas -------------------------------------------------------------------------
_SPARK_PRIMITIVES = {
    "string": FieldType.STRING,
    "binary": FieldType.BYTES,
    "boolean": FieldType.BOOLEAN,
    "byte": FieldType.INT8,
    "short": FieldType.INT16,
    "integer": FieldType.INT32,
    "long": FieldType.INT64,
    "float": FieldType.FLOAT32,
    "double": FieldType.FLOAT64,
}


def schema_of(
    type_: DataType, hint: Schema | None = None, *, key: str = "value.converter"
) -> Schema:
    """The schema of a Spark column type. `hint` (the connector's schema) restores what Spark
    types do not say: struct names. Errors name the converter `key`."""
    return _schema_of(type_.jsonValue(), hint, None, key)


def _schema_of(t: Any, hint: Schema | None, nullable: bool | None, key: str) -> Schema:
    optional = nullable if nullable is not None else (hint.optional if hint else True)
    if isinstance(t, str):
        if t in ("timestamp", "timestamp_ntz"):
            return Schema.timestamp(optional=optional)
        if t == "date":
            return Schema.date(optional=optional)
        if t.startswith("decimal("):
            precision, scale = (int(x) for x in t[len("decimal(") : -1].split(","))
            return Schema.decimal(precision, scale, optional=optional)
        time = _TIME.fullmatch(t)
        if time is not None:
            # TIME(0) … TIME(6) fit in microseconds; Spark's TIME(7..9) would not.
            if int(time[1]) > 6:
                raise ConfigException(
                    key, f"the Spark type {t} has more digits than sluice's Time (microseconds)"
                )
            return Schema.time(optional=optional)
        if t in _SPARK_PRIMITIVES:
            name = hint.name if hint is not None and hint.logical is None else None
            return Schema(_SPARK_PRIMITIVES[t], optional=optional, name=name)
        raise ConfigException(key, f"no converter supports the Spark type {t}")
    kind = t.get("type")
    if kind == "struct":
        hints = {f.name: f.schema for f in hint.fields} if hint and hint.fields else {}
        fields = [
            Field(f["name"], _schema_of(f["type"], hints.get(f["name"]), f["nullable"], key))
            for f in t["fields"]
        ]
        name = hint.name if hint is not None and hint.type is FieldType.STRUCT else None
        return Schema.struct(*fields, optional=optional, name=name)
    if kind == "array":
        item_hint = hint.value_schema if hint is not None else None
        items = _schema_of(t["elementType"], item_hint, t["containsNull"], key)
        return Schema.array(items, optional=optional)
    if kind == "map":
        k_hint = hint.key_schema if hint is not None else None
        v_hint = hint.value_schema if hint is not None else None
        keys = _schema_of(t["keyType"], k_hint, None, key)  # never null: the hint says optional
        values = _schema_of(t["valueType"], v_hint, t["valueContainsNull"], key)
        return Schema.map_(keys, values, optional=optional)
    raise ConfigException(key, f"no converter supports the Spark type {json.dumps(t)}")


def spark_ddl(schema: Schema) -> str:
    """Spark DDL of a decoded column: like `Schema.to_spark_ddl`, every field nullable."""
    if schema.logical is not None:
        return schema.to_spark_ddl()
    if schema.type is FieldType.STRUCT:
        inner = ",".join(
            f"`{f.name.replace('`', '``')}`:{spark_ddl(f.schema)}" for f in schema.fields
        )
        return f"struct<{inner}>"
    if schema.type is FieldType.ARRAY and schema.value_schema is not None:
        return f"array<{spark_ddl(schema.value_schema)}>"
    if schema.type is FieldType.MAP and schema.key_schema and schema.value_schema:
        return f"map<{spark_ddl(schema.key_schema)},{spark_ddl(schema.value_schema)}>"
    return schema.to_spark_ddl()


def spark_arrow_type(schema: Schema) -> pa.DataType:
    """The Arrow type Spark exchanges for `spark_ddl(schema)`: Times as time64[ns]."""
    if schema.logical is Logical.TIME:
        return SPARK_TIME
    if schema.type is FieldType.STRUCT:
        return pa.struct([pa.field(f.name, spark_arrow_type(f.schema)) for f in schema.fields])
    if schema.type is FieldType.ARRAY and schema.value_schema is not None:
        return pa.list_(spark_arrow_type(schema.value_schema))
    if schema.type is FieldType.MAP and schema.key_schema and schema.value_schema:
        return pa.map_(spark_arrow_type(schema.key_schema), spark_arrow_type(schema.value_schema))
    return converters.arrow_type(schema)


def spark_frame_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every Time as time64[ns]: what Spark accepts for a `time(6)` column (it
    refuses time64[us] with DATA_SOURCE_RETURN_SCHEMA_MISMATCH / UNSUPPORTED_ARROWTYPE)."""
    return _retimed(schema, SPARK_TIME)


def sluice_frame(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch Spark handed to Python with its times (time64[ns]) back in sluice's time64[us].
    Sub-microsecond digits (none come from sluice; a sink-side `sql` transform could make a
    TIME(9)) raise rather than being cut."""
    schema = _retimed(batch.schema, SLUICE_TIME)
    if schema == batch.schema:
        return batch
    try:
        return batch.cast(schema)
    except pa.ArrowInvalid as exc:
        raise ConnectException(
            f"a TIME value has digits below the microsecond, which sluice's Time cannot carry "
            f"({exc})",
            suggestion="cut them in the transform, e.g. CAST(… AS TIME(6))",
        ) from None


def _retimed(schema: pa.Schema, unit: pa.DataType) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, _time_as(f.type, unit), f.nullable, f.metadata) for f in schema]
    )


def _time_as(t: pa.DataType, unit: pa.DataType) -> pa.DataType:
    if pa.types.is_time(t):
        return unit
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _time_as(f.type, unit), f.nullable) for f in t])
    if pa.types.is_list(t):
        return pa.list_(
            pa.field(t.value_field.name, _time_as(t.value_type, unit), t.value_field.nullable)
        )
    if pa.types.is_map(t):
        return pa.map_(_time_as(t.key_type, unit), _time_as(t.item_type, unit))
    return t


# -- source side -----------------------------------------------------------------------------------
def encode_frame(df: DataFrame, codecs: SourceCodecs) -> DataFrame:
    """A source frame (`topic, key, value, timestamp, headers, partition_hash`) with key and value
    as topic bytes and headers as JSON text (Spark hands maps to Python ~100x slower)."""
    out = df.select(
        "topic",
        "key",
        "value",
        "timestamp",
        F.to_json("headers").alias("headers"),
        "partition_hash",
    )
    sql_sides = [(c, e) for c, e in (("key", codecs.key), ("value", codecs.value)) if e.has_sql]
    if sql_sides:
        columns = {c: _encode_sql(e, c) for c, e in sql_sides}
        out = out.select(*[columns.get(c, F.col(c)).alias(c) for c in out.columns])
    arrow_sides = tuple(
        c for c, e in (("key", codecs.key), ("value", codecs.value)) if not e.has_sql
    )
    if arrow_sides:
        schema = StructType.fromDDL(
            "topic string, key binary, value binary, timestamp timestamp, headers string, "
            "partition_hash int"
        )
        out = out.mapInArrow(_EncodeBatches(codecs, arrow_sides), schema)
    return out


def _encode_sql(encoder: Encoder, column: str) -> Column:
    target = f"`{column}`"
    expr = F.expr(encoder.sql(target) or target)
    error = encoder.sql_error(target)
    if error is None:
        return expr
    message = F.concat(
        F.lit(f"{encoder.converter}: a record for topic "),
        F.col("topic"),
        F.lit(": "),
        F.expr(error),
    )
    return F.when(F.expr(error).isNull(), expr).otherwise(F.raise_error(message))


class EncodeError(ConnectException):
    """A source record the `side` ("key"/"value") encoder could not write; `index` is its row."""

    def __init__(self, message: str, *, index: int, side: str, converter: str) -> None:
        super().__init__(message)
        self.index = index
        self.side = side
        self.converter = converter


def refusal(encoder: Encoder, topic: str | None, reason: str) -> str:
    """The error text of a source record `encoder` refused."""
    return f"{encoder.converter}: a record for topic {topic}: {reason}"


def _encode_side(encoder: Encoder, array: pa.Array, topics: pa.Array, side: str) -> pa.Array:
    try:
        return encoder.arrow(array)
    except RecordError as exc:
        raise EncodeError(
            refusal(encoder, topics[exc.index].as_py(), exc.reason),
            index=exc.index,
            side=side,
            converter=encoder.converter,
        ) from None


@dataclass(frozen=True)
class _EncodeBatches:
    """The `mapInArrow` function of `encode_frame` (encodes the sides that have no SQL form)."""

    codecs: SourceCodecs
    sides: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield encode_batch(batch, self.codecs, self.sides)


def encode_batch(
    batch: pa.RecordBatch, codecs: SourceCodecs, sides: Sequence[str] = ("key", "value")
) -> pa.RecordBatch:
    """An Arrow batch with its `key`/`value` columns (those in `sides`) encoded to bytes."""
    names = batch.schema.names
    columns = list(batch.columns)
    for side in sides:
        encoder = codecs.key if side == "key" else codecs.value
        i = names.index(side)
        columns[i] = _encode_side(encoder, columns[i], batch.column("topic"), side)
    return pa.RecordBatch.from_arrays(columns, names=names)


# -- sink side -------------------------------------------------------------------------------------
def decode_frame(df: DataFrame, codecs: SinkCodecs) -> DataFrame:
    """A topic frame with key and value decoded, plus — when a converter can fail — the error
    columns (`error`, `raw_key`, `raw_value`; see `sluice.converters`)."""
    sides = (("key", codecs.key), ("value", codecs.value))
    if not codecs.can_fail and codecs.key.has_sql and codecs.value.has_sql:
        # String / bytes: nothing can fail, one projection.
        exprs = {c: F.expr(d.sql(f"`{c}`", "").value) for c, d in sides}  # type: ignore[union-attr]
        return df.select(*[exprs[c].alias(c) if c in exprs else F.col(c) for c in RECORD_COLUMNS])
    sql = {c: d.sql(f"`{_TMP}raw_{c}`", f"`{_TMP}parse_{c}`") for c, d in sides if d.has_sql}
    base = [F.col(c) for c in ("topic", "queue_id", "queue_offset", "timestamp", "headers")]
    raw = [F.col(c).alias(f"{_TMP}raw_{c}") for c in ("key", "value")]
    parses = [F.expr(s.parse).alias(f"{_TMP}parse_{c}") for c, s in sql.items() if s and s.parse]
    out = df.select(*base, *raw, *parses)
    decoded: list[Column] = []
    for c, decoder in sides:
        spec = sql.get(c)
        if spec is not None:
            decoded.append(F.expr(spec.value).alias(c))
            reason = F.expr(spec.error) if spec.error else F.lit(None).cast("string")
        else:
            decoded.append(F.lit(None).cast(spark_ddl(decoder.schema)).alias(c))
            reason = F.lit(None).cast("string")
        decoded.append(reason.alias(f"{_TMP}reason_{c}"))
    out = out.select(*base, *[F.col(f"{_TMP}raw_{c}") for c in ("key", "value")], *decoded)
    arrow_sides = tuple(c for c, d in sides if not d.has_sql)
    if arrow_sides:
        out = out.mapInArrow(_DecodeBatches(codecs, arrow_sides), out.schema)
    frame = _with_errors(out, codecs)
    return frame if codecs.can_fail else frame.drop(*ERROR_COLUMNS)


def _with_errors(df: DataFrame, codecs: SinkCodecs) -> DataFrame:
    def full(side: str, decoder: Decoder) -> Column:
        reason = F.col(f"{_TMP}reason_{side}")
        return F.when(
            reason.isNotNull(),
            F.concat(
                F.lit(f"{decoder.converter}: record "),
                F.col("topic"),
                F.lit("/"),
                F.col("queue_id").cast("string"),
                F.lit("@"),
                F.col("queue_offset").cast("string"),
                F.lit(": "),
                reason,
            ),
        )

    error = F.coalesce(full("key", codecs.key), full("value", codecs.value))
    staged = df.withColumn("error", error)
    ok = F.col("error").isNull()
    return staged.select(
        "topic",
        "queue_id",
        "queue_offset",
        F.when(ok, F.col("key")).alias("key"),
        F.when(ok, F.col("value")).alias("value"),
        "timestamp",
        "headers",
        "error",
        F.when(~ok, F.col(f"{_TMP}raw_key")).alias("raw_key"),
        F.when(~ok, F.col(f"{_TMP}raw_value")).alias("raw_value"),
    )


@dataclass(frozen=True)
class _DecodeBatches:
    """The `mapInArrow` function of `decode_frame`: decodes the sides that have no SQL form into
    the placeholder columns and fills their reason columns."""

    codecs: SinkCodecs
    sides: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            names = batch.schema.names
            columns = list(batch.columns)
            for side in self.sides:
                decoder = self.codecs.key if side == "key" else self.codecs.value
                result = decoder.arrow(batch.column(f"{_TMP}raw_{side}"))
                columns[names.index(side)] = result.values.cast(spark_arrow_type(decoder.schema))
                if result.errors is not None:
                    columns[names.index(f"{_TMP}reason_{side}")] = result.errors
            yield pa.RecordBatch.from_arrays(columns, names=names)


def decode_batch(batch: pa.RecordBatch, codecs: SinkCodecs) -> pa.RecordBatch:
    """A topic-reader Arrow batch decoded (fused sinks): the sink frame plus, when a converter can
    fail, the error columns — the same contract as `decode_frame`."""
    names = batch.schema.names
    columns = {n: batch.column(n) for n in names}
    reasons: list[tuple[str, pa.Array]] = []
    for side, decoder in (("key", codecs.key), ("value", codecs.value)):
        result = decoder.arrow(columns[side])
        columns[side] = result.values.cast(spark_arrow_type(decoder.schema))
        if result.errors is not None:
            reasons.append((decoder.converter, result.errors))
    if not codecs.can_fail:
        return pa.RecordBatch.from_arrays(list(columns.values()), names=names)
    n = batch.num_rows
    errors: list[str | None] = [None] * n
    if reasons:
        topics = batch.column("topic").to_pylist()
        queues = batch.column("queue_id").to_pylist()
        offsets = batch.column("queue_offset").to_pylist()
        for converter, column in reasons:
            for i, reason in enumerate(column.to_pylist()):
                if reason is not None and errors[i] is None:
                    errors[i] = record_error(converter, topics[i], queues[i], offsets[i], reason)
    error = pa.array(errors, pa.string())
    bad = pc.is_valid(error)
    for side in ("key", "value"):
        columns[f"raw_{side}"] = pc.if_else(bad, batch.column(side), pa.scalar(None, pa.binary()))
        columns[side] = pc.if_else(bad, pa.scalar(None, columns[side].type), columns[side])
    columns["error"] = error
    order = [*names, *ERROR_COLUMNS]
    return pa.RecordBatch.from_arrays([columns[c] for c in order], names=order)


def fail_on_errors(df: DataFrame) -> DataFrame:
    """`errors.tolerance=none` on the JVM path: every record column raises the record's error,
    so a bad record fails the query whatever the transforms after this do; drops the error
    columns."""
    bad = F.raise_error(F.col("error"))
    guarded = [
        F.when(F.col("error").isNull(), F.col(c)).otherwise(bad).alias(c) for c in RECORD_COLUMNS
    ]
    return df.select(*guarded)


def check_errors(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`errors.tolerance=none` in Python: raise the first record error of a decoded batch as a
    `ConnectException`; return the batch without the error columns."""
    if "error" not in batch.schema.names:
        return batch
    error = batch.column("error")
    if error.null_count != len(error):
        first = pc.index(pc.is_valid(error), True).as_py()
        raise ConnectException(error[first].as_py())
    keep = [n for n in batch.schema.names if n not in ERROR_COLUMNS]
    return batch.select(keep)


# -- schema registration of the topics a source writes ---------------------------------------------
#: A source of several shapes tags each topic-frame batch with its shape's index (an int32 column
#: the registration reads and removes before the topic writer sees the batch).
SHAPE_COLUMN = "__sluice_shape"


def with_shape(batch: pa.RecordBatch, shape: int) -> pa.RecordBatch:
    """`batch` tagged with its shape (see `SHAPE_COLUMN`)."""
    return batch.append_column(SHAPE_COLUMN, pa.repeat(pa.scalar(shape, pa.int32()), len(batch)))


@dataclass(frozen=True)
class SchemaRegistration:
    """Registers a source's schemas for every topic it writes, before a micro-batch is published.

    Wraps a `BatchConsumer` (fused pipelines: `write`/`commit`/`abort`); `writer` wraps a Spark
    stream writer data source the same way. Topics named by `connect.topicname` are registered
    when the query is planned; this catches the others (e.g. chosen by `RegexRouter`, or one per
    table). `codecs` has one entry per shape of the source; batches of a source with several
    shapes carry `SHAPE_COLUMN`, which is removed here.
    """

    registry: SchemaRegistry
    codecs: tuple[SourceCodecs, ...]
    inner: Any = field(default=None, compare=False)
    #: Topics written with other schemas (the dead-letter topic): never registered.
    skip: frozenset[str] = frozenset()

    def topics_of(
        self, batches: Iterator[pa.RecordBatch], seen: set[tuple[str, int]]
    ) -> Iterator[Any]:
        """`batches` without their shape column, noting each (topic, shape) written."""
        for batch in batches:
            shape = 0
            names = batch.schema.names
            if SHAPE_COLUMN in names:
                if batch.num_rows:
                    shape = batch.column(SHAPE_COLUMN)[0].as_py()
                batch = batch.drop_columns([SHAPE_COLUMN])
            if batch.num_rows and "topic" in names:
                seen.update((t, shape) for t in batch.column("topic").unique().to_pylist() if t)
            yield batch

    def register(self, written: Sequence[tuple[str, int]]) -> None:
        shapes: dict[str, int] = {}
        for topic, shape in sorted(set(written)):
            if topic in self.skip:
                continue
            if shapes.setdefault(topic, shape) != shape:
                first = self.codecs[shapes[topic]].registered
                other = self.codecs[shape].registered
                if first != other:
                    raise ConnectException(
                        f"topic {topic!r} got records of two value schemas in one micro-batch; "
                        "a topic carries one (route each shape to its own topic)"
                    )
        for topic, shape in sorted(shapes.items()):
            register_schemas(self.registry, topic, self.codecs[shape])

    # BatchConsumer (fused)
    def write(self, batches: Iterator[pa.RecordBatch], partition_id: int) -> Any:
        seen: set[tuple[str, int]] = set()
        receipt = self.inner.write(self.topics_of(batches, seen), partition_id)
        return (receipt, sorted(seen))

    def commit(self, receipts: list[Any], batch_id: int) -> None:
        self.register([t for _, written in receipts for t in written])
        self.inner.commit([r for r, _ in receipts], batch_id)

    def abort(self, receipts: list[Any], batch_id: int) -> None:
        self.inner.abort([r[0] if r is not None else None for r in receipts], batch_id)

    def writer(self, source: type[DataSource]) -> type[DataSource]:
        """`source` (a stream writer data source) registering schemas before each commit."""
        registration = self

        def stream_writer(self: DataSource, schema: Any, overwrite: bool) -> _RegisteringWriter:
            inner = source.streamWriter(self, _without_shape(schema), overwrite)
            return _RegisteringWriter(inner, registration)

        return type(source.__name__, (source,), {"streamWriter": stream_writer})


def _without_shape(schema: Any) -> Any:
    if isinstance(schema, StructType) and SHAPE_COLUMN in schema.fieldNames():
        return StructType([f for f in schema.fields if f.name != SHAPE_COLUMN])
    return schema


@dataclass
class _Tagged(WriterCommitMessage):
    inner: Any
    topics: list[tuple[str, int]]


class _RegisteringWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner: Any, registration: SchemaRegistration) -> None:
        self.inner = inner
        self.registration = registration

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Tagged:
        seen: set[tuple[str, int]] = set()
        message = self.inner.write(self.registration.topics_of(iterator, seen))
        return _Tagged(message, sorted(seen))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tagged = [m for m in messages if isinstance(m, _Tagged)]
        self.registration.register([t for m in tagged for t in m.topics])
        self.inner.commit([m.inner if isinstance(m, _Tagged) else m for m in messages], batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.abort([m.inner if isinstance(m, _Tagged) else m for m in messages], batchId)


_NEVER_FAIL = (
    converters.StringConverter().decoder(None).__class__,
    converters.ByteArrayConverter().decoder(None).__class__,
)
