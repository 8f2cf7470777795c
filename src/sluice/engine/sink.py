"""Runs any SDK sink connector as a Spark streaming sink (a Python Arrow data source writer).

`write` runs on executors, one call per Spark partition (= sink task) per micro-batch, and returns
the task's `flush` result; `commit` runs once per micro-batch in a Python process beside the driver
and hands all results to `SinkConnector.commit` with the `BatchId`. Task requests made through the
`SinkTaskContext` (pause, resume, reset_offset) travel back with the commit message and are handed
to the `control` callback, which feeds them to the topic reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from sluice.converters import SchemaRegistry
from sluice.engine.converters import (
    SinkCodecs,
    check_errors,
    plan_decoders,
    sluice_frame,
    uses_registry,
)
from sluice.engine.counting import BATCHES_TOTAL, RECORDS_TOTAL
from sluice.engine.direct import BatchConsumer, from_topic_frames, receipt_row
from sluice.engine.errors import (
    TOPIC_FRAME_SCHEMA,
    DeadLetter,
    ErrorPolicy,
    ErrorReporter,
    sink_dead_letters,
    split_errors,
    task_letter,
)
from sluice.engine.retry import RetryPolicy, RetryStore, watching_task
from sluice.engine.settings import ConnectorSettings
from sluice.engine.transforms import route_topics
from sluice.sdk import (
    TIMESTAMP_TYPE,
    BatchId,
    ConfigException,
    ConnectException,
    ProduceRequest,
    RestartRequested,
    SinkConnector,
    SinkTaskContext,
)


@dataclass(frozen=True)
class SinkPlan:
    """Everything a sink query needs, fixed when the connector starts; pickled to Spark."""

    name: str
    run: str
    connector_class: type[SinkConnector]
    config: dict[str, str]
    task_configs: tuple[dict[str, str], ...]
    control: Callable[[list[dict[str, Any]]], None] | None = field(default=None, compare=False)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    counters: Counters | None = field(default=None, compare=False)
    #: The key/value decoders, with the schemas registered for the topics when the sink started.
    codecs: SinkCodecs | None = field(default=None, compare=False)
    #: `errors.*` (tolerance, log, dead-letter queue) and the dead-letter topic's writer.
    errors: ErrorReporter | None = field(default=None, compare=False)
    dlq: BatchConsumer | None = field(default=None, compare=False)
    #: Writes the connector's own topics (`SinkConnector.owned_topics`, `SinkTaskContext.produce`).
    owned: BatchConsumer | None = field(default=None, compare=False)
    #: Distributed mode: the lease fence, checked before the sink's commit so a worker that lost
    #: the connector's lease never commits another batch (see `sluice.store.positions`).
    fence: LeaseFence | None = field(default=None, compare=False)
    #: The topics and the registry the decoders were planned from: a fused sink plans them again
    #: at each micro-batch (see `SinkRunner.codecs`), so it decodes with the newest versions.
    topics: tuple[str, ...] = ()
    registry: SchemaRegistry | None = field(default=None, compare=False)
    #: The worker's push board, handed to each task in its context (`SinkTaskContext`).
    push_board_path: str = ""
    #: A fused sink's transforms when they touch only the topic (`topic_routes`): each topic's
    #: new name, or None where its records are dropped.
    routes: Mapping[str, str | None] | None = None

    @property
    def format_name(self) -> str:
        return f"sluice-sink-{self.name}"


class LeaseFence(Protocol):
    """Raises if the connector's lease moved to another worker (must pickle)."""

    def check(self, connector: str, what: str = "a batch") -> None: ...


class Counters(RetryStore, Protocol):
    """Where a sink's error counts go when a micro-batch commits, and its tasks' retry notes.
    Must pickle."""

    def add(self, connector: str, increments: dict[str, int]) -> None: ...


def plan_sink(
    name: str,
    connector: SinkConnector,
    config: dict[str, str],
    settings: ConnectorSettings,
    *,
    run: str,
    control: Callable[[list[dict[str, Any]]], None] | None = None,
    counters: Counters | None = None,
    topics: tuple[str, ...] = (),
    registry: SchemaRegistry | None = None,
    dlq: BatchConsumer | None = None,
    owned: BatchConsumer | None = None,
) -> SinkPlan:
    """Validate and start `connector` (driver) and fix its plan, with the decoders of `topics`
    (their schemas looked up in `registry`); `dlq` writes the dead-letter topic, if one is set.
    `settings` are `config`'s connector-level keys, parsed once (`parse_settings`)."""
    max_tasks = settings.max_tasks
    errors = ErrorReporter(settings.errors, name)
    connector.validate(config)
    connector.start(config)
    task_configs = tuple(dict(c) for c in connector.task_configs(max_tasks)[:max_tasks])
    if not task_configs:
        raise ConfigException("max.tasks", f"connector {name!r} planned no tasks")
    codecs = plan_decoders(config, topics, registry)
    if not uses_registry(config):
        registry = None  # nothing to plan again at each micro-batch
    return SinkPlan(
        name,
        run,
        type(connector),
        dict(config),
        task_configs,
        control,
        settings.retry,
        counters,
        codecs,
        errors,
        dlq if errors.policy.dlq_topic else None,
        owned,
        topics=tuple(topics),
        registry=registry,
    )


def sink_data_source(plan: SinkPlan) -> type[DataSource]:
    """A DataSource class bound to `plan`, to register with `spark.dataSource.register`."""
    return type(
        f"SluiceSink_{abs(hash(plan.format_name))}",
        (_SinkDataSource,),
        {"plan": plan, "__module__": __name__},
    )


class _SinkDataSource(DataSource):
    plan: SinkPlan

    @classmethod
    def name(cls) -> str:
        return cls.plan.format_name

    def streamWriter(self, schema: Any, overwrite: bool) -> _SinkWriter:
        return _SinkWriter(self.plan)


@dataclass
class _TaskResult(WriterCommitMessage):
    task_id: int
    payload: Any
    requests: list[dict[str, Any]]
    retries: int = 0
    #: Records tolerated (`errors.tolerance=all`), and the dead-letter writer's receipt for them.
    errors: int = 0
    dead_letters: Any = None
    #: The topic writer's receipt for what the task wrote to the connector's own topics.
    produced: Any = None
    #: Records the task read (tolerated ones included): `sink-record-read-total` in /metrics.
    records: int = 0


@dataclass(frozen=True)
class SinkRunner:
    """Runs a sink task over one Spark partition's batches and commits micro-batches (picklable).

    Used by the Spark stream writer below, and directly by a fused topic reader (engine.direct):
    called with the batches a task read, it yields the task's receipt row.
    """

    plan: SinkPlan

    def write(self, batches: Iterator[pa.RecordBatch], partition_id: int) -> _TaskResult:
        ctx = TaskContext.get()
        number = int(ctx.getLocalProperty("streaming.sql.batchId") or -1) if ctx else -1
        batch_id = BatchId(self.plan.run, number)
        task = self.plan.connector_class.task_class()
        # A queue may span several Spark partitions (split_queues): the task a partition runs,
        # and the id the status, the log and the dead letters show, is partition mod tasks.
        task_id = partition_id % len(self.plan.task_configs)
        task.context = SinkTaskContext(
            connector_name=self.plan.name,
            task_id=task_id,
            batch_id=batch_id,
            push_board_path=self.plan.push_board_path,
        )
        task.start(self.plan.task_configs[task_id])
        what = f"sink task {task_id} of {self.plan.name}"
        retries = 0
        records = 0
        tolerated: list[pa.RecordBatch] = []
        # Every retry loop in here (errors.retry.*, the task's own) notes the task's status.
        with watching_task(self.plan.counters, self.plan.name, task_id):
            try:
                for decoded in batches:
                    records += decoded.num_rows
                    batch = self._without_errors(sluice_frame(decoded), tolerated)
                    if self.plan.routes is not None:
                        batch = route_topics(batch, self.plan.routes)
                    if batch.num_rows:
                        _note_assignment(task.context, batch)
                        retries += self.plan.retry.call(lambda b=batch: task.put_batch(b), what)
                # A RetriableException from flush is retried like one from put (errors.retry.*).
                payload, flush_retries = self.plan.retry.run(lambda: task.flush(batch_id), what)
                retries += flush_retries
            finally:
                task.stop()
        c = task.context
        given_up = [task_letter(r, _class_name(type(task))) for r in c.dead_letters]
        if given_up and (self.plan.errors is None or not self.plan.errors.policy.tolerate):
            first = given_up[0]
            raise ConnectException(
                f"{what} gave up on {len(given_up)} record(s), first {{topic='{first.topic}', "
                f"queue={first.partition}, offset={first.offset}}}: {first.message}",
                suggestion="set errors.tolerance=all (and errors.deadletterqueue.topic.name) "
                "to dead-letter such records instead of failing",
            )
        errors, dead_letters = self._report(tolerated, partition_id, given_up, task_id)
        produced = self._produce(c.produced, partition_id)
        requests = (
            [{"op": "reset", "partition": p, "offset": o} for p, o in c.offset_resets]
            + [{"op": "pause", "partition": p} for p in c.paused]
            + [{"op": "resume", "partition": p} for p in c.resumed]
        )
        return _TaskResult(
            partition_id, payload, requests, retries, errors, dead_letters, produced, records
        )

    def _produce(self, requests: list[ProduceRequest], partition_id: int) -> Any:
        """Stage what the task wrote to the connector's own topics: the writer's receipt."""
        if not requests:
            return None
        if self.plan.owned is None:
            raise ConnectException(
                f"sink task {partition_id} of {self.plan.name} produced to "
                f"{requests[0].topic!r}, which its connector does not own (owned_topics)"
            )
        n = len(requests)
        rows = pa.RecordBatch.from_arrays(
            [
                pa.array([r.topic for r in requests], pa.string()),
                pa.array([r.key for r in requests], pa.binary()),
                pa.array([r.value for r in requests], pa.binary()),
                pa.array([datetime.now(UTC)] * n, TIMESTAMP_TYPE),
                pa.array([_headers_json(r.headers) for r in requests], pa.string()),
                pa.nulls(n, pa.int32()),
            ],
            schema=TOPIC_FRAME_SCHEMA,
        )
        return self.plan.owned.write(iter([rows]), partition_id)

    def _without_errors(
        self, decoded: pa.RecordBatch, tolerated: list[pa.RecordBatch]
    ) -> pa.RecordBatch:
        """The records of `decoded` that converted; the others fail the task
        (`errors.tolerance=none`) or are kept in `tolerated`."""
        if self.plan.errors is None or not self.plan.errors.policy.tolerate:
            return check_errors(decoded)
        good, bad = split_errors(decoded)
        if bad is not None:
            tolerated.append(bad)
        return good

    def _report(
        self,
        tolerated: list[pa.RecordBatch],
        partition_id: int,
        given_up: list[DeadLetter] = (),  # type: ignore[assignment]
        task_id: int | None = None,
    ) -> tuple[int, Any]:
        """Log the tolerated records (and those the task gave up on) and stage their dead
        letters: (count, writer receipt)."""
        if (not tolerated and not given_up) or self.plan.errors is None:
            return 0, None
        codecs = self.plan.codecs
        classes = {
            "key": codecs.key.converter if codecs else "",
            "value": codecs.value.converter if codecs else "",
        }
        letters = [x for bad in tolerated for x in sink_dead_letters(bad, classes)]
        letters += given_up
        # Counted when the micro-batch commits (see `commit`), not here: a replay would count twice.
        task = partition_id % len(self.plan.task_configs) if task_id is None else task_id
        rows = self.plan.errors.deliver(self.plan.errors.letters(letters, task))
        if rows is None or self.plan.dlq is None:
            return len(letters), None
        try:
            return len(letters), self.plan.dlq.write(iter([rows]), partition_id)
        except Exception:
            self._count({"deadletterqueue-produce-failures": 1})
            raise

    def _count(self, increments: dict[str, int]) -> None:
        if self.plan.counters is not None:
            self.plan.counters.add(self.plan.name, increments)

    def codecs(self) -> SinkCodecs:
        """The decoders of this micro-batch (fused sinks; executor, once per task and batch).

        Planned again from the registry's latest versions of the topics' schemas, so a new
        version registered by a source is picked up at the next micro-batch, not at a restart:
        each record is read with the schema it was written with (its id) and projected onto
        the newest one (Avro's resolution rules). Cheap: one registry lookup per topic and role.
        """
        if self.plan.registry is None or self.plan.codecs is None:
            return self.plan.codecs or plan_decoders(self.plan.config, (), None)
        return plan_decoders(self.plan.config, self.plan.topics, self.plan.registry)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx else 0
        codecs = self.codecs()
        frames = (f for b in batches for f in from_topic_frames(b, codecs))
        yield receipt_row(pid, self.write(frames, pid))

    def _connector(self) -> SinkConnector:
        connector = self.plan.connector_class()
        connector.start(self.plan.config)
        return connector

    def commit(self, receipts: list[_TaskResult], batch_id: int) -> None:
        results = sorted(receipts, key=lambda r: r.task_id)
        letters = [r.dead_letters for r in results if r.dead_letters is not None]
        if letters and self.plan.dlq is not None:
            # Before the sink's commit: a crash in between replays the batch, and the dead-letter
            # writer publishes a (writer id, batch id) once, so nothing is lost or doubled.
            try:
                self.plan.dlq.commit(letters, batch_id)
            except Exception:
                self._count({"deadletterqueue-produce-failures": 1})
                raise
        produced = [r.produced for r in results if r.produced is not None]
        if produced and self.plan.owned is not None:
            # Also before the sink's commit, for the same reason: parked work is durable first.
            self.plan.owned.commit(produced, batch_id)
        if self.plan.fence is not None:
            self.plan.fence.check(self.plan.name, f"sink batch {batch_id}")
        self._connector().commit(BatchId(self.plan.run, batch_id), [r.payload for r in results])
        requests = [req for r in results for req in r.requests]
        if requests and self.plan.control is not None:
            self.plan.control(requests)
        errors = sum(r.errors for r in results)
        retries = sum(r.retries for r in results)
        reporter = self.plan.errors or ErrorReporter(ErrorPolicy(), self.plan.name)
        reporter.count(self.plan.counters, errors, retries)
        # counted at commit, like the errors: a replayed micro-batch is not counted twice
        records = sum(r.records for r in results)
        self._count({RECORDS_TOTAL: records, BATCHES_TOTAL: 1 if records else 0})

    def abort(self, receipts: list[_TaskResult | None], batch_id: int) -> None:
        payloads = [r.payload if r is not None else None for r in receipts]
        self._connector().abort(BatchId(self.plan.run, batch_id), payloads)
        letters = [r.dead_letters for r in receipts if r is not None and r.dead_letters]
        if letters and self.plan.dlq is not None:
            self.plan.dlq.abort(letters, batch_id)
        produced = [r.produced for r in receipts if r is not None and r.produced is not None]
        if produced and self.plan.owned is not None:
            self.plan.owned.abort(produced, batch_id)


#: The text of a JVM-path sink's failure when a topic it reads got a new schema version; the
#: runtime restarts such a query by itself (`sluice.runtime.herder.restarts.TRANSIENT_MARKERS`).
NEW_VERSION = "has a new schema version while running"


def check_versions(plan: SinkPlan) -> None:
    """A sink on the JVM path (its column types fixed by Spark when its query started): raise if
    the registry holds a newer schema than the one its decoders were planned with, so that the
    runtime restarts it with the new version (executor, once per task and micro-batch, before
    the task writes anything: the micro-batch is then read again by the restarted query)."""
    if plan.registry is None or plan.codecs is None:
        return
    now = plan_decoders(plan.config, plan.topics, plan.registry)
    changed = [
        f"{topic} {role}"
        for topic in plan.topics
        for role, old, new in (
            ("key", plan.codecs.of(topic).key, now.of(topic).key),
            ("value", plan.codecs.of(topic).value, now.of(topic).value),
        )
        if old.schema != new.schema
    ]
    if changed:
        raise RestartRequested(
            f"sink {plan.name}: topic {', '.join(changed)} schema {NEW_VERSION}; the connector "
            "restarts to decode it (a fused sink would take it at its next micro-batch)",
            suggestion="nothing to do; with restart.transient.max.attempts=0, restart it",
        )


class _SinkWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.runner = SinkRunner(plan)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _TaskResult:
        check_versions(self.runner.plan)
        ctx = TaskContext.get()
        return self.runner.write(iterator, ctx.partitionId() if ctx else 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.runner.commit([m for m in messages if isinstance(m, _TaskResult)], batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.runner.abort([m if isinstance(m, _TaskResult) else None for m in messages], batchId)


def _headers_json(headers: dict[str, str]) -> str | None:
    return json.dumps(headers, sort_keys=True) if headers else None


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _note_assignment(context: SinkTaskContext, batch: pa.RecordBatch) -> None:
    if "queue_id" not in batch.schema.names:
        return
    pairs = (
        pa.Table.from_batches([batch.select(["topic", "queue_id"])])
        .group_by(["topic", "queue_id"])
        .aggregate([])
    )
    for topic, queue in zip(pairs["topic"].to_pylist(), pairs["queue_id"].to_pylist(), strict=True):
        partition = {"topic": topic, "queueId": str(queue)}
        if partition not in context.assigned:
            context.assigned.append(partition)
