"""Runs a connector's transform chain on its Spark DataFrame.

`parse_transforms` reads `transforms=a,b`, `transforms.a.class` (or Kafka's `transforms.a.type`) and
the options under `transforms.a.`; `apply_transforms` compiles each step to Spark SQL and applies it
in order. Columns other than the record columns (`partition_hash` on the source side, `queue_id` and
`queue_offset` on the sink side) pass through every step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sluice.sdk import (
    RECORD_COLUMNS,
    ConfigException,
    ConnectRecord,
    Transform,
    normalize_config,
    quote,
)

TransformResolver = Callable[[str], type[Transform]]
_RECORDS = re.compile(r"\brecords\b", re.IGNORECASE)


def parse_transforms(config: dict[str, str], resolve: TransformResolver) -> list[Transform]:
    """The configured chain, each transform configured with its own options."""
    conf = normalize_config(config)
    names = [n.strip() for n in conf.get("transforms", "").split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise ConfigException("transforms", f"names a transform twice: {conf['transforms']!r}")
    chain = []
    for name in names:
        prefix = f"transforms.{name}."
        class_key = prefix + "class" if prefix + "class" in conf else prefix + "type"
        if not conf.get(class_key):
            raise ConfigException(prefix + "class", "required key is missing")
        options = {
            k[len(prefix) :]: v
            for k, v in conf.items()
            if k.startswith(prefix) and k not in (prefix + "class", prefix + "type")
        }
        transform = resolve(conf[class_key])()
        try:
            transform.configure(options, name=name)
        except ConfigException as exc:  # name the key as the user wrote it
            raise ConfigException(prefix + exc.key, exc.message.split(": ", 1)[-1]) from None
        chain.append(transform)
    return chain


def record_schema(df: DataFrame) -> dict:
    """The record columns' schema in Spark's JSON form (what `Transform.to_sql` receives)."""
    return StructType([df.schema[c] for c in RECORD_COLUMNS]).jsonValue()


def apply_transforms(spark: SparkSession, df: DataFrame, chain: list[Transform]) -> DataFrame:
    """`df` with every transform applied in order (plans only; nothing runs yet)."""
    for transform in chain:
        try:
            df = _apply_one(spark, df, transform)
        except (AnalysisException, ParseException) as exc:
            detail = str(exc).strip().splitlines()[0]
            raise ConfigException(
                f"transforms.{transform.name}", f"invalid SQL: {detail}"
            ) from None
    return df


def _apply_one(spark: SparkSession, df: DataFrame, transform: Transform) -> DataFrame:
    step = transform.to_sql(record_schema(df))
    if step is None:
        return df.mapInArrow(_per_record(transform), df.schema)
    extras = [c for c in df.columns if c not in RECORD_COLUMNS]
    if step.query is not None:
        # `{records}` is PySpark's DataFrame parameter; literal braces in the query are escaped.
        template = _RECORDS.sub("{records}", step.query.replace("{", "{{").replace("}", "}}"))
        out = spark.sql(template, records=df)
        missing = [c for c in RECORD_COLUMNS if c not in out.columns]
        if missing:
            raise ConfigException(
                f"transforms.{transform.name}.query",
                f"the query must keep the record columns; missing: {', '.join(missing)}",
            )
        selected = [quote(c) for c in RECORD_COLUMNS] + [
            quote(c)
            if c in out.columns
            else f"CAST(NULL AS {df.schema[c].dataType.simpleString()}) AS {quote(c)}"
            for c in extras
        ]
        return out.selectExpr(*selected)
    unknown = sorted(set(step.columns) - set(RECORD_COLUMNS))
    if unknown:
        raise ConfigException(f"transforms.{transform.name}", f"sets unknown columns {unknown}")
    exprs = [
        f"{step.columns[c]} AS {quote(c)}" if c in step.columns else quote(c) for c in df.columns
    ]
    out = df.selectExpr(*exprs)
    return out.where(step.where) if step.where else out


def _per_record(
    transform: Transform,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = []
            for row in batch.to_pylist():
                record = ConnectRecord(
                    value=row["value"],
                    key=row["key"],
                    topic=row["topic"],
                    timestamp=row["timestamp"],
                    extensions=dict(row["headers"] or {}),
                )
                result = transform.apply(record)
                if result is None:
                    continue
                row.update(
                    value=result.value,
                    key=result.key,
                    topic=result.topic,
                    timestamp=result.timestamp,
                    headers=list(result.extensions.items()) or None,
                )
                rows.append(row)
            yield pa.RecordBatch.from_pylist(rows, schema=batch.schema)

    return run
