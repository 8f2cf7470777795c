"""Assembles a connector's streaming query: source → converters → topic, topic → converters → sink.

The topic writer/reader are passed in as Spark data source classes (the bus builds them), so the
engine does not depend on a bus backend.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource
from pyspark.sql.streaming import StreamingQuery

from sluice.engine.converters import converter_for
from sluice.engine.direct import BatchConsumer, receipt_committer
from sluice.engine.sink import SinkPlan, sink_data_source
from sluice.engine.source import SourcePlan, source_data_source
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
    spark: SparkSession, plan: SourcePlan, config: dict[str, str], chain: list[Transform]
) -> DataFrame:
    """The source's records, transformed, converted to topic bytes, with their routing hash."""
    spark.dataSource.register(source_data_source(plan))
    df = apply_transforms(spark, spark.readStream.format(plan.format_name).load(), chain)
    key_type = df.schema["key"].dataType
    value_type = df.schema["value"].dataType
    key = converter_for(config, "key.converter").to_topic(F.col("key"), key_type)
    value = converter_for(config, "value.converter").to_topic(F.col("value"), value_type)
    return df.select(
        "topic",
        key.alias("key"),
        value.alias("value"),
        "timestamp",
        # as JSON text: Spark hands nested types to Python writers ~100x slower than strings
        F.to_json("headers").alias("headers"),
        route_column(key),
    )


def fusable(config: dict[str, str], key_type: pa.DataType, value_type: pa.DataType) -> bool:
    """True if a hop needs nothing from the JVM: no transforms, Arrow-trivial converters.

    `pipeline.fused=false` forces the JVM path (records cross into Spark's rows and back).
    """
    if config.get("pipeline.fused", "true").strip().lower() == "false" or config.get("transforms"):
        return False
    key = converter_for(config, "key.converter")
    value = converter_for(config, "value.converter")
    return key.arrow_capable(key_type) and value.arrow_capable(value_type)


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
) -> StreamingQuery:
    """Start the query that moves a source connector's records into topics (JVM path)."""
    spark.dataSource.register(writer)
    return (
        source_frame(spark, plan, config, chain or [])
        .writeStream.format(writer.name())
        .queryName(f"source:{plan.name}")
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def start_sink_query(
    spark: SparkSession,
    plan: SinkPlan,
    reader: type[DataSource],
    *,
    checkpoint: str,
    trigger: dict[str, object],
    chain: list[Transform] | None = None,
) -> StreamingQuery:
    """Start the query that delivers topic records to a sink connector (JVM path)."""
    spark.dataSource.register(reader)
    spark.dataSource.register(sink_data_source(plan))
    df = spark.readStream.format(reader.name()).load()
    key = converter_for(plan.config, "key.converter").from_topic(F.col("key"))
    value = converter_for(plan.config, "value.converter").from_topic(F.col("value"))
    df = df.select(
        "topic",
        "queue_id",
        "queue_offset",
        key.alias("key"),
        value.alias("value"),
        "timestamp",
        "headers",
    )
    if chain:
        # Transforms see headers as a map; sinks get them back as JSON text (cheap to hand over).
        df = df.withColumn("headers", F.from_json("headers", "map<string,string>"))
        df = apply_transforms(spark, df, chain).withColumn("headers", F.to_json("headers"))
    return (
        df.writeStream.format(plan.format_name)
        .queryName(f"sink:{plan.name}")
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )
