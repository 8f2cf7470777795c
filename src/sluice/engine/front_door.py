"""The engine's front door: one start of one connector, from its typed settings to its running
Spark query.

The runtime resolves what a start needs into a `QueryRequest` — the connector instance, its
config with references resolved, its `ConnectorSettings` (parsed once, where the config was
accepted), the run's folders, the position store and the lease fence — and hands it to `launch`
with the worker's `QueryServices` (Spark, the topic bus seen through `TopicPort`, the counter
and schema stores, the trigger). Every decision about the query is taken here: the fused path
(records handed straight to the bus) or the JVM path (through Spark's rows), the source's shapes
and their schemas, the dead-letter topic, the topics a sink owns (a push sink's retry topic),
the trigger and the idle wait. The runtime gets a `LaunchedQuery` back and keeps only runs,
fences and what is running.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, MutableSet, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.streaming import StreamingQuery

from sluice.converters._compatibility import CheckedRegistry, parse_level
from sluice.engine.converters import (
    SchemaRegistration,
    SinkCodecs,
    plan_encoders,
    register_schemas,
)
from sluice.engine.counting import CountingConsumer
from sluice.engine.direct import RECEIPT_DDL, BatchConsumer
from sluice.engine.pipeline import (
    fusable,
    start_fused_query,
    start_sink_query,
    start_source_query,
)
from sluice.engine.positions import PositionStore
from sluice.engine.retry import ConnectorNotes
from sluice.engine.settings import ConnectorSettings
from sluice.engine.sink import Counters, LeaseFence, SinkPlan, SinkRunner, plan_sink
from sluice.engine.source import plan_source, source_data_source
from sluice.engine.transforms import topic_routes
from sluice.sdk import (
    ConfigException,
    Connector,
    ConnectorContext,
    SchemaRegistry,
    SinkConnector,
    SourceConnector,
    Transform,
)
from sluice.sdk.wakeup import idle_wait


class TopicPort(Protocol):
    """What the engine asks of the topic bus to start a query (`sluice.bus.facade.Bus` is one):
    topics made, writers of a source's records and of a sink's own topics, a sink's reader."""

    def create_topic(self, topic: str, queues: int | None = None) -> Any: ...

    def topic_appender(
        self, *, writer_id: str, fence: tuple[str, int] | None = None, notes: Any = None
    ) -> BatchConsumer: ...

    def topic_writer(
        self, *, writer_id: str, fence: tuple[str, int] | None = None, notes: Any = None
    ) -> type[DataSource]: ...

    def reader_control(self, path: str) -> Any: ...

    def topic_reader(
        self,
        *,
        name: str,
        topics: Sequence[str],
        max_tasks: int,
        control_path: str,
        positions: Any,
        max_rows: int | None = None,
        split_queues: bool = False,
        downstream: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
        downstream_ddl: str | None = None,
        group: str | None = None,
        consume_from: str = "first",
        notes: Any = None,
        idle_wait_s: float | None = None,
        delayed: Mapping[str, str] | None = None,
    ) -> type[DataSource]: ...


@dataclass(frozen=True)
class QueryServices:
    """The worker's parts every connector's query is built on."""

    spark: SparkSession
    topics: TopicPort
    counters: Counters
    #: the worker's schema store, and its `schema.compatibility` (a connector's own overrides it)
    schemas: SchemaRegistry
    schema_compatibility: str
    #: the micro-batch trigger (`offsetCommitIntervalMsConfig`); 0 runs the next at once
    trigger_interval_ms: int = 100
    #: where push sinks (`sluice.push`) read live limits and report progress ("" when none)
    push_board_path: str = ""
    #: the connectors whose queries add their own record totals at commit (see
    #: `sluice.engine.counting`; the progress listener skips them): `launch` adds a name before
    #: its query starts, so no micro-batch is counted by both
    self_counting: MutableSet[str] = field(default_factory=set)

    def trigger(self, interval_ms: int | None = None) -> dict[str, str]:
        """Spark's trigger for the worker's interval, or for a connector's own."""
        interval = interval_ms or self.trigger_interval_ms
        return {"processingTime": f"{interval} milliseconds" if interval > 0 else "0 seconds"}

    def idle_wait_s(self, interval_ms: int | None = None) -> float:
        """How long an idle reader waits for new data before it answers a trigger."""
        return idle_wait(interval_ms or self.trigger_interval_ms)

    def registry_for(self, settings: ConnectorSettings) -> CheckedRegistry:
        """The schema store as one connector sees it: new versions of the subjects it registers
        are checked at its `schema.compatibility`, else at the worker's."""
        level = settings.schema_compatibility or self.schema_compatibility
        return CheckedRegistry(self.schemas, parse_level(level))


@dataclass(frozen=True)
class QueryRequest:
    """One start of one connector, as the runtime resolved it."""

    name: str
    connector: Connector
    #: the config with `${…}` references resolved, and its connector-level keys, typed
    config: dict[str, str]
    settings: ConnectorSettings
    chain: list[Transform]
    run: str
    #: the run's folder (the checkpoint and a source's staged polls live in it)
    run_dir: str
    #: where a sink's reader keeps the requests its tasks made (pause, resume, reset)
    control_path: str
    positions: PositionStore
    #: distributed mode: `(connector, lease generation)` every commit is checked against, and
    #: the fenced position store that checks it for a sink's commit
    fence: tuple[str, int] | None = None
    fenced: LeaseFence | None = None

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.run_dir, "checkpoint")


@dataclass(frozen=True)
class LaunchedQuery:
    """A started query and the task configs its connector planned."""

    query: StreamingQuery
    task_configs: tuple[dict[str, str], ...]


def launch(services: QueryServices, request: QueryRequest) -> LaunchedQuery:
    """Plan and start `request`'s connector as one streaming query."""
    request.connector.initialize(ConnectorContext(request.name))
    services.self_counting.discard(request.name)
    if isinstance(request.connector, SourceConnector):
        return _launch_source(services, request, request.connector)
    if isinstance(request.connector, SinkConnector):
        return _launch_sink(services, request, request.connector)
    raise ConfigException(
        "connector.class", f"{type(request.connector).__name__} is neither a source nor a sink"
    )


def _launch_source(
    services: QueryServices, request: QueryRequest, connector: SourceConnector
) -> LaunchedQuery:
    """A source's query: fused (records straight to the bus's appender) when no step needs the
    JVM, else through Spark's rows to the bus's writer."""
    name, conf, settings, bus = request.name, request.config, request.settings, services.topics
    plan = plan_source(
        name,
        connector,
        conf,
        settings,
        run=request.run,
        staging_dir=os.path.join(request.run_dir, "staging"),
        positions=request.positions,
        counters=services.counters,
        idle_wait_s=services.idle_wait_s(),
    )
    if plan.topic:
        bus.create_topic(plan.topic)
    dlq_topic = settings.errors.dlq_topic
    if dlq_topic:
        bus.create_topic(dlq_topic, settings.errors.dlq_queues)
    writer_id = f"{name}/{request.run}"
    # a broker outage met by its commits shows in the tasks' status (`retrying`)
    notes = ConnectorNotes(services.counters, name, len(plan.task_configs))
    registry = services.registry_for(settings)
    codecs = tuple(
        plan_encoders(conf, plan.key_schema, shape.value_schema, registry) for shape in plan.shapes
    )
    if not all(fusable(settings, c) for c in codecs):
        query = start_source_query(
            services.spark,
            plan,
            conf,
            bus.topic_writer(writer_id=writer_id, fence=request.fence, notes=notes),
            checkpoint=request.checkpoint,
            trigger=services.trigger(),
            chain=request.chain,
            registry=registry,
        )
        return LaunchedQuery(query, plan.task_configs)
    if plan.topic:  # one shape: several are refused with a topic (plan_source)
        register_schemas(registry, plan.topic, codecs[0])
    direct: Any = bus.topic_appender(writer_id=writer_id, fence=request.fence, notes=notes)
    if any(c.registered for c in codecs):  # register every topic it writes
        skip = frozenset([dlq_topic] if dlq_topic else [])
        direct = SchemaRegistration(registry, codecs, direct, skip)
    # its Spark rows are receipts, not records: it counts its records itself
    direct = CountingConsumer(direct, services.counters, name)
    services.self_counting.add(name)
    plan = replace(plan, direct=direct, codecs=codecs)
    query = start_fused_query(
        services.spark,
        f"source:{name}",
        source_data_source(plan),
        direct,
        checkpoint=request.checkpoint,
        trigger=services.trigger(),
    )
    return LaunchedQuery(query, plan.task_configs)


def _launch_sink(
    services: QueryServices, request: QueryRequest, connector: SinkConnector
) -> LaunchedQuery:
    """A sink's query: its topics (and those it owns, such as a push sink's retry topic) read by
    the bus's reader, fused into the sink runner when no step needs the JVM (always when its
    topics differ in schema), else through Spark's rows."""
    settings = request.settings
    topics = list(settings.topics)
    if not topics:
        raise ConfigException("connect.topicnames", "names no topic")
    plan, owned, notes = _plan_sink(services, request, connector, topics)
    topics = [*topics, *owned]
    # transforms that touch only the topic (RegexRouter) run fused, as a table of topic names
    routes = topic_routes(services.spark, request.chain, topics)
    chain_fusable = not request.chain or routes is not None
    codecs = plan.codecs
    fused = codecs is not None and settings.pipeline_fused and chain_fusable and codecs.fusable
    if codecs is not None and not fused:
        codecs.resolve_late()  # Spark needs every type now: the error names it
    if codecs is not None and codecs.mixed:
        _check_mixed_sink(settings, codecs, topics, routed=chain_fusable)
        fused = True
    if fused and routes is not None:
        plan = replace(plan, routes=routes)
    runner = SinkRunner(plan)
    services.self_counting.add(request.name)  # SinkRunner.commit counts its records
    interval_ms = connector.micro_batch_interval_ms()  # a lake sink's `roll.interval.ms`
    reader = services.topics.topic_reader(
        name=request.name,
        topics=topics,
        max_tasks=len(plan.task_configs),
        control_path=request.control_path,
        positions=request.positions,
        max_rows=settings.read_max_rows,
        split_queues=connector.ordered_commit,
        downstream=runner if fused else None,
        downstream_ddl=RECEIPT_DDL if fused else None,
        group=settings.task_group_id,
        consume_from=settings.consume_from_where or "first",
        notes=notes,
        idle_wait_s=services.idle_wait_s(interval_ms),
        delayed={t: h for t, h in connector.delayed_topics().items() if t in owned},
    )
    trigger = services.trigger(interval_ms)
    if fused:
        query = start_fused_query(
            services.spark,
            f"sink:{request.name}",
            reader,
            runner,
            checkpoint=request.checkpoint,
            trigger=trigger,
        )
    else:
        query = start_sink_query(
            services.spark,
            plan,
            reader,
            checkpoint=request.checkpoint,
            trigger=trigger,
            chain=request.chain,
        )
    return LaunchedQuery(query, plan.task_configs)


def _plan_sink(
    services: QueryServices, request: QueryRequest, connector: SinkConnector, topics: list[str]
) -> tuple[SinkPlan, list[str], ConnectorNotes]:
    """The sink's plan with the writers of its dead-letter topic and of the topics it owns
    (created here), those owned topics (its reader reads them too), and the notes its tasks'
    broker retries go to."""
    name, run, fence, bus = request.name, request.run, request.fence, services.topics
    policy = request.settings.errors
    if policy.dlq_topic:
        bus.create_topic(policy.dlq_topic, policy.dlq_queues)
    plan = plan_sink(
        name,
        connector,
        request.config,
        request.settings,
        run=run,
        control=bus.reader_control(request.control_path).apply,
        counters=services.counters,
        topics=tuple(topics),
        registry=services.registry_for(request.settings),
    )
    # a broker outage met by its reads or its own topics' commits shows in the tasks' status
    # (`retrying`): the appenders are made once the tasks are known
    notes = ConnectorNotes(services.counters, name, len(plan.task_configs))
    if policy.dlq_topic:
        dlq = bus.topic_appender(writer_id=f"{name}/{run}/dlq", fence=fence, notes=notes)
        plan = replace(plan, dlq=dlq)
    owned = [t for t in connector.owned_topics() if t not in topics]
    if owned:  # e.g. a push sink's retry topic: written by its tasks, read back here
        for topic in owned:
            bus.create_topic(topic)
        own = bus.topic_appender(writer_id=f"{name}/{run}/own", fence=fence, notes=notes)
        plan = replace(plan, owned=own)
    if request.fenced is not None:
        plan = replace(plan, fence=request.fenced)
    return replace(plan, push_board_path=services.push_board_path), owned, notes


def _check_mixed_sink(
    settings: ConnectorSettings, codecs: SinkCodecs, topics: list[str], *, routed: bool
) -> None:
    """A sink whose topics differ in schema runs fused (a Spark frame has one type): refuse what
    needs the JVM path, naming the key. `routed`: its transforms, if any, touch only the topic."""
    why = f"its topics have different schemas ({', '.join(topics)})"
    if not routed:
        raise ConfigException(
            "transforms",
            f"a sink can only route records (RegexRouter, gated by TopicNameMatches) when {why}",
            suggestion="start one sink connector per topic (or per schema), or transform on the "
            "source side",
        )
    if not settings.pipeline_fused:
        raise ConfigException("pipeline.fused", f"must stay true for a sink when {why}")
    for decoder in codecs.decoders():
        if decoder.arrow_mode is None:
            raise ConfigException(
                f"{decoder.role}.converter",
                f"{decoder.converter} cannot decode in Arrow, which a sink needs when {why}",
                suggestion="use AvroConverter, or one sink connector per topic",
            )


__all__ = ["LaunchedQuery", "QueryRequest", "QueryServices", "TopicPort", "launch"]
