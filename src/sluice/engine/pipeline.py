"""Assembles a connector's streaming query: source → converters → topic, topic → converters → sink.

The topic writer/reader are passed in as Spark data source classes (the bus builds them), so the
engine does not depend on a bus backend.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource
from pyspark.sql.streaming import StreamingQuery

from sluice.converters import SchemaRegistry
from sluice.engine.converters import (
    SHAPE_COLUMN,
    SchemaRegistration,
    SinkCodecs,
    SourceCodecs,
    decode_frame,
    encode_frame,
    fail_on_errors,
    plan_encoders,
    register_schemas,
    schema_of,
)
from sluice.engine.direct import BatchConsumer, receipt_committer
from sluice.engine.errors import CONTEXT_COLUMN, DEAD_LETTER_COLUMN, ERROR_COLUMNS
from sluice.engine.settings import ConnectorSettings
from sluice.engine.sink import SinkPlan, sink_data_source
from sluice.engine.source import SourcePlan, source_data_source
from sluice.engine.source_errors import (
    ERROR_FRAME,
    TASK_COLUMN,
    DeadLetterRouting,
    encode_frame_tolerating,
)
from sluice.engine.transforms import apply_transforms
from sluice.sdk import Transform

_INT31 = 0x7FFFFFFF


def route_column(key: Column) -> Column:
    """Non-negative routing hash: crc32 of the key bytes when there is a key (one key stays in one
    queue; the fused path computes the same), else the source partition's hash (one file/table
    stays in order), else null: the topic writer then spreads the record round-robin."""
    return (
        F.when(key.isNotNull(), F.crc32(key).bitwiseAND(F.lit(_INT31)).cast("int"))
        .otherwise(F.col("partition_hash"))
        .alias("route")
    )


def source_frame(
    spark: SparkSession,
    plan: SourcePlan,
    config: dict[str, str],
    chain: list[Transform],
    registry: SchemaRegistry | None = None,
) -> tuple[DataFrame, SourceCodecs]:
    """The source's records, transformed, converted to topic bytes, with their routing hash; and
    the encoders used (planned from the transformed columns' types)."""
    spark.dataSource.register(source_data_source(plan))
    raw = spark.readStream.format(plan.format_name).load()
    bypass = plan.tolerant and bool(chain)
    if bypass:  # dead letters bypass the transforms (a transform could drop or reshape them)
        good = raw.where(F.col(DEAD_LETTER_COLUMN).isNull()).drop(DEAD_LETTER_COLUMN)
        df = apply_transforms(spark, good, chain)
    else:
        df = apply_transforms(spark, raw, chain)
    if chain:
        key_schema = schema_of(df.schema["key"].dataType, plan.key_schema, key="key.converter")
        value_schema = schema_of(df.schema["value"].dataType, plan.value_schema)
    else:
        key_schema, value_schema = plan.key_schema, plan.value_schema
    codecs = plan_encoders(config, key_schema, value_schema, registry)
    if registry is not None and plan.topic:
        register_schemas(registry, plan.topic, codecs)
    if not plan.tolerant:
        out = encode_frame(df, codecs).select(*RECORD_FRAME, route_column(F.col("key")))
        return out, codecs
    # errors.tolerance=all: see sluice.engine.source_errors
    # the task that read each record, for its dead letter (see DeadLetterRouting)
    keep = (TASK_COLUMN,) if bypass else (TASK_COLUMN, DEAD_LETTER_COLUMN)
    encoded = encode_frame_tolerating(df, codecs, keep)
    out = encoded.select(*RECORD_FRAME, route_column(F.col("key")), *ERROR_FRAME, *keep)
    if bypass:
        # Spark reads the source range twice for this (once per branch of the union).
        letters = raw.where(F.col(DEAD_LETTER_COLUMN).isNotNull())
        out = out.unionByName(
            letters.select(
                *[F.lit(None).cast(f.dataType).alias(f.name) for f in out.schema],
                DEAD_LETTER_COLUMN,
            ),
            allowMissingColumns=True,
        )
    return out, codecs


RECORD_FRAME = ("topic", "key", "value", "timestamp", "headers")


def fusable(settings: ConnectorSettings, codecs: SourceCodecs | SinkCodecs) -> bool:
    """True if a hop needs nothing from the JVM: no transforms, `pipeline.fused` not false (which
    forces the JVM path: records cross into Spark's rows and back), and converters whose Arrow
    form is preferred (vectorised, or the only one)."""
    return settings.fused and codecs.fusable


def start_fused_query(
    spark: SparkSession,
    name: str,
    reader: type[DataSource],
    consumer: BatchConsumer,
    *,
    checkpoint: str,
    trigger: dict[str, object],
) -> StreamingQuery:
    """Start a fused query: `reader` already hands records to `consumer`; commit its receipts."""
    committer = receipt_committer(f"sluice-commit-{name}", consumer)
    spark.dataSource.register(reader)
    spark.dataSource.register(committer)
    return (
        spark.readStream.format(reader.name())
        .load()
        .writeStream.format(committer.name())
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def start_source_query(
    spark: SparkSession,
    plan: SourcePlan,
    config: dict[str, str],
    writer: type[DataSource],
    *,
    checkpoint: str,
    trigger: dict[str, object],
    chain: list[Transform] | None = None,
    registry: SchemaRegistry | None = None,
) -> StreamingQuery:
    """Start the query that moves a source connector's records into topics (JVM path).

    A source whose partitions differ in shape reads each shape through its own Spark source
    (a frame has one type), transformed and encoded on its own; the encoded branches, all
    alike, are unioned into one topic write.
    """
    built = [source_frame(spark, b, config, chain or [], registry) for b in plan.branches()]
    codecs = tuple(c for _, c in built)
    registering = registry is not None and any(c.registered for c in codecs)
    frames = [
        frame.withColumn(SHAPE_COLUMN, F.lit(shape).cast("int"))
        if registering and len(built) > 1
        else frame
        for shape, (frame, _) in enumerate(built)
    ]
    frame = functools.reduce(lambda a, b: a.unionByName(b), frames)
    if plan.tolerant and plan.errors is not None:
        writer = DeadLetterRouting(plan.errors, plan.counters, len(plan.task_configs)).writer(
            writer
        )
    if registering:
        skip = frozenset([plan.errors.policy.dlq_topic] if plan.errors else [])
        writer = SchemaRegistration(registry, codecs, skip=skip).writer(writer)
    spark.dataSource.register(writer)
    return (
        frame.writeStream.format(writer.name())
        .queryName(f"source:{plan.name}")
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def _transform_sink_frame(spark: SparkSession, df: DataFrame, chain: list[Transform]) -> DataFrame:
    # Transforms see headers as a map; sinks get them back as JSON text (cheap to hand over).
    df = df.withColumn("headers", F.from_json("headers", "map<string,string>"))
    return apply_transforms(spark, df, chain).withColumn("headers", F.to_json("headers"))


def _transform_tolerating_errors(
    spark: SparkSession, df: DataFrame, chain: list[Transform]
) -> DataFrame:
    """`errors.tolerance=all` with transforms: the records that decoded go through the chain,
    the others bypass it (no transform may drop or reshape them before the dead-letter queue)
    and join the sink frame again with their error columns and original context
    (`error_context`). Spark reads the topic range twice for this (once per branch)."""
    ok = F.col("error").isNull()
    good = _transform_sink_frame(spark, df.where(ok).drop(*ERROR_COLUMNS), chain)
    bad = df.where(~ok)
    context = F.struct(
        *[F.col(c) for c in ("topic", "queue_id", "queue_offset", "timestamp", "headers")]
    )
    context_type = bad.select(context.alias("c")).schema["c"].dataType
    error_types = {f.name: f.dataType for f in bad.schema if f.name in ERROR_COLUMNS}
    bad_side = bad.select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in good.schema],
        *[F.col(c) for c in ERROR_COLUMNS],
        context.alias(CONTEXT_COLUMN),
    )
    good_side = good.select(
        *good.columns,
        *[F.lit(None).cast(error_types[c]).alias(c) for c in ERROR_COLUMNS],
        F.lit(None).cast(context_type).alias(CONTEXT_COLUMN),
    )
    return good_side.unionByName(bad_side)


def start_sink_query(
    spark: SparkSession,
    plan: SinkPlan,
    reader: type[DataSource],
    *,
    checkpoint: str,
    trigger: dict[str, object],
    chain: list[Transform] | None = None,
) -> StreamingQuery:
    """Start the query that delivers topic records to a sink connector (JVM path).

    Records that do not decode carry an `error` (see `sluice.engine.converters`): without
    transforms it reaches the sink writer, which fails the task with it (or, with
    `errors.tolerance=all`, skips it and writes it to the dead-letter queue); with transforms
    the query fails in the JVM before any transform runs, or the bad records bypass the chain.
    """
    spark.dataSource.register(reader)
    spark.dataSource.register(sink_data_source(plan))
    codecs = plan.codecs
    if codecs is None:
        raise ValueError(f"sink {plan.name}: its plan has no decoders")
    df = decode_frame(spark.readStream.format(reader.name()).load(), codecs)
    if chain:
        tolerate = plan.errors is not None and plan.errors.policy.tolerate
        if codecs.can_fail and tolerate:
            df = _transform_tolerating_errors(spark, df, chain)
        else:
            if codecs.can_fail:
                df = fail_on_errors(df)
            df = _transform_sink_frame(spark, df, chain)
    return (
        df.writeStream.format(plan.format_name)
        .queryName(f"sink:{plan.name}")
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )
