"""Runs a connector's transform chain on its Spark DataFrame.

`parse_transforms` reads `transforms=a,b`, `transforms.a.class` (or Kafka's `transforms.a.type`) and
the options under `transforms.a.`; `apply_transforms` compiles each step to Spark SQL and applies it
in order. Columns other than the record columns (`partition_hash` on the source side, `queue_id` and
`queue_offset` on the sink side) pass through every step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sluice.engine import sql_guard
from sluice.engine.frames import RECORD_COLUMNS
from sluice.sdk import (
    ConfigException,
    ConnectRecord,
    Predicate,
    SqlStep,
    Transform,
    literal,
    quote,
)
from sluice.sdk._config import normalize_config

TransformResolver = Callable[[str], type[Transform]]
_RECORDS = re.compile(r"\brecords\b", re.IGNORECASE)

#: The longest chain `transforms` may name. Each step adds nodes to the query's plan, which Spark
#: analyses and optimises recursively every micro-batch and ships to its task threads: 200 `sql`
#: steps overflowed the stack of Spark's threads (`StackOverflowError`; in a task thread Spark
#: then ends its JVM, and with it every query of the worker), and planning grows faster than the
#: chain (measured in docs/config.md, *Transform chains*). Far above any chain seen in use.
MAX_TRANSFORMS = 50


def parse_transforms(config: dict[str, str], resolve: TransformResolver) -> list[Transform]:
    """The configured chain, each transform configured with its own options.

    A transform's `predicate` option names a predicate of the top-level `predicates=` list (Kafka
    Connect's syntax); the transform then applies only where it holds (`negate=true`: where it
    does not). The gate is kept on the transform as `gate` (SQL text, resolved at planning).
    """
    conf = normalize_config(config)
    predicates = _parse_predicates(conf, resolve)
    names = _names(conf, "transforms", "transform")
    if len(names) > MAX_TRANSFORMS:
        raise ConfigException(
            "transforms",
            f"names {len(names)} transforms; a chain may have at most {MAX_TRANSFORMS} (longer "
            "plans overflow Spark's stack)",
            suggestion="merge steps (one `sql` transform can do the work of many), or split "
            "the flow in two connectors through a topic",
        )
    chain = [_configured(conf, f"transforms.{name}.", resolve) for name in names]
    for transform, name in zip(chain, names, strict=True):
        prefix = f"transforms.{name}."
        predicate = conf.get(prefix + "predicate", "").strip()
        if not predicate:
            transform.gate = None  # type: ignore[attr-defined]
            continue
        if predicate not in predicates:
            known = ", ".join(predicates) or "none"
            raise ConfigException(
                prefix + "predicate",
                f"names {predicate!r}, which is not in predicates= (defined: {known})",
            )
        negate = conf.get(prefix + "negate", "false").strip().lower()
        if negate not in ("true", "false"):
            raise ConfigException(prefix + "negate", f"expected true or false, got {negate!r}")
        transform.gate = (predicates[predicate], negate == "true")  # type: ignore[attr-defined]
    return chain


def _names(conf: dict[str, str], key: str, what: str) -> list[str]:
    names = [n.strip() for n in conf.get(key, "").split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise ConfigException(key, f"names a {what} twice: {conf[key]!r}")
    return names


def _configured(conf: dict[str, str], prefix: str, resolve: TransformResolver) -> Transform:
    """The class named by `<prefix>class` (or Kafka's `<prefix>type`), configured with the other
    keys under `prefix`; errors name the key as the user wrote it."""
    class_key = prefix + "class" if prefix + "class" in conf else prefix + "type"
    if not conf.get(class_key):
        raise ConfigException(prefix + "class", "required key is missing")
    reserved = {prefix + "class", prefix + "type"}
    if prefix.startswith("transforms.") and conf.get(prefix + "predicate", "").strip():
        reserved |= {prefix + "predicate", prefix + "negate"}  # the gate's, not the transform's
    options = {
        k[len(prefix) :]: v for k, v in conf.items() if k.startswith(prefix) and k not in reserved
    }
    try:
        cls = resolve(conf[class_key])
    except ConfigException as exc:  # the resolver names `transforms`: name the key typed
        message = exc.message.removeprefix(f"{exc.key}: ")
        raise ConfigException(class_key, message, suggestion=exc.suggestion) from None
    transform = cls()
    try:
        transform.configure(options, name=prefix.rstrip(".").split(".", 1)[1])
    except ConfigException as exc:
        raise ConfigException(prefix + exc.key, exc.message.split(": ", 1)[-1]) from None
    return transform


def _parse_predicates(conf: dict[str, str], resolve: TransformResolver) -> dict[str, Predicate]:
    out: dict[str, Predicate] = {}
    for name in _names(conf, "predicates", "predicate"):
        prefix = f"predicates.{name}."
        predicate = _configured(conf, prefix, resolve)
        if not isinstance(predicate, Predicate):
            raise ConfigException(
                prefix + "type", f"{type(predicate).__name__} is a transform, not a predicate"
            )
        out[name] = predicate
    return out


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


def _gated(transform: Transform, step: SqlStep | None, schema: dict) -> SqlStep | None:
    """`step` applied only to the records its predicate gate selects."""
    gate = getattr(transform, "gate", None)
    if gate is None:
        return step
    predicate, negate = gate
    if step is None or step.query is not None:
        raise ConfigException(
            f"transforms.{transform.name}.predicate",
            "predicates apply to transforms that compile to column expressions, "
            f"not to {type(transform).__name__}",
        )
    holds = f"coalesce({predicate.condition(schema)}, false)"
    when = f"(NOT {holds})" if negate else holds
    columns = {
        c: f"CASE WHEN {when} THEN ({e}) ELSE {quote(c)} END" for c, e in step.columns.items()
    }
    where = f"(NOT {when}) OR ({step.where})" if step.where else None
    return SqlStep(columns=columns, where=where)


def _apply_one(spark: SparkSession, df: DataFrame, transform: Transform) -> DataFrame:
    out = _planned_step(spark, df, transform)
    sql_guard.check_frame(out, f"transforms.{transform.name}")
    return out


def _planned_step(spark: SparkSession, df: DataFrame, transform: Transform) -> DataFrame:
    schema = record_schema(df)
    step = _gated(transform, transform.to_sql(schema), schema)
    if step is None:
        return df.mapInArrow(_per_record(transform), df.schema)
    extras = [c for c in df.columns if c not in RECORD_COLUMNS]
    if step.query is not None:
        # `{records}` is PySpark's DataFrame parameter; literal braces in the query are escaped.
        template = _RECORDS.sub("{records}", step.query.replace("{", "{{").replace("}", "}}"))
        sql_guard.check_statement(spark, step.query, f"transforms.{transform.name}.query")
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


def topic_routes(
    spark: SparkSession, chain: list[Transform], topics: Sequence[str]
) -> dict[str, str | None] | None:
    """The topic each of `topics` becomes through `chain` (None: its records are dropped), when
    every step of the chain and of its gates reads and changes the topic only
    (`Transform.topic_only`); None for any other chain, which needs Spark's rows.

    A fused sink routes its records by this table (`route_topics`) instead of running the chain:
    its topics may differ in schema, which one Spark frame cannot hold. The table is computed
    by the chain itself, planned over one row per topic, so the Java regexes mean what they
    mean on the JVM path.
    """
    if not chain or not all(_topic_only(t) for t in chain):
        return None
    # inline VALUES are a local relation, which Spark's optimizer evaluates on the driver
    nulls = "CAST(NULL AS BINARY), CAST(NULL AS BINARY), CAST(NULL AS TIMESTAMP), "
    nulls += "CAST(NULL AS MAP<STRING, STRING>)"
    rows = ", ".join(f"({literal(topic)}, {nulls}, {i})" for i, topic in enumerate(topics))
    columns = "topic, key, value, timestamp, headers, route_index"
    table = spark.sql(f"SELECT * FROM VALUES {rows} AS routes({columns})")
    routed = apply_transforms(spark, table, chain)
    kept = {r["route_index"]: r["topic"] for r in routed.select("topic", "route_index").collect()}
    return {topic: kept.get(i) for i, topic in enumerate(topics)}


def _topic_only(transform: Transform) -> bool:
    gate = getattr(transform, "gate", None)
    return transform.topic_only and (gate is None or gate[0].topic_only)


def route_topics(batch: pa.RecordBatch, routes: Mapping[str, str | None]) -> pa.RecordBatch:
    """`batch` with each record's topic replaced as `routes` says (a topic it does not name is
    kept), and the records of a topic routed to None dropped (executor)."""
    if not batch.num_rows:
        return batch
    index = batch.schema.get_field_index("topic")
    topic = batch.column(index)
    names = pa.array(list(routes), pa.string())
    found = pc.index_in(topic, value_set=names)
    new = pc.coalesce(pc.take(pa.array(list(routes.values()), pa.string()), found), topic)
    dropped = [t for t, r in routes.items() if r is None]
    if dropped:  # a topic routed to None: its records go, the others keep their new topic
        keep = pc.invert(pc.is_in(topic, value_set=pa.array(dropped, pa.string())))
        return batch.set_column(index, "topic", new).filter(keep)
    return batch.set_column(index, "topic", new)


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
