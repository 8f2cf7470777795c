"""Runs any SDK source connector as a Spark streaming source (a Python data source).

Where things run: `latestOffset`, `partitions` and `commit` run in one long-lived Python process
beside the JVM driver; `read` runs on executors, one call per task per micro-batch. Nothing but the
pickled `SourcePlan` and the offsets travels between them.

The Spark offset of a replayable source is `{"p": {partition_key: RecordOffset}}`: the position of
every partition the connector owns. A poll-only source is staged: each `poll()` result is written to
an Arrow file numbered by a per-task sequence, and the offset is `{"s": {task: last_seq}}`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from sluice.engine.converters import (
    EncodeError,
    SourceCodecs,
    refusal,
    spark_frame_schema,
    with_shape,
)
from sluice.engine.direct import (
    RECEIPT_DDL,
    BatchConsumer,
    receipt_row,
    to_topic_frame,
    topic_frame_of,
)
from sluice.engine.errors import (
    DEAD_LETTER_COLUMN,
    DEAD_LETTER_DDL,
    DEAD_LETTER_TYPE,
    KEY_CONVERTER,
    TASK_POLL,
    TOPIC_FRAME_SCHEMA,
    VALUE_CONVERTER,
    DeadLetter,
    ErrorReporter,
    record_letter,
    required_nulls,
    row_letter,
)
from sluice.engine.frames import (
    partition_hash,
    records_to_batch,
    source_frame_ddl,
    source_frame_schema,
)
from sluice.engine.positions import PositionStore, StoreOffsetReader
from sluice.engine.retry import RetryPolicy, watched, watching_task
from sluice.engine.settings import ConnectorSettings
from sluice.engine.source_errors import TASK_COLUMN, TASK_TYPE, encode_array_tolerating
from sluice.sdk import (
    ConfigException,
    ConnectException,
    ConnectRecord,
    ReadLimit,
    RecordPartition,
    ReplayableSourceTask,
    Schema,
    SourceConnector,
    SourceTask,
    SourceTaskContext,
    partition_key,
)
from sluice.sdk.wakeup import IDLE_WAIT_S, FileWatch, wait_for_new

_RECORDS_PER_BATCH = 10_000


@dataclass(frozen=True)
class Shape:
    """One value schema of a source, and the partitions (keys) whose records have it; None: every
    partition (a connector with one value schema)."""

    value_schema: Schema
    partitions: frozenset[str] | None = None


@dataclass(frozen=True)
class SourcePlan:
    """Everything a source query needs, fixed when the connector starts; pickled to Spark."""

    name: str
    run: str
    task_class: type
    task_configs: tuple[dict[str, str], ...]
    key_schema: Schema
    #: The value schemas: one, or one per group of partitions (`SourceConnector.value_schemas`).
    shapes: tuple[Shape, ...]
    topic: str | None
    limit: ReadLimit
    staging_dir: str
    max_tasks: int = 1
    positions: PositionStore | None = field(default=None, compare=False)
    #: Fused pipeline: the topic writer the read tasks hand their records to (see engine.direct),
    #: and the encoders the tasks apply first, one per shape.
    direct: BatchConsumer | None = field(default=None, compare=False)
    codecs: tuple[SourceCodecs, ...] | None = field(default=None, compare=False)
    #: `errors.*`: with `errors.tolerance=all`, records that do not fit the schema (or do not
    #: encode) become dead letters (see `sluice.engine.errors`), counted in `counters`.
    errors: ErrorReporter | None = field(default=None, compare=False)
    counters: Any = field(default=None, compare=False)
    #: On the JVM path each shape is a branch of the query with its own Spark source (a frame has
    #: one type): the branch reads the partitions of `shapes[branch]` only (see `branches`).
    branch: int | None = None
    #: `errors.retry.*`: how long the driver retries a task's `latest`/`poll` that raised
    #: `RetriableException` (a server away for a while) before the query fails.
    retry: RetryPolicy = field(default_factory=RetryPolicy, compare=False)
    #: How long `latestOffset` waits for the tasks' `watch_paths` to change when nothing is new
    #: (see `sluice.sdk.wakeup.idle_wait`).
    idle_wait_s: float = IDLE_WAIT_S

    @property
    def tolerant(self) -> bool:
        return self.errors is not None and self.errors.policy.tolerate

    @property
    def replayable(self) -> bool:
        return issubclass(self.task_class, ReplayableSourceTask)

    @property
    def format_name(self) -> str:
        suffix = "" if self.branch is None else f"-shape{self.branch}"
        return f"sluice-source-{self.name}{suffix}"

    @property
    def value_schema(self) -> Schema:
        """The value schema of a one-shape plan (or of a branch)."""
        if self.branch is not None:
            return self.shapes[self.branch].value_schema
        if len(self.shapes) > 1:
            raise ValueError(f"source {self.name} has {len(self.shapes)} value schemas")
        return self.shapes[0].value_schema

    def shape_of(self, partition: RecordPartition) -> int:
        """The index of `partition`'s shape; `ConnectException` if no shape lists it."""
        if len(self.shapes) == 1 and self.shapes[0].partitions is None:
            return 0
        key = partition_key(partition)
        for index, shape in enumerate(self.shapes):
            if shape.partitions is None or key in shape.partitions:
                return index
        raise ConnectException(
            f"source {self.name}: partition {key} is not listed by the connector's "
            "value_schemas(), so its records have no schema"
        )

    def reads(self, partition: RecordPartition) -> bool:
        """True if this plan (or branch) reads `partition`."""
        shape = self.shape_of(partition)
        return self.branch is None or shape == self.branch

    def branches(self) -> list[SourcePlan]:
        """The plans of the JVM path's branches: one per shape (the plan itself if it has one)."""
        if len(self.shapes) == 1:
            return [self]
        return [replace(self, branch=i) for i in range(len(self.shapes))]


def plan_source(
    name: str,
    connector: SourceConnector,
    config: dict[str, str],
    settings: ConnectorSettings,
    *,
    run: str,
    staging_dir: str,
    positions: PositionStore | None,
    counters: Any = None,
    idle_wait_s: float = IDLE_WAIT_S,
) -> SourcePlan:
    """Validate and start `connector` (driver) and fix its plan; `settings` are `config`'s
    connector-level keys, parsed once (`sluice.engine.settings.parse_settings`)."""
    max_tasks = settings.max_tasks
    connector.validate(config)
    connector.start(config)
    task_configs = connector.task_configs(max_tasks)[:max_tasks]
    if not task_configs:
        raise ConfigException("max.tasks", f"connector {name!r} planned no tasks")
    default = connector.default_read_limit()
    limit = ReadLimit(
        max_rows=settings.read_max_rows or default.max_rows,
        max_bytes=settings.read_max_bytes or default.max_bytes,
    )
    return SourcePlan(
        name=name,
        run=run,
        task_class=connector.task_class,
        task_configs=tuple(dict(c) for c in task_configs),
        key_schema=connector.key_schema(),
        shapes=_shapes(name, connector, settings.writes),
        topic=settings.writes or None,
        limit=limit,
        staging_dir=staging_dir,
        max_tasks=max_tasks,
        positions=positions,
        errors=ErrorReporter(settings.errors, name),
        counters=counters,
        retry=settings.retry,
        idle_wait_s=idle_wait_s,
    )


def _retried(plan: SourcePlan, task: int, operation: Any, what: str) -> Any:
    """`operation()`'s result, retried on `RetriableException` as `plan.retry` says (driver),
    the retries noted for task `task`'s status."""
    with watching_task(plan.counters, plan.name, task):
        return plan.retry.run(operation, what)[0]


def _shapes(name: str, connector: SourceConnector, topic: str) -> tuple[Shape, ...]:
    """The connector's value schemas, partitions with equal schemas grouped into one shape."""
    listed = connector.value_schemas()
    if not listed:
        return (Shape(connector.value_schema()),)
    if not issubclass(connector.task_class, ReplayableSourceTask):
        raise ConnectException(
            f"source {name}: only a replayable source's partitions may differ in value schema "
            f"({connector.task_class.__name__} is poll-only)"
        )
    groups: dict[Schema, set[str]] = {}
    seen: dict[str, Schema] = {}
    for partition, schema in listed:
        key = partition_key(partition)
        if seen.setdefault(key, schema) != schema:
            raise ConnectException(f"source {name}: value_schemas() lists {key} twice")
        groups.setdefault(schema, set()).add(key)
    if topic and len(groups) > 1:
        raise ConfigException(
            "connect.topicname",
            f"names one topic, {topic!r}, for partitions of {len(groups)} different value "
            "schemas; a topic carries one",
            suggestion="give each its own topic (e.g. topic.prefix), or one connector per shape",
        )
    return tuple(Shape(schema, frozenset(keys)) for schema, keys in groups.items())


def source_data_source(plan: SourcePlan) -> type[DataSource]:
    """A DataSource class bound to `plan`, to register with `spark.dataSource.register`."""
    return type(
        f"SluiceSource_{abs(hash(plan.format_name))}",
        (_SourceDataSource,),
        {"plan": plan, "__module__": __name__},
    )


class _SourceDataSource(DataSource):
    plan: SourcePlan

    @classmethod
    def name(cls) -> str:
        return cls.plan.format_name

    def schema(self) -> str:
        if self.plan.direct is not None:
            return RECEIPT_DDL
        ddl = source_frame_ddl(self.plan.key_schema, self.plan.value_schema)
        if not self.plan.tolerant:
            return ddl
        return f"{ddl}, {TASK_COLUMN} int, {DEAD_LETTER_COLUMN} {DEAD_LETTER_DDL}"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        if self.plan.replayable:
            return _ReplayableReader(self.plan)
        return _PollingReader(self.plan)


def _new_task(plan: SourcePlan, index: int) -> Any:
    task = plan.task_class()
    task.context = SourceTaskContext(
        connector_name=plan.name,
        task_id=index,
        offset_storage_reader=StoreOffsetReader(plan.positions, plan.name),
    )
    task.start(plan.task_configs[index])
    return task


class _Frame:
    """Completes what a task yields into source-frame Arrow batches.

    With `errors.tolerance=all`, records that do not fit the schema become dead-letter rows
    (the `dead_letter` column; see `sluice.engine.errors`) of the same batches, and every row
    says which source task read it (`TASK_COLUMN`: what the JVM path's topic writer names in
    the dead letters of the records the converters refuse; the fused path drops it).
    """

    def __init__(self, plan: SourcePlan, task_id: int = 0, shape: int = 0) -> None:
        self.plan = plan
        self.task_id = task_id
        self.records = source_frame_schema(plan.key_schema, plan.shapes[shape].value_schema)
        self.logical = self.records
        if plan.tolerant:
            self.logical = self.records.append(pa.field(TASK_COLUMN, TASK_TYPE)).append(
                pa.field(DEAD_LETTER_COLUMN, DEAD_LETTER_TYPE)
            )
        # What Spark accepts for the DDL it was promised: Times travel as time64[ns].
        self.schema = spark_frame_schema(self.logical)

    def from_records(self, records: list[ConnectRecord]) -> pa.RecordBatch:
        now = datetime.now(UTC)
        for r in records:
            if r.timestamp is None:
                r.timestamp = now
        try:
            batch = self._batch(records)
        except ValueError:
            if not self.plan.tolerant:
                raise
            batch = self._tolerating(records)
        return batch if self.schema == self.logical else batch.cast(self.schema)

    def _batch(self, records: list[ConnectRecord]) -> pa.RecordBatch:
        batch = records_to_batch(records, self.records, self.plan.topic)
        for path, mask in required_nulls(batch):
            if mask.true_count:
                first = pc.index(mask, True).as_py()
                raise ValueError(
                    f"record {first} of the batch: field {path!r} is null, but its schema is "
                    "not optional"
                )
        if self.plan.tolerant:
            batch = batch.append_column(
                pa.field(TASK_COLUMN, TASK_TYPE), self._task_ids(batch.num_rows)
            ).append_column(
                pa.field(DEAD_LETTER_COLUMN, DEAD_LETTER_TYPE),
                pa.nulls(batch.num_rows, DEAD_LETTER_TYPE),
            )
        return batch

    def _task_ids(self, n: int) -> pa.Array:
        return pa.repeat(pa.scalar(self.task_id, TASK_TYPE), n)

    def _tolerating(self, records: list[ConnectRecord]) -> pa.RecordBatch:
        """The records that fit the schema, then a dead-letter row for each that does not."""
        good, letters = [], []
        for record in records:
            try:
                self._batch([record])
                good.append(record)
            except ValueError as exc:
                task = f"{self.plan.task_class.__module__}.{self.plan.task_class.__qualname__}"
                letters.append(record_letter(record, self.plan.topic, exc, task))
        parts = [self._batch(good)]
        dead = self.dead_letters(letters)
        if dead is not None:
            parts.append(dead)
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]

    def dead_letters(self, letters: list[DeadLetter]) -> pa.RecordBatch | None:
        """Frame rows carrying `letters` in the dead-letter column (None if there are none)."""
        if not letters or self.plan.errors is None:
            return None
        letter = self.plan.errors.letters(letters, self.task_id)
        n = len(letter)
        columns = {DEAD_LETTER_COLUMN: letter, TASK_COLUMN: self._task_ids(n)}
        return pa.RecordBatch.from_arrays(
            [columns.get(f.name, pa.nulls(n, f.type)) for f in self.logical], schema=self.logical
        )

    def complete(self, batch: pa.RecordBatch, partition: RecordPartition | None) -> pa.RecordBatch:
        """A batch the task built itself, completed to the frame (its records checked)."""
        letters: list[DeadLetter] = []
        for path, mask in required_nulls(batch):
            if not mask.true_count:
                continue
            first = pc.index(mask, True).as_py()
            exc = ConnectException(
                f"record {first} of a batch from partition {partition}: field {path!r} is null, "
                "but its schema is not optional"
            )
            if not self.plan.tolerant:
                raise exc
            task = f"{self.plan.task_class.__module__}.{self.plan.task_class.__qualname__}"
            letters += [row_letter(r, exc, TASK_POLL, task) for r in batch.filter(mask).to_pylist()]
            batch = batch.filter(pc.invert(mask))
        out = self._complete(batch, partition)
        dead = self.dead_letters(letters)
        if dead is None:
            return out
        return pa.Table.from_batches([out, dead.cast(self.schema)]).combine_chunks().to_batches()[0]

    def _complete(self, batch: pa.RecordBatch, partition: RecordPartition | None) -> pa.RecordBatch:
        n = batch.num_rows
        names = batch.schema.names
        columns = []
        for f in self.schema:
            if f.name in names:
                col = batch.column(f.name)
                columns.append(col if col.type == f.type else col.cast(f.type))
            elif f.name == "topic":
                columns.append(pa.repeat(pa.scalar(self.plan.topic, pa.string()), n))
            elif f.name == "timestamp":
                columns.append(pa.repeat(pa.scalar(datetime.now(UTC), f.type), n))
            elif f.name == "partition_hash":
                columns.append(pa.repeat(pa.scalar(partition_hash(partition), pa.int32()), n))
            elif f.name == TASK_COLUMN:
                columns.append(self._task_ids(n))
            else:
                columns.append(pa.nulls(n, f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def batches(self, items: Any, partition: RecordPartition | None) -> Iterator[pa.RecordBatch]:
        pending: list[ConnectRecord] = []
        for item in items:
            if isinstance(item, pa.RecordBatch):
                if pending:
                    yield self.from_records(pending)
                    pending = []
                yield self.complete(item, partition)
            else:
                if item.partition is None:
                    item.partition = partition
                pending.append(item)
                if len(pending) >= _RECORDS_PER_BATCH:
                    yield self.from_records(pending)
                    pending = []
        if pending:
            yield self.from_records(pending)


#: Schema metadata of the topic frames of a Spark partition that continues the source range of
#: the partition before it (same literal as `sluice.bus.spark.FOLLOWS_KEY`, which reads it: a
#: topic writer sending from the executors makes this task's records follow that one's).
FOLLOWS_KEY = b"sluice.follows"


def _emit(
    plan: SourcePlan,
    batches: Iterator[tuple[int, pa.RecordBatch]],
    task_id: int,
    *,
    follows: bool = False,
) -> Iterator[pa.RecordBatch]:
    """What a read task outputs: its batches (each with the index of its shape), or — fused —
    the topic writer's receipt for them. `task_id` is the source task that read them (what
    dead letters name: one task's range may be cut over several Spark partitions); `follows`:
    this partition continues the source range of the one before it (its frames say so)."""
    if plan.direct is None:
        yield from (batch for _, batch in batches)
        return
    ctx = TaskContext.get()
    pid = ctx.partitionId() if ctx else 0
    codecs = plan.codecs
    if codecs is None:
        raise ConnectException(f"source {plan.name}: a fused plan needs its encoders")
    frames = [_Frame(plan, task_id, i) for i in range(len(plan.shapes))] if plan.tolerant else []
    # Several shapes: each topic frame says which, for SchemaRegistration to register its schemas.
    tagged = len(plan.shapes) > 1 and any(c.registered for c in codecs)

    def topic_frames(shape: int, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if plan.tolerant:
            out = _tolerant_topic_frames(batch, codecs[shape], frames[shape], plan)
        else:
            out = iter([to_topic_frame(batch, codecs[shape])])
        for frame in out:
            if follows:
                frame = frame.replace_schema_metadata({FOLLOWS_KEY: b"1"})
            yield with_shape(frame, shape) if tagged else frame

    encoded: Iterator[pa.RecordBatch] = (
        f for shape, batch in batches for f in topic_frames(shape, batch)
    )
    if follows:  # said first, so that even a partition without records says it
        marker = pa.RecordBatch.from_pylist([], schema=TOPIC_FRAME_SCHEMA)
        encoded = itertools.chain([marker.replace_schema_metadata({FOLLOWS_KEY: b"1"})], encoded)
    yield receipt_row(pid, plan.direct.write(encoded, pid))


def _tolerant_topic_frames(
    batch: pa.RecordBatch, codecs: SourceCodecs, frame: _Frame, plan: SourcePlan
) -> Iterator[pa.RecordBatch]:
    """`errors.tolerance=all`: the topic frame of a batch's good records, then the dead-letter
    topic rows of its dead letters and of the records the converters cannot encode."""
    if DEAD_LETTER_COLUMN in batch.schema.names:
        dead = batch.column(DEAD_LETTER_COLUMN)
        if dead.null_count < len(dead):
            yield from _deliver(batch.filter(pc.is_valid(dead)).column(DEAD_LETTER_COLUMN), plan)
            batch = batch.filter(pc.is_null(dead))
    # the fused path knows its task (`frame.task_id`): the JVM path's column is not needed
    batch = batch.drop_columns(
        [c for c in (TASK_COLUMN, DEAD_LETTER_COLUMN) if c in batch.schema.names]
    )
    if not batch.num_rows:
        return
    encoded, refused = {}, {}
    for side, stage in (("value", VALUE_CONVERTER), ("key", KEY_CONVERTER)):  # the key's wins
        encoder = codecs.key if side == "key" else codecs.value
        encoded[side], reasons = encode_array_tolerating(encoder, batch.column(side))
        for row, reason in reasons.items():
            refused[row] = (side, stage, encoder, reason)
    if not refused:
        yield topic_frame_of(batch, encoded["key"], encoded["value"])
        return
    keep = np.ones(batch.num_rows, bool)
    keep[list(refused)] = False
    good = pa.array(keep)
    yield topic_frame_of(
        batch.filter(good), encoded["key"].filter(good), encoded["value"].filter(good)
    )
    topics = batch.column("topic")
    letters = []
    for row, (side, stage, encoder, reason) in sorted(refused.items()):
        exc = EncodeError(
            refusal(encoder, topics[row].as_py(), reason),
            index=row,
            side=side,
            converter=encoder.converter,
        )
        letters.append(row_letter(batch.slice(row, 1).to_pylist()[0], exc, stage, exc.converter))
    rows = frame.dead_letters(letters)
    if rows is not None:
        yield from _deliver(rows.column(DEAD_LETTER_COLUMN), plan)


def _deliver(letters: pa.Array, plan: SourcePlan) -> Iterator[pa.RecordBatch]:
    rows = plan.errors.deliver(letters, plan.counters) if plan.errors else None
    if rows is not None:
        yield rows


def _spark_limit(limit: Any, default: ReadLimit) -> ReadLimit:
    if isinstance(limit, ReadMaxRows):
        return ReadLimit(max_rows=limit.max_rows)
    if isinstance(limit, ReadMaxBytes):
        return ReadLimit(max_bytes=limit.max_bytes)
    if isinstance(limit, ReadAllAvailable):
        return ReadLimit()
    return default


class _ReplayableReader(DataSourceStreamReader):
    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._tasks: list[ReplayableSourceTask] | None = None
        self._initial: dict | None = None
        self._files: FileWatch | None = None

    def _all_tasks(self) -> list[ReplayableSourceTask]:
        if self._tasks is None:
            self._tasks = [_new_task(self.plan, i) for i in range(len(self.plan.task_configs))]
        return self._tasks

    def _owned(self, task: ReplayableSourceTask) -> list[RecordPartition]:
        """The task's partitions that this plan (or branch) reads."""
        return [p for p in task.partitions() if self.plan.reads(p)]

    def initialOffset(self) -> dict:
        # Spark asks again when it plans batch 0: answer the same both times.
        if self._initial is None:
            stored = self.plan.positions.load(self.plan.name) if self.plan.positions else {}
            owned = {partition_key(p) for t in self._all_tasks() for p in self._owned(t)}
            self._initial = {"p": {k: v for k, v in stored.items() if k in owned}}
        return self._initial

    def getDefaultReadLimit(self) -> Any:
        if self.plan.limit.max_rows is not None:
            return ReadMaxRows(self.plan.limit.max_rows)
        if self.plan.limit.max_bytes is not None:
            return ReadMaxBytes(self.plan.limit.max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return wait_for_new(
            self._watch(), start, lambda: self._latest(start, limit), self.plan.idle_wait_s
        )

    def _watch(self) -> FileWatch | None:
        if self._files is None:
            paths = [p for t in self._all_tasks() for p in t.watch_paths()]
            self._files = FileWatch(paths) if paths else None
        return self._files

    def _latest(self, start: dict, limit: Any) -> dict:
        budget = _spark_limit(limit, self.plan.limit)
        begin = start.get("p", {})
        end: dict[str, Any] = {}
        for index, task in enumerate(self._all_tasks()):
            for partition in self._owned(task):
                key = partition_key(partition)
                offset = _retried(
                    self.plan,
                    index,
                    lambda t=task, p=partition, k=key: t.latest(p, begin.get(k), budget),
                    f"latest position of {key} of {self.plan.name}",
                )
                if offset is not None:
                    end[key] = offset
        return {"p": end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = start.get("p", {}), end.get("p", {})
        planned: list[tuple[int, list[tuple[RecordPartition, Any, Any]]]] = []
        for index, task in enumerate(self._all_tasks()):
            ranges = []
            for partition in self._owned(task):
                key = partition_key(partition)
                if key in stop and stop[key] != begin.get(key):
                    ranges.append((partition, begin.get(key), stop[key]))
            if ranges:
                planned.append((index, ranges))
        count = sum(len(ranges) for _, ranges in planned)
        if count == 0 or count >= self.plan.max_tasks:
            return [InputPartition((index, ranges, False)) for index, ranges in planned]
        # Fewer ranges than max.tasks allows: cut ranges so idle cores can read them in parallel.
        # Sub-ranges stay in order: the staged topic writer commits in Spark partition order,
        # and a sub-range after the first is marked as following the partition before it (the
        # topic writer that sends from the executors waits for that one, see `_emit`).
        parts = self.plan.max_tasks // count
        out = []
        tasks = self._all_tasks()
        for index, ranges in planned:
            for partition, first, last in ranges:
                cuts = tasks[index].split(partition, first, last, parts)[: parts - 1]
                bounds = [first, *cuts, last]
                for n, (lo, hi) in enumerate(itertools.pairwise(bounds)):
                    out.append(InputPartition((index, [(partition, lo, hi)], n > 0)))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        index, ranges, follows = partition.value
        task = _new_task(self.plan, index)
        frames: dict[int, _Frame] = {}

        def batches() -> Iterator[tuple[int, pa.RecordBatch]]:
            for part, begin, stop in ranges:
                shape = self.plan.shape_of(part)
                if shape not in frames:
                    frames[shape] = _Frame(self.plan, index, shape)
                for batch in frames[shape].batches(task.read(part, begin, stop), part):
                    yield shape, batch

        try:
            emitted = _emit(self.plan, batches(), index, follows=follows)
            yield from watched(self.plan.counters, self.plan.name, index, emitted)
        finally:
            task.stop()

    def commit(self, end: dict) -> None:
        stop = end.get("p") or {}
        if self.plan.positions is not None and stop:
            self.plan.positions.save(self.plan.name, stop)
        # After the positions are stored: a task may now release what it retained for replays.
        # Its reader is refreshed, so it sees what every branch of the query stored.
        for task in self._all_tasks():
            task.context.offset_storage_reader = StoreOffsetReader(
                self.plan.positions, self.plan.name
            )
            done = [(p, stop[k]) for p in self._owned(task) if (k := partition_key(p)) in stop]
            if done:
                task.commit(done)

    def stop(self) -> None:
        if self._files is not None:
            self._files.close()
        for task in self._tasks or []:
            with contextlib.suppress(Exception):
                task.stop()


#: A poll-only source's reader polls on its own when Spark has not asked for this long (its next
#: micro-batch waits for a core held by sinks retrying, or a sink is slow): the tasks' `poll`
#: still runs, so an outage shows in their status. What such a poll returns is kept in memory
#: and staged at Spark's next call: a crash loses nothing unacknowledged, and replays no more.
POLL_AHEAD_AFTER_S = 10.0
#: At most this many polls are kept ahead of Spark's next call, per task.
POLL_AHEAD_MAX = 2
#: How long stopping waits for a poll under way.
POLL_STOP_WAIT_S = 10.0


class _Closed(Exception):
    """The reader stopped while its poll-ahead thread was retrying."""


class _PollingReader(DataSourceStreamReader):
    """Poll-only sources: poll on the driver, stage durably, replay from the staged files.

    Spark polls through `latestOffset`; between its calls a thread polls too when Spark has not
    asked for `POLL_AHEAD_AFTER_S` (see there). One lock keeps a task's `poll`, `commit` and
    `stop` on one thread at a time: a client such as pika's is not thread-safe."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._tasks: list[SourceTask] | None = None
        self._unacked: dict[tuple[int, int], list[ConnectRecord] | pa.RecordBatch] = {}
        self._initial: dict | None = None
        self._frame = _Frame(plan)
        self._driver_state()

    def _driver_state(self) -> None:
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._asked = time.monotonic()
        self._polled: dict[int, list[list[ConnectRecord] | pa.RecordBatch]] = {}
        self._failure: BaseException | None = None
        self._ahead: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        # what `read` needs on an executor: the plan; the tasks and the thread stay on the driver
        return {"plan": self.plan, "_frame": self._frame}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._tasks, self._unacked, self._initial = None, {}, None
        self._driver_state()

    def _dir(self, index: int) -> str:
        path = os.path.join(self.plan.staging_dir, str(index))
        os.makedirs(path, exist_ok=True)
        return path

    def _seqs(self, index: int) -> list[int]:
        return sorted(int(n[:-6]) for n in os.listdir(self._dir(index)) if n.endswith(".arrow"))

    def _all_tasks(self) -> list[SourceTask]:
        with self._lock:
            if self._tasks is None:
                tasks = [_new_task(self.plan, i) for i in range(len(self.plan.task_configs))]
                self._next = {i: (self._seqs(i) or [0])[-1] for i in range(len(tasks))}
                self._tasks = tasks
            return self._tasks

    def initialOffset(self) -> dict:
        # Spark asks again when it plans batch 0, after polls have advanced `_next`: fix it once.
        if self._initial is None:
            self._all_tasks()
            self._initial = {"s": {str(i): seq for i, seq in self._next.items()}}
        return self._initial

    def latestOffset(self, start: dict, limit: Any) -> dict:
        # nothing wakes a poll: after one that found nothing, wait_for_new pauses before answering
        begun = start.get("s", {})
        return {"s": wait_for_new(None, begun, lambda: self._staged(begun), self.plan.idle_wait_s)}

    def _staged(self, begun: dict) -> dict:
        """Stage what the tasks polled (ahead of Spark, and now); the end of all that is staged."""
        end = dict(begun)
        with self._lock:
            failure, self._failure = self._failure, None
            if failure is not None:  # the poll-ahead thread's: as if this call had met it
                raise failure
            for index, task in enumerate(self._all_tasks()):
                for records in self._polled.pop(index, []):  # polled ahead, in their order
                    self._stage(index, records)
                self._stage(index, self._poll(index, task))
            for index, seq in self._next.items():
                # everything staged so far, whether or not this call polled anything: idempotent
                if seq > int(end.get(str(index), 0)):
                    end[str(index)] = seq
            self._asked = time.monotonic()
        if self._ahead is None:
            self._ahead = threading.Thread(
                target=self._poll_ahead, daemon=True, name=f"sluice-poll-ahead-{self.plan.name}"
            )
            self._ahead.start()
        return end

    def _poll(self, index: int, task: SourceTask, ahead: bool = False) -> Any:
        """Task `index`'s `poll`, retried as `errors.retry.*` says, its retries in its status;
        `ahead` (the poll-ahead thread): its waits end when the reader stops."""
        what = f"poll of task {index} of {self.plan.name}"
        if not ahead:
            return _retried(self.plan, index, task.poll, what)

        def poll() -> Any:
            if self._closed.is_set():
                raise _Closed(what)
            return task.poll()

        with watching_task(self.plan.counters, self.plan.name, index):
            return self.plan.retry.run(poll, what, sleep=self._closed.wait)[0]

    def _stage(self, index: int, records: list[ConnectRecord] | pa.RecordBatch) -> None:
        """Stage what task `index` polled as its next file (durably), unacknowledged."""
        if not len(records):
            return
        seq = self._next[index] + 1
        self._frame.task_id = index
        if isinstance(records, pa.RecordBatch):  # one partition: the task's
            batch = self._frame.complete(records, {"task": index})
        else:
            batch = self._frame.from_records(records)
        path = os.path.join(self._dir(index), f"{seq:012d}.arrow")
        tmp = path + ".tmp"
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._next[index] = seq
        self._unacked[(index, seq)] = records

    def _poll_ahead(self) -> None:
        while not self._closed.wait(POLL_AHEAD_AFTER_S / 4):
            with self._lock:
                if self._failure is not None or self._closed.is_set():
                    continue
                if time.monotonic() - self._asked < POLL_AHEAD_AFTER_S:
                    continue
                for index, task in enumerate(self._all_tasks()):
                    kept = self._polled.setdefault(index, [])
                    if len(kept) >= POLL_AHEAD_MAX:
                        continue
                    try:
                        records = self._poll(index, task, ahead=True)
                        if len(records):
                            kept.append(records)
                    except _Closed:
                        return
                    except Exception as exc:
                        self._failure = exc  # for Spark's next call, where it fails the query
                        break

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = start.get("s", {}), end.get("s", {})
        return [
            InputPartition((int(i), int(begin.get(i, 0)), int(seq)))
            for i, seq in sorted(stop.items())
            if int(seq) > int(begin.get(i, 0))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        index, first, last = partition.value
        folder = os.path.join(self.plan.staging_dir, str(index))

        def batches() -> Iterator[pa.RecordBatch]:
            for seq in range(first + 1, last + 1):
                with pa.memory_map(os.path.join(folder, f"{seq:012d}.arrow")) as source:
                    reader = pa.ipc.open_file(source)
                    for i in range(reader.num_record_batches):
                        yield reader.get_batch(i)

        emitted = _emit(self.plan, ((0, batch) for batch in batches()), index)
        yield from watched(self.plan.counters, self.plan.name, index, emitted)

    def commit(self, end: dict) -> None:
        tasks = self._all_tasks()
        for i, seq in end.get("s", {}).items():
            index, last = int(i), int(seq)
            with self._lock:
                for key in sorted(k for k in self._unacked if k[0] == index and k[1] <= last):
                    tasks[index].commit(self._unacked.pop(key))
            for old in self._seqs(index):
                if old <= last:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(self._dir(index), f"{old:012d}.arrow"))
        if self.plan.positions is not None:
            staged = {partition_key({"task": k}): {"seq": v} for k, v in end.get("s", {}).items()}
            self.plan.positions.save(self.plan.name, staged)

    def stop(self) -> None:
        self._closed.set()  # the poll-ahead thread ends at its next wait or attempt
        # a poll under way ends first (a client may not be thread-safe); one stuck past this
        # bound does not keep the query from stopping
        locked = self._lock.acquire(timeout=POLL_STOP_WAIT_S)
        try:
            for task in self._tasks or []:
                with contextlib.suppress(Exception):
                    task.stop()
        finally:
            if locked:
                self._lock.release()
