"""`errors.tolerance=all` on a source's JVM path (transforms, or converters with a SQL form).

The converters still run as Spark SQL (or their `mapInArrow` step); instead of failing the query,
a record they refuse gets the columns of `ERROR_FRAME`: why (`error`), where (`error_stage`,
`error_class`) and what to keep of it (`letter_key`, `letter_value`: its key and value as JSON
text; when one side has no SQL form and the other does, the refused record keeps the other
side's topic bytes, as that side's converter wrote them). Dead letters made before the
transforms (records off the connector's schema) travel in the `dead_letter` column, and the
source task that read each record in `TASK_COLUMN`, so that its dead letter names it. The topic
writer is wrapped (`DeadLetterRouting`): in the Python process that receives the rows anyway, it
logs and counts the tolerated records and turns them into dead-letter topic rows of the same
micro-batch, so they are written exactly once with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sluice.converters import Encoder, RecordError
from sluice.engine.converters import SourceCodecs, refusal
from sluice.engine.errors import (
    DEAD_LETTER_COLUMN,
    KEY_CONVERTER,
    TOPIC_FRAME_SCHEMA,
    VALUE_CONVERTER,
    DeadLetter,
    ErrorReporter,
    render,
)

#: The source task that read a row of a tolerant source frame (null once a transform dropped it).
TASK_COLUMN = "__sluice_task"
TASK_TYPE = pa.int32()
#: The columns a tolerant JVM-path source frame carries beside the topic frame.
ERROR_FRAME = ("error", "error_stage", "error_class", "letter_key", "letter_value")
_ERROR_DDL = (
    "error string, error_stage string, error_class string, letter_key binary, letter_value binary"
)
_SIDES = (("key", KEY_CONVERTER), ("value", VALUE_CONVERTER))


# -- encoding that marks instead of failing ------------------------------------------------------
def encode_array_tolerating(encoder: Encoder, array: pa.Array) -> tuple[pa.Array, dict[int, str]]:
    """`encoder.arrow(array)`, with a null for each record it refuses: (bytes, {row: reason}).
    Linear: after a refusal, only the rows before it are encoded again."""
    parts: list[pa.Array] = []
    refused: dict[int, str] = {}
    start = 0
    while start < len(array):
        rest = array.slice(start)
        try:
            parts.append(encoder.arrow(rest))
            break
        except RecordError as exc:
            if exc.index:
                parts.append(encoder.arrow(rest.slice(0, exc.index)))
            parts.append(pa.nulls(1, pa.binary()))
            refused[start + exc.index] = exc.reason
            start += exc.index + 1
    if not parts:
        return pa.array([], pa.binary()), refused
    return pa.concat_arrays([p.cast(pa.binary()) for p in parts]), refused


def encode_frame_tolerating(
    df: DataFrame, codecs: SourceCodecs, keep: Sequence[str] = ()
) -> DataFrame:
    """Like `encode_frame`, plus the `ERROR_FRAME` columns (and the `keep` columns): a record a
    converter refuses keeps flowing with null key and value and its error set."""
    sides = {"key": codecs.key, "value": codecs.value}
    stages = dict(_SIDES)
    errors: list[tuple[Column, str, Encoder]] = []
    encoded: dict[str, Column] = {}
    for side, encoder in sides.items():
        if not encoder.has_sql:
            continue
        target = f"`{side}`"
        encoded[side] = F.expr(encoder.sql(target) or target)
        check = encoder.sql_error(target)
        if check is not None:
            errors.append((F.expr(check), side, encoder))
    error = F.lit(None).cast("string")
    stage = F.lit(None).cast("string")
    cls = F.lit(None).cast("string")
    for reason, side, encoder in reversed(errors):  # the key's error wins, as it is checked first
        failed = reason.isNotNull()
        message = F.concat(
            F.lit(f"{encoder.converter}: a record for topic "), F.col("topic"), F.lit(": "), reason
        )
        error = F.when(failed, message).otherwise(error)
        stage = F.when(failed, F.lit(stages[side])).otherwise(stage)
        cls = F.when(failed, F.lit(encoder.converter)).otherwise(cls)
    staged = df.select(
        "topic",
        "key",
        "value",
        "timestamp",
        F.to_json("headers").alias("headers"),
        "partition_hash",
        *keep,
        error.alias("error"),
        stage.alias("error_stage"),
        cls.alias("error_class"),
    )
    ok = F.col("error").isNull()
    out = staged.select(
        "topic",
        *[F.when(ok, encoded[c]).alias(c) if c in encoded else F.col(c) for c in ("key", "value")],
        "timestamp",
        "headers",
        "partition_hash",
        *keep,
        "error",
        "error_stage",
        "error_class",
        *[F.when(~ok, _render(staged, c)).alias(f"letter_{c}") for c in ("key", "value")],
    )
    arrow_sides = tuple(side for side, encoder in sides.items() if not encoder.has_sql)
    if not arrow_sides:
        return out
    kept = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema if f.name in keep)
    ddl = (
        "topic string, key binary, value binary, timestamp timestamp, headers string, "
        f"partition_hash int, {kept + ', ' if kept else ''}{_ERROR_DDL}"
    )
    return out.mapInArrow(_EncodeMarking(codecs, arrow_sides), StructType.fromDDL(ddl))


def _render(df: DataFrame, column: str) -> Column:
    """A key or value as the bytes a dead letter keeps: JSON text (bytes stay bytes)."""
    type_ = df.schema[column].dataType.typeName()
    if type_ == "binary":
        return F.col(column)
    if type_ in ("struct", "map", "array"):
        return F.to_json(column).cast("binary")
    # {"v":<json>} without its 5-character head and 1-character tail
    wrapped = F.to_json(F.struct(F.col(column).alias("v")))
    return wrapped.substr(F.lit(6), F.length(wrapped) - 6).cast("binary")


@dataclass(frozen=True)
class _EncodeMarking:
    """The `mapInArrow` step of `encode_frame_tolerating` for converters without a SQL form."""

    codecs: SourceCodecs
    sides: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.encode(batch)

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = {name: batch.column(name) for name in batch.schema.names}
        error = columns["error"].to_pylist()
        stage = columns["error_stage"].to_pylist()
        cls = columns["error_class"].to_pylist()
        letters = {c: columns[f"letter_{c}"].to_pylist() for c in ("key", "value")}
        topics = columns["topic"].to_pylist()
        originals = {c: columns[c] for c in self.sides}
        for side, stage_name in _SIDES:
            if side not in self.sides:
                continue
            encoder = self.codecs.key if side == "key" else self.codecs.value
            data, refused = encode_array_tolerating(encoder, originals[side])
            columns[side] = data
            for row, reason in refused.items():
                if error[row] is None:
                    error[row] = refusal(encoder, topics[row], reason)
                    stage[row], cls[row] = stage_name, encoder.converter
        failed = [e is not None for e in error]
        for side in ("key", "value"):
            original = originals.get(side)
            values = original.to_pylist() if original is not None else None
            for row in (i for i, bad in enumerate(failed) if bad):
                if letters[side][row] is None:
                    # the other side's bytes are already topic bytes; this side's get rendered
                    letters[side][row] = (
                        render(values[row]) if values is not None else columns[side][row].as_py()
                    )
            bad_rows = pa.array(failed, pa.bool_())
            columns[side] = pc.if_else(bad_rows, pa.scalar(None, pa.binary()), columns[side])
            columns[f"letter_{side}"] = pa.array(letters[side], pa.binary())
        columns["error"] = pa.array(error, pa.string())
        columns["error_stage"] = pa.array(stage, pa.string())
        columns["error_class"] = pa.array(cls, pa.string())
        return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


# -- the topic writer's side ---------------------------------------------------------------------
def route_dead_letters(
    batch: pa.RecordBatch, reporter: ErrorReporter, counters: Any, task_id: int
) -> Iterator[pa.RecordBatch]:
    """A tolerant source frame batch as topic-writer batches: its good rows, then the dead-letter
    topic rows of its dead letters (logged and counted here, once). A refused record's letter
    names the task in its `TASK_COLUMN`, or `task_id` where that is null or missing."""
    names = batch.schema.names
    good = pa.array([True] * batch.num_rows, pa.bool_())
    letters: list[pa.Array] = []
    if DEAD_LETTER_COLUMN in names:
        dead = batch.column(DEAD_LETTER_COLUMN)
        if dead.null_count < len(dead):
            letters.append(dead.filter(pc.is_valid(dead)))
            good = pc.and_(good, pc.is_null(dead))
    if "error" in names:
        error = batch.column("error")
        if error.null_count < len(error):
            refused = pc.is_valid(error)
            for task, bad in _by_task(batch.filter(refused), task_id):
                letters.append(reporter.letters(_refused(bad), task))
            good = pc.and_(good, pc.invert(refused))
    yield batch.filter(good).select(TOPIC_FRAME_SCHEMA.names)
    for array in letters:
        rows = reporter.deliver(array, counters)
        if rows is not None:
            yield rows


def _by_task(batch: pa.RecordBatch, fallback: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """`batch`'s rows grouped by the source task that read them (`TASK_COLUMN`; `fallback`
    where it is null or missing)."""
    if TASK_COLUMN not in batch.schema.names:
        yield fallback, batch
        return
    tasks = pc.fill_null(batch.column(TASK_COLUMN), pa.scalar(fallback, TASK_TYPE))
    for task in sorted(tasks.unique().to_pylist()):
        yield task, batch.filter(pc.equal(tasks, task))


def _refused(bad: pa.RecordBatch) -> list[DeadLetter]:
    out = []
    for row in bad.to_pylist():
        headers = json.loads(row["headers"]) if row["headers"] else {}
        out.append(
            DeadLetter(
                key=row["letter_key"],
                value=row["letter_value"],
                timestamp=row["timestamp"],
                headers={str(k): str(v) for k, v in headers.items()},
                topic=row["topic"] or "",
                partition="unknown",
                offset="unknown",
                stage=row["error_stage"],
                class_name=row["error_class"],
                exception_class="sluice.converters.RecordError",
                message=row["error"],
            )
        )
    return out


@dataclass(frozen=True)
class DeadLetterRouting:
    """Wraps a topic writer data source: `route_dead_letters` on every batch it is given.

    The dead letters name the source task that read the record (`TASK_COLUMN`). Where a
    transform dropped that column: a one-task source's are task 0 whatever Spark partition
    wrote them (its range may be cut over several); with more tasks (`tasks`), the Spark
    partition, the best the writer can tell."""

    reporter: ErrorReporter
    counters: Any = None
    tasks: int = 1

    def writer(self, source: type[DataSource]) -> type[DataSource]:
        routing = self

        def stream_writer(self: DataSource, schema: Any, overwrite: bool) -> _RoutingWriter:
            return _RoutingWriter(source.streamWriter(self, schema, overwrite), routing)

        return type(source.__name__, (source,), {"streamWriter": stream_writer})


class _RoutingWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner: Any, routing: DeadLetterRouting) -> None:
        self.inner = inner
        self.routing = routing

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        ctx = TaskContext.get()
        r = self.routing
        task_id = ctx.partitionId() if ctx and r.tasks > 1 else 0
        routed = (
            out
            for batch in iterator
            for out in route_dead_letters(batch, r.reporter, r.counters, task_id)
        )
        return self.inner.write(routed)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.abort(messages, batchId)
