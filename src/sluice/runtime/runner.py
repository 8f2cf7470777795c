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
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sluice.bus.embedded import EmbeddedBus
from sluice.bus.facade import Bus
from sluice.converters._compatibility import DEFAULT_LEVEL
from sluice.engine import (
    PositionStore,
    QueryRequest,
    QueryServices,
    activate,
    last_committed_offsets,
    launch,
    parse_settings,
    parse_transforms,
)
from sluice.push import PushBoard
from sluice.runtime.plugins import PluginRegistry, default_registry
from sluice.runtime.secrets import ConfigProviders, password_keys, restore_references
from sluice.runtime.stores import WorkerStores
from sluice.sdk import (
    ConfigException,
    RecordOffset,
    SourceConnector,
    partition_key,
)
from sluice.sdk._config import normalize_config
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
        push_board: PushBoard | None = None,
    ) -> None:
        self.spark = spark
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
        # one for the worker's REST reads and scrapes (its connection opens on first use, one per
        # thread); push tasks open their own from the path
        self.push_board = push_board or PushBoard(os.path.join(self.root, "push.sqlite"))
        self.push_board_path = self.push_board.path
        self.running: dict[str, RunningConnector] = {}
        # what every connector's query is built on (sluice.engine.front_door)
        self.services = QueryServices(
            spark=spark,
            topics=self.bus,
            counters=self.counters,
            schemas=self.schemas,
            schema_compatibility=schema_compatibility,
            trigger_interval_ms=trigger_interval_ms,
            push_board_path=self.push_board_path,
        )
        #: connectors whose queries add their own record totals (see sluice.engine.counting)
        self.counts_itself = self.services.self_counting
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
        written = normalize_config(config)
        if not written.get("connector.class"):
            raise ConfigException("connector.class", "required key is missing")
        connector = self.plugins.connector(written["connector.class"])()
        conf = self.providers.resolve(written, password_keys(type(connector)))
        kind = "source" if isinstance(connector, SourceConnector) else "sink"
        run = self.current_run(name)
        run_dir = os.path.join(self._connector_dir(name), "runs", run)
        positions: PositionStore = self.positions
        fenced: FencedPositions | None = None
        if generation is not None:
            run_dir = self._generation_dir(run_dir, generation)
            positions = fenced = FencedPositions(self.positions, generation)
        self.counters.clear_retrying(name)  # a previous run's notes (its executor died retrying)
        request = QueryRequest(
            name=name,
            connector=connector,
            config=conf,
            settings=parse_settings(conf, kind),
            chain=parse_transforms(conf, self.plugins.transform),
            run=run,
            run_dir=run_dir,
            control_path=os.path.join(self._connector_dir(name), "control.json"),
            positions=positions,
            fence=None if generation is None else (name, generation),
            fenced=fenced,
        )
        launched = launch(self.services, request)
        # what is stored and shown keeps the references, never what they resolved to
        shown = tuple(restore_references(written, conf, c) for c in launched.task_configs)
        running = RunningConnector(
            name, kind, run, launched.query, shown, request.checkpoint, generation, positions
        )
        self.running[name] = running
        return running

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
