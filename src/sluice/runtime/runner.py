"""Runs connectors as Spark streaming queries over a bus: the library-level entry point.

`ConnectorRunner.start(name, config)` starts a source connector (source → topic) or a sink
connector (topic → sink) as one streaming query; two connectors started on one runner run as two
concurrent queries on one SparkSession. Each run of a connector has its own checkpoint
(`<root>/connectors/<name>/runs/<run>/checkpoint`); restarting a connector resumes the current run
from its checkpoint, and `reset_run` starts a fresh one from the position store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sluice.bus.embedded import EmbeddedBus
from sluice.bus.facade import Bus
from sluice.converters._compatibility import DEFAULT_LEVEL, CheckedRegistry, parse_level
from sluice.converters._compatibility import KEY as COMPATIBILITY_KEY
from sluice.engine.checkpoint import last_committed_offsets
from sluice.engine.converters import (
    SchemaRegistration,
    SinkCodecs,
    plan_encoders,
    register_schemas,
)
from sluice.engine.direct import RECEIPT_DDL
from sluice.engine.errors import ErrorPolicy
from sluice.engine.pipeline import (
    fusable,
    jvm_path_forced,
    start_fused_query,
    start_sink_query,
    start_source_query,
)
from sluice.engine.positions import PositionStore
from sluice.engine.retry import ConnectorNotes
from sluice.engine.session import activate
from sluice.engine.settings import parse_settings
from sluice.engine.sink import SinkPlan, SinkRunner, plan_sink
from sluice.engine.source import SourcePlan, plan_source, source_data_source
from sluice.engine.transforms import parse_transforms
from sluice.push import CONNECTOR_NAME_KEY, PushBoard
from sluice.runtime.metrics.progress import CountingConsumer
from sluice.runtime.plugins import PluginRegistry, default_registry
from sluice.runtime.secrets import ConfigProviders, password_keys, restore_references
from sluice.runtime.stores import WorkerStores
from sluice.sdk import (
    ConfigException,
    RecordOffset,
    SchemaRegistry,
    SinkConnector,
    SourceConnector,
    Transform,
    partition_key,
)
from sluice.sdk._config import normalize_config
from sluice.sdk.wakeup import idle_wait
from sluice.store.positions import Fenced, FencedPositions

log = logging.getLogger(__name__)

_CAUSE = re.compile(r"^\s*(?:\w+\.)*(\w*(?:Exception|Error)): (.+)$", re.MULTILINE)


#: how long a stop waits for the micro-batch in progress to end before it interrupts it (Kafka
#: Connect's task.shutdown.graceful.timeout.ms is 5 s too)
TRIGGER_GRACE_S = 5.0


def _await_trigger_end(query: StreamingQuery, timeout_s: float) -> None:
    """Wait until `query` is between micro-batches, or one just ended (or `timeout_s` passed).

    `StreamingQuery.stop` interrupts a micro-batch wherever it is, also after its writer's commit
    published and before Spark logged the batch as committed. The stop then saves the positions
    of the batch before, and a fresh run (a changed config, an offsets change) reads the batch
    again under a new writer id: its records were in the topic twice (or in a sink twice).
    Records flowing without pause, the next batch starts at once, so the moment to stop is just
    after a batch reported its progress: the next one is then still planning or reading, and
    cutting it there is harmless. So is a trigger still asking its sources for offsets: an idle
    query waits there for new data (see `sluice.sdk.wakeup`)."""
    deadline = time.monotonic() + timeout_s
    last = _progress_mark(query)
    while query.isActive and time.monotonic() < deadline:
        status = query.status
        if (
            not status.get("isTriggerActive")
            or str(status.get("message", "")).startswith("Getting offsets from")
            or _progress_mark(query) != last
        ):
            return
        time.sleep(0.02)


def _progress_mark(query: StreamingQuery) -> tuple[int, str] | None:
    """What changes each time a trigger of `query` ends (its last progress's batch and time)."""
    progress = query.lastProgress
    return None if progress is None else (progress.batchId, progress.timestamp)


def failure_cause(trace: str) -> str:
    """The innermost Python error line of a Spark failure ("ConnectException: file …").

    Spark wraps a task's Python traceback in several layers of JVM exceptions; the last
    `SomeError: message` line of the Python part names the real cause.
    """
    causes = [f"{kind}: {message.strip()}" for kind, message in _CAUSE.findall(trace)]
    python = [c for c in causes if not c.startswith(("SparkException", "StreamingQueryException"))]
    if python:
        return python[-1]
    return trace.strip().splitlines()[0] if trace.strip() else "unknown failure"


def _check_mixed_sink(conf: dict[str, str], codecs: SinkCodecs, topics: list[str]) -> None:
    """A sink whose topics differ in schema runs fused (a Spark frame has one type): refuse what
    needs the JVM path, naming the key."""
    why = f"its topics have different schemas ({', '.join(topics)})"
    if conf.get("transforms"):
        raise ConfigException(
            "transforms",
            f"a sink cannot transform records when {why}",
            suggestion="start one sink connector per topic (or per schema), or transform on the "
            "source side",
        )
    if jvm_path_forced(conf):
        raise ConfigException("pipeline.fused", f"must stay true for a sink when {why}")
    for decoder in codecs.decoders():
        if decoder.arrow_mode is None:
            raise ConfigException(
                f"{decoder.role}.converter",
                f"{decoder.converter} cannot decode in Arrow, which a sink needs when {why}",
                suggestion="use AvroConverter, or one sink connector per topic",
            )


def connector_registry(
    inner: SchemaRegistry, worker_level: str, conf: dict[str, str]
) -> CheckedRegistry:
    """The schema registry (`inner`: the worker's store) as connector `conf` sees it: new
    versions of the subjects it registers are checked at its `schema.compatibility`, else at the
    worker's."""
    level = conf.get(COMPATIBILITY_KEY) or worker_level
    return CheckedRegistry(inner, parse_level(level))


@dataclass
class RunningConnector:
    """A started connector: its query and what it is."""

    name: str
    kind: str  # "source" | "sink"
    run: str
    query: StreamingQuery
    task_configs: tuple[dict[str, str], ...] = ()
    checkpoint: str = ""
    #: the lease generation it runs under (distributed mode), None standalone
    generation: int | None = None
    #: the position store as this run commits to it (fenced by `generation` if set)
    positions: PositionStore | None = None

    def failure(self) -> tuple[str, str] | None:
        """`(cause, full trace)` if the query failed, else None."""
        exc = self.query.exception()
        if exc is None:
            return None
        trace = str(exc)
        return failure_cause(trace), trace


@dataclass(frozen=True)
class _Start:
    """What `ConnectorRunner.start` resolved for one start of a connector, handed to the
    source or sink planner."""

    name: str
    conf: dict[str, str]  # references resolved
    chain: list[Transform]
    run: str
    run_dir: str
    checkpoint: str
    registry: CheckedRegistry
    positions: PositionStore
    fence: tuple[str, int] | None  # (connector, lease generation) in distributed mode
    fenced: FencedPositions | None


class ConnectorRunner:
    """Starts and stops connectors' streaming queries on one SparkSession and one embedded bus."""

    def __init__(
        self,
        spark: SparkSession,
        root: str | os.PathLike[str],
        *,
        trigger_interval_ms: int = 100,
        default_queues: int = 8,
        retention_ms: int | None = 7 * 24 * 3600 * 1000,
        retention_bytes: int | None = None,
        plugins: PluginRegistry | None = None,
        bus: Bus | None = None,
        providers: ConfigProviders | None = None,
        stores: WorkerStores | None = None,
        schema_compatibility: str = DEFAULT_LEVEL,
    ) -> None:
        self.spark = spark
        #: the worker's `schema.compatibility` (a connector's own key overrides it)
        self.schema_compatibility = schema_compatibility
        # `${env:…}`/`${file:…}` references are resolved here, when a query is built, only
        self.providers = providers or ConfigProviders()
        self.plugins = plugins or default_registry()
        self.root = os.path.abspath(os.fspath(root))
        # `bus` picks the topic backend (see sluice.bus); the embedded log under the root is the
        # default.
        self.bus: Bus = bus or EmbeddedBus(
            os.path.join(self.root, "bus"), default_queues=default_queues
        )
        # SQLite under the root unless the composition root chose others (distributed mode)
        self.stores = stores or WorkerStores.sqlite(self.root)
        self.positions = self.stores.positions
        self.counters = self.stores.counters
        self.schemas = self.stores.schemas
        self.push_board_path = os.path.join(self.root, "push.sqlite")
        # one for the worker's REST reads and scrapes (its connection opens on first use, one per
        # thread); push tasks open their own from the path
        self.push_board = PushBoard(self.push_board_path)
        self.trigger_interval_ms = trigger_interval_ms
        self.trigger = (
            {"processingTime": f"{trigger_interval_ms} milliseconds"}
            if trigger_interval_ms > 0
            else {"processingTime": "0 seconds"}
        )
        self.running: dict[str, RunningConnector] = {}
        #: connectors whose queries add their own record totals (see runtime.metrics)
        self.counts_itself: set[str] = set()
        self.retention_ms = retention_ms
        self.retention_bytes = retention_bytes
        self._closed = threading.Event()

    def start_maintenance(self, interval_s: float = 60.0) -> None:
        """Apply `maintain` every `interval_s` on a thread of its own until `close` (a worker's
        composition root starts it; a runner built for a test or a bench runs without)."""
        threading.Thread(
            target=self._maintain_loop,
            args=(interval_s,),
            daemon=True,
            name="sluice-bus-maintenance",
        ).start()

    def maintain(self) -> dict[str, int]:
        """Apply topic retention (by age and size) and remove orphaned staged segments now."""
        return self.bus.maintain(
            retention_ms=self.retention_ms, retention_bytes=self.retention_bytes
        )

    def _maintain_loop(self, interval_s: float) -> None:
        while not self._closed.wait(interval_s):
            try:
                self.maintain()
            except Exception:  # the next round tries again; a query is never stopped for this
                log.exception("bus maintenance failed")

    # -- runs -----------------------------------------------------------------------------------
    def _connector_dir(self, name: str) -> str:
        # A name's folder is the name itself, unless its UTF-8 is longer than a file name may
        # be (a name may be 249 four-byte characters): then a digest of it.
        if len(name.encode()) > 255:
            name = "~" + hashlib.sha256(name.encode()).hexdigest()
        return os.path.join(self.root, "connectors", name)

    def current_run(self, name: str) -> str:
        """The connector's current run id (created on first use)."""
        marker = os.path.join(self._connector_dir(name), "CURRENT")
        try:
            with open(marker) as f:
                return f.read().strip()
        except FileNotFoundError:
            return self.reset_run(name)

    def reset_run(self, name: str) -> str:
        """Start a fresh checkpoint: the next start reads from the position store."""
        if name in self.running:
            raise ConfigException("name", f"connector {name!r} is running; stop it before a reset")
        run = uuid.uuid4().hex[:12]
        folder = self._connector_dir(name)
        os.makedirs(os.path.join(folder, "runs", run), exist_ok=True)
        tmp = os.path.join(folder, "CURRENT.tmp")
        with open(tmp, "w") as f:
            f.write(run)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(folder, "CURRENT"))
        return run

    # -- lifecycle ------------------------------------------------------------------------------
    def fence(self, name: str, generation: int) -> None:
        """Distributed mode, before starting `name` under lease `generation`: from now on the
        previous owner's commits (positions, sink batches, topic publishes) are refused."""
        self.positions.fence(name, generation)
        self.bus.fence(name, generation)

    def _generation_dir(self, run_dir: str, generation: int) -> str:
        """`<run>/gen-<g>`, seeded with a copy of the newest older generation's checkpoint and
        staged polls: the new owner replays exactly what the old one had not committed (same
        writer id and batch ids, so a batch it had published is skipped), and never shares a
        live checkpoint folder with a zombie."""
        folder = os.path.join(run_dir, f"gen-{generation}")
        if os.path.isdir(folder):
            return folder
        older = sorted(
            (int(n[4:]) for n in os.listdir(run_dir) if n.startswith("gen-") and n[4:].isdigit()),
            reverse=True,
        )
        sources = [os.path.join(run_dir, f"gen-{g}") for g in older if g < generation]
        if not sources and os.path.isdir(os.path.join(run_dir, "checkpoint")):
            sources = [run_dir]  # the run began standalone (or before fencing)
        tmp = folder + f".tmp-{uuid.uuid4().hex[:8]}"
        os.makedirs(tmp)
        for part in ("checkpoint", "staging"):
            if sources and os.path.isdir(os.path.join(sources[0], part)):
                shutil.copytree(os.path.join(sources[0], part), os.path.join(tmp, part))
        os.replace(tmp, folder)
        return folder

    def _trigger_of(self, connector: SinkConnector) -> dict[str, str]:
        """The worker's trigger, or the interval the connector asks for (a lake sink's
        `roll.interval.ms`)."""
        interval = connector.micro_batch_interval_ms()
        return {"processingTime": f"{interval} milliseconds"} if interval else self.trigger

    def _idle_wait_of(self, connector: SinkConnector | None = None) -> float:
        interval = connector.micro_batch_interval_ms() if connector is not None else None
        return idle_wait(interval or self.trigger_interval_ms)

    def start(
        self, name: str, config: dict[str, object], *, generation: int | None = None
    ) -> RunningConnector:
        """Start connector `name` with `config` (`connector.class` picks the plugin).

        With `generation` (distributed mode: the connector's lease, already fenced with
        `fence`) every commit of the query is checked against it, and the query runs from its
        own copy of the checkpoint (see `_generation_dir`)."""
        if name in self.running:
            raise ConfigException("name", f"connector {name!r} is already running")
        activate(self.spark)
        conf = normalize_config(config)
        if not conf.get("connector.class"):
            raise ConfigException("connector.class", "required key is missing")
        connector = self.plugins.connector(conf["connector.class"])()
        written = conf
        conf = self.providers.resolve(conf, password_keys(type(connector)))
        chain = parse_transforms(conf, self.plugins.transform)
        run = self.current_run(name)
        run_dir = os.path.join(self._connector_dir(name), "runs", run)
        fence: tuple[str, int] | None = None
        positions: PositionStore = self.positions
        fenced: FencedPositions | None = None
        if generation is not None:
            run_dir = self._generation_dir(run_dir, generation)
            fence = (name, generation)
            positions = fenced = FencedPositions(self.positions, generation)
        checkpoint = os.path.join(run_dir, "checkpoint")
        registry = connector_registry(self.schemas, self.schema_compatibility, conf)
        self.counts_itself.discard(name)
        self.counters.clear_retrying(name)  # a previous run's notes (its executor died retrying)
        ctx = _Start(
            name, conf, chain, run, run_dir, checkpoint, registry, positions, fence, fenced
        )
        if isinstance(connector, SourceConnector):
            plan, query = self._start_source(ctx, connector)
            kind = "source"
        elif isinstance(connector, SinkConnector):
            plan, query = self._start_sink(ctx, connector)
            kind = "sink"
        else:  # pragma: no cover - resolve_connector only returns these two
            raise ConfigException("connector.class", f"{type(connector).__name__} is neither kind")
        # what is stored and shown keeps the references, never what they resolved to
        shown = tuple(restore_references(written, conf, c) for c in plan.task_configs)
        running = RunningConnector(name, kind, run, query, shown, checkpoint, generation, positions)
        self.running[name] = running
        return running

    def _start_source(
        self, ctx: _Start, connector: SourceConnector
    ) -> tuple[SourcePlan, StreamingQuery]:
        """Plan and start a source's query: fused (records straight to the bus's appender) when
        no step needs the JVM, else through Spark's rows to the bus's writer."""
        name, conf, run, registry = ctx.name, ctx.conf, ctx.run, ctx.registry
        fence, positions, checkpoint, chain = ctx.fence, ctx.positions, ctx.checkpoint, ctx.chain
        plan = plan_source(
            name,
            connector,
            conf,
            run=run,
            staging_dir=os.path.join(ctx.run_dir, "staging"),
            positions=positions,
            counters=self.counters,
            idle_wait_s=self._idle_wait_of(),
        )
        if plan.topic:
            self.bus.create_topic(plan.topic)
        dlq_topic = plan.errors.policy.dlq_topic if plan.errors else ""
        if dlq_topic:
            self.bus.create_topic(dlq_topic, plan.errors.policy.dlq_queues)
        writer_id = f"{name}/{run}"
        # a broker outage met by its commits shows in the tasks' status (`retrying`)
        notes = ConnectorNotes(self.counters, name, len(plan.task_configs))
        codecs = tuple(
            plan_encoders(conf, plan.key_schema, shape.value_schema, registry)
            for shape in plan.shapes
        )
        if all(fusable(conf, c) for c in codecs):
            if plan.topic:  # one shape: several are refused with a topic (plan_source)
                register_schemas(registry, plan.topic, codecs[0])
            direct = self.bus.topic_appender(writer_id=writer_id, fence=fence, notes=notes)
            if any(c.registered for c in codecs):  # register every topic it writes
                skip = frozenset([dlq_topic] if dlq_topic else [])
                direct = SchemaRegistration(registry, codecs, direct, skip)
            # its Spark rows are receipts, not records: it counts its records itself
            direct = CountingConsumer(direct, self.counters, name)
            self.counts_itself.add(name)
            plan = replace(plan, direct=direct, codecs=codecs)
            query = start_fused_query(
                self.spark,
                f"source:{name}",
                source_data_source(plan),
                direct,
                checkpoint=checkpoint,
                trigger=self.trigger,
            )
        else:
            writer = self.bus.topic_writer(writer_id=writer_id, fence=fence, notes=notes)
            query = start_source_query(
                self.spark,
                plan,
                conf,
                writer,
                checkpoint=checkpoint,
                trigger=self.trigger,
                chain=chain,
                registry=registry,
            )
        return plan, query

    def _start_sink(self, ctx: _Start, connector: SinkConnector) -> tuple[SinkPlan, StreamingQuery]:
        """Plan and start a sink's query: its topics (and those it owns, such as a push sink's
        retry topic) read by the bus's reader, fused into the sink runner when no step needs
        the JVM (always when its topics differ in schema), else through Spark's rows."""
        name, conf = ctx.name, ctx.conf
        settings = parse_settings(conf, "sink")
        topics = list(settings.topics)
        if not topics:
            raise ConfigException("connect.topicnames", "names no topic")
        control_path = os.path.join(self._connector_dir(name), "control.json")
        self.counts_itself.add(name)  # SinkRunner.commit counts its records
        # The connector's name, as Kafka Connect gives it in the config: a push sink's default
        # retry topic is named after it. (Its tasks have it, and the push board, in their context.)
        conf[CONNECTOR_NAME_KEY] = name
        plan, owned, notes = self._plan_sink(ctx, connector, topics, control_path)
        topics = [*topics, *owned]
        fused = plan.codecs is not None and fusable(conf, plan.codecs)
        if plan.codecs is not None and not fused:
            plan.codecs.resolve_late()  # Spark needs every type now: the error names it
        if plan.codecs is not None and plan.codecs.mixed:
            _check_mixed_sink(conf, plan.codecs, topics)
            fused = True
        runner = SinkRunner(plan)
        reader = self.bus.topic_reader(
            name=name,
            topics=topics,
            max_tasks=len(plan.task_configs),
            control_path=control_path,
            positions=ctx.positions,
            max_rows=settings.read_max_rows,
            split_queues=connector.ordered_commit,
            downstream=runner if fused else None,
            downstream_ddl=RECEIPT_DDL if fused else None,
            group=settings.task_group_id,
            consume_from=settings.consume_from_where,
            notes=notes,
            idle_wait_s=self._idle_wait_of(connector),
            delayed={t: h for t, h in connector.delayed_topics().items() if t in owned},
        )
        trigger = self._trigger_of(connector)
        if fused:
            query = start_fused_query(
                self.spark,
                f"sink:{name}",
                reader,
                runner,
                checkpoint=ctx.checkpoint,
                trigger=trigger,
            )
        else:
            query = start_sink_query(
                self.spark,
                plan,
                reader,
                checkpoint=ctx.checkpoint,
                trigger=trigger,
                chain=ctx.chain,
            )
        return plan, query

    def _plan_sink(
        self, ctx: _Start, connector: SinkConnector, topics: list[str], control_path: str
    ) -> tuple[SinkPlan, list[str], ConnectorNotes]:
        """The sink's plan with the writers of its dead-letter topic and of the topics it owns
        (created here), those owned topics (its reader reads them too), and the notes its
        tasks' broker retries go to."""
        name, conf, run, fence = ctx.name, ctx.conf, ctx.run, ctx.fence
        policy = ErrorPolicy.from_config(conf, topics)
        if policy.dlq_topic:
            self.bus.create_topic(policy.dlq_topic, policy.dlq_queues)
        plan = plan_sink(
            name,
            connector,
            conf,
            run=run,
            control=self.bus.reader_control(control_path).apply,
            counters=self.counters,
            topics=tuple(topics),
            registry=ctx.registry,
        )
        # a broker outage met by its reads or its own topics' commits shows in the tasks'
        # status (`retrying`): the appenders are made once the tasks are known
        notes = ConnectorNotes(self.counters, name, len(plan.task_configs))
        if policy.dlq_topic:
            dlq = self.bus.topic_appender(writer_id=f"{name}/{run}/dlq", fence=fence, notes=notes)
            plan = replace(plan, dlq=dlq)
        owned = [t for t in connector.owned_topics() if t not in topics]
        if owned:  # e.g. a push sink's retry topic: written by its tasks, read back here
            for topic in owned:
                self.bus.create_topic(topic)
            own = self.bus.topic_appender(writer_id=f"{name}/{run}/own", fence=fence, notes=notes)
            plan = replace(plan, owned=own)
        if ctx.fenced is not None:
            plan = replace(plan, fence=ctx.fenced)
        # where push sinks (sluice.push) read live limits and report progress: see push_board
        plan = replace(plan, push_board_path=self.push_board_path)
        return plan, owned, notes

    def stop(self, name: str, timeout_s: float = 60.0) -> None:
        """Stop the connector's query (its checkpoint and positions stay)."""
        running = self.running.pop(name, None)
        if running is None:
            return
        _await_trigger_end(running.query, min(timeout_s, TRIGGER_GRACE_S))
        running.query.stop()
        if running.query.exception() is None:
            running.query.awaitTermination(timeout_s)
        try:
            self._sync_positions(running)
        except Fenced as exc:  # another worker owns it now: its positions are not ours to move
            log.warning("connector %s: final positions not saved: %s", name, exc)

    def _sync_positions(self, running: RunningConnector) -> None:
        """Copy the checkpoint's last committed end offsets into the position store (see
        `engine.checkpoint`): the store then says exactly where the stopped query ended."""
        positions = self._checkpoint_positions(running)
        if positions:
            (running.positions or self.positions).save(running.name, positions)

    def _checkpoint_positions(self, running: RunningConnector) -> dict[str, RecordOffset]:
        ends = last_committed_offsets(running.checkpoint) if running.checkpoint else None
        positions: dict[str, RecordOffset] = {}
        for end in ends or []:
            positions.update(end.get("p") or {})  # a replayable source: partition key -> offset
            for key, offset in (end.get("q") or {}).items():  # a topic reader: "topic/queue"
                topic, _, queue = key.rpartition("/")
                positions[partition_key(self.bus.queue_partition(topic, int(queue)))] = {
                    "queueOffset": offset
                }
        return positions

    def committed_positions(
        self, name: str, stored: dict[str, RecordOffset] | None = None
    ) -> dict[str, RecordOffset]:
        """What connector `name` has committed: the position store (or `stored`, what it holds
        when the caller read it already), overlaid (while it runs) by its checkpoint's last
        committed batch, which the store may trail by one batch."""
        positions = self.positions.load(name) if stored is None else dict(stored)
        running = self.running.get(name)
        if running is not None:
            positions.update(self._checkpoint_positions(running))
        return positions

    def counts_own_records(self, name: str) -> bool:
        """Whether the query of `name` adds its own record totals (see runtime.metrics)."""
        return name in self.counts_itself

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)

    def close(self) -> None:
        """Stop every connector and the maintenance thread."""
        self._closed.set()
        self.stop_all()
