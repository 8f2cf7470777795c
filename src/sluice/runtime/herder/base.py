"""What a worker's herder serves alike in either mode, over the worker's stores and runner.

Kafka Connect's `AbstractHerder`, in short: validation of posted configs, the reads (connectors,
configs, statuses, tasks), offsets, topics, plugins, push settings and metrics. The lifecycle
(what a write does: start the query here, or record the change for the connector's owner) is
each mode's own: `sluice.runtime.herder.standalone` and `sluice.runtime.herder.distributed`, the
two siblings on this base.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from pyspark.sql import SparkSession

from sluice.bus.base import OffsetOutOfRange, TopicDamaged, UnknownTopic
from sluice.engine.settings import (
    POSTED_NAMES_KEY,
    ConfigReport,
    every_alias,
    posted_names,
    topic_use,
)
from sluice.runtime.file_access import check_allowed_paths, check_client_options
from sluice.runtime.herder import validation
from sluice.runtime.herder.api import (
    AllocatedTask,
    BadRequest,
    Conflict,
    ConnectorInfo,
    ConnectorStatus,
    Herder,
    NotFound,
    Position,
    QueueOffsets,
    Retrying,
    State,
    TaskConfig,
    TaskId,
    TaskStatus,
    TooMany,
    TopicSummary,
    check_connector_name,
)
from sluice.runtime.herder.reconcile import Duty, Reconciler
from sluice.runtime.herder.status_board import StatusBoard
from sluice.runtime.metrics.figures import MetricsReport, report_of
from sluice.runtime.metrics.progress import ProgressTracker
from sluice.runtime.metrics.snapshot import MeasuredRunner, MetricsSnapshot
from sluice.runtime.plugins import PluginInfo, PluginRegistry, delivery_of, plugin_kind
from sluice.runtime.runner import RunningConnector
from sluice.runtime.secrets import (
    keep_masked,
    password_keys,
    redact,
    scrub,
    scrub_data,
)
from sluice.runtime.stores import WorkerParts
from sluice.runtime.topic_records import MAX_LIMIT, read_records
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import (
    ConfigException,
    Connector,
    partition_key,
)
from sluice.sdk._config import normalize_config
from sluice.store.configs import ConfigStore, StoredConnector
from sluice.store.statuses import Status, StatusStore

log = logging.getLogger(__name__)

_STATE_OF_TARGET = {"STARTED": "RUNNING", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}


def _task_status(task: int, stored: Status, notes: dict[int, dict[str, Any]]) -> TaskStatus:
    """A task's status from its stored state and the retry notes of its connector (shown only
    while it is RUNNING: a note left by a task that since failed or stopped says nothing)."""
    state = State(stored.state, scrub(stored.trace) if stored.trace else None, stored.worker_id)
    note = notes.get(task) if stored.state == "RUNNING" else None
    retrying = Retrying(note["since_ms"], note["attempts"], scrub(note["error"])) if note else None
    return TaskStatus(task, state, retrying)


class QueryRunner(MeasuredRunner, Protocol):
    """What the herders use of the query runner (`ConnectorRunner`): the lifecycle of each
    connector's query, the queries running now and what each committed (`MeasuredRunner`).
    The bus and stores those queries commit to come to the herder beside it (`WorkerParts`).
    Declared where it is used."""

    @property
    def running(self) -> Mapping[str, RunningConnector]:
        """The queries this worker runs now, by connector name (read-only)."""

    def counts_own_records(self, name: str) -> bool:
        """Whether the query of `name` adds its own record totals (see runtime.metrics)."""

    def start(
        self, name: str, config: dict[str, object], *, generation: int | None = None
    ) -> RunningConnector:
        """Start the query of connector `name` (under lease `generation`, if distributed)."""

    def stop(self, name: str, timeout_s: float = 60.0) -> None:
        """Stop the query of `name` (its checkpoint and positions stay)."""

    def close(self) -> None:
        """Stop every query and the runner's maintenance."""

    def fence(self, name: str, generation: int) -> None:
        """Refuse, from now on, commits of `name` under an older lease generation."""

    def reset_run(self, name: str) -> str:
        """Start a fresh checkpoint for `name` (it must be stopped)."""


def _stored_as_typed(
    stored: dict[str, str],
    typed: dict[str, str],
    password_keys: list[str],
    aliases: dict[str, str] | None,
) -> tuple[dict[str, str], set[str]]:
    """The stored config and its password keys under the aliases `typed` uses (a config is
    shown as posted: a password PUT back masked under its alias, `mqttSecretKey`, must keep the
    stored value of `mqtt.password`)."""
    old, secret = dict(stored), set(password_keys)
    for alias, name in every_alias(aliases).items():
        if alias in typed and name in stored:
            old[alias] = stored[name]
            if name in secret:
                secret.add(alias)
    return old, secret


class BaseHerder(Herder):
    """The views both modes serve, and the services both build: the status board, the
    reconciler of this worker's duties, progress tracking and metrics. Subclasses supply the
    lifecycle: `start`/`close`, the REST writes, and the hooks the reconciler calls
    (`_launch`, `_disowned`) and `_flush_statuses`, `_require_stopped`, `_probes_lag`."""

    def __init__(
        self,
        spark: SparkSession,
        config: WorkerConfig,
        plugins: PluginRegistry,
        *,
        runner: QueryRunner,
        configs: ConfigStore,
        statuses: StatusStore,
        progress: ProgressTracker,
        metrics: MetricsSnapshot,
        parts: WorkerParts,
    ) -> None:
        self.spark = spark
        self.config = config
        self.worker_id = config.worker_id
        self.plugins_registry = plugins
        self.providers = config.providers
        self.runner = runner
        # the bus, stores and push board the runner's queries commit to (the composition root's)
        self.parts = parts
        # record totals, rates and batch times of every query, for /metrics
        self.progress = progress
        self.configs = configs
        # a status the store refuses is kept, shown by this worker and written again each round
        self.statuses = StatusBoard(statuses)
        self._lock = threading.RLock()
        self._last_error: dict[str, float] = {}  # connector -> unix time it last FAILED
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        # what should run here against what runs here, every round (sluice.runtime.herder.reconcile)
        self.reconciler = Reconciler(
            self.worker_id,
            runner,
            self.statuses,
            self._launch,
            on_started=self._started,
            disowned=self._disowned,
            last_error=self._last_error,
        )
        # one read of the stores per scrape (built by the composition root)
        self._metrics = metrics

    # -- the reconciliation rounds ----------------------------------------------------------------
    def _stop_query(self, name: str, state: str | None) -> None:
        """Stop the query of `name` (if it runs) and show `state`; a query that cannot be
        stopped cleanly (its store or the JVM gone) is logged, not raised: shutting down
        goes on."""
        running = self.runner.running.get(name)
        tasks = len(running.task_configs) if running else 0
        try:
            self.runner.stop(name)
        except Exception as exc:
            log.warning("connector %s: not stopped cleanly: %s: %s", name, type(exc).__name__, exc)
        if state is not None:
            self.statuses.put(name, state, self.worker_id, tasks=tasks)

    def _watch(self) -> None:
        interval = self.config.status_poll_ms / 1000
        while not self._closed.wait(interval):
            try:
                self._reconcile()
            except Exception:  # keep watching; one bad round must not blind the worker
                log.exception("reconciliation round failed")

    def _reconcile(self) -> None:
        """One round (`sluice.runtime.herder.reconcile`): refused statuses written again, ended
        queries collected, duties without a query started."""
        with self._lock:
            if self._closed.is_set():
                return
            self._flush_statuses()
            self.reconciler.round(stopping=self._closed.is_set)

    def _started(self, name: str, running: RunningConnector) -> None:
        self.configs.set_task_configs(name, list(running.task_configs))

    def _set_idle(self, stored: StoredConnector) -> None:
        state = _STATE_OF_TARGET[stored.target_state]
        tasks = len(stored.task_configs) if stored.target_state == "PAUSED" else 0
        self.statuses.put(stored.name, state, self.worker_id, tasks=tasks)

    # -- configs: found, checked, accepted --------------------------------------------------------
    def _stored(self, name: str) -> StoredConnector:
        stored = self.configs.get(name)
        if stored is None:
            raise NotFound(f"connector {name!r} not found")
        return stored

    def _class_of(self, config: dict[str, str]) -> type[Connector] | None:
        return self.plugins_registry.connector_or_none(config.get("connector.class", ""))

    def _check(self, name: str, config: dict[str, Any]) -> ConfigReport:
        """The accepted config (aliases renamed) and its warnings, or BadRequest with every
        error (see `sluice.runtime.herder.validation`)."""
        return validation.accepted(
            self.plugins_registry,
            name,
            config,
            prepare=self._prepare,
            topic_problem=self.parts.bus.topic_name_problem,
            screen=self.providers.check,
        )

    def _check_change(self, stored: StoredConnector, conf: dict[str, str]) -> None:
        """Refuse a change that makes the stored positions unusable (e.g. a JDBC `mode`)."""
        cls = self._class_of(conf)
        if cls is not None:
            has = bool(self.runner.committed_positions(stored.name))
            validation.check_position_keys(cls, stored.config, conf, has)

    def _prepare(self, config: dict[str, str], cls: type) -> dict[str, str]:
        """The config as the connector will see it (references resolved), after the file paths
        it names are checked against `file.allowed.dirs` and the options it hands to client
        libraries against the worker's client policy; what is stored keeps the references."""
        resolved = self.providers.resolve(config, password_keys(cls))
        check_allowed_paths(cls, resolved, self.config.client_policy.allowed_dirs)
        check_client_options(cls, resolved, self.config.client_policy)
        return resolved

    def _accepted(
        self, name: str, config: dict[str, Any]
    ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """The config to store (masked secrets PUT back as shown keep their stored values) and
        its warnings; BadRequest with every error (or a bad name) otherwise."""
        check_connector_name(name)
        existing = self.configs.get(name)
        if existing is not None:
            with contextlib.suppress(ConfigException):  # a bad map: _check reports it
                typed = normalize_config(config)
                old, secret = _stored_as_typed(
                    existing.config,
                    typed,
                    self.password_keys(str(config.get("connector.class", ""))),
                    getattr(self._class_of(typed), "key_aliases", None),
                )
                config = keep_masked(typed, old, secret)
        report = self._check(name, config)
        conf = {k: v for k, v in report.config.items() if k != POSTED_NAMES_KEY}
        cls = self._class_of(conf)
        # the keys as typed (`_check` accepted the map: its keys are `config`'s)
        posted = posted_names(config, conf, getattr(cls, "key_aliases", None))
        if posted:  # shown as posted (`shown_config`), run under sluice's names
            conf[POSTED_NAMES_KEY] = posted
        return conf, [w.as_dict() for w in report.warnings]

    def _replacing(
        self, name: str, conf: dict[str, str], create_only: bool
    ) -> tuple[StoredConnector | None, bool]:
        """(the stored connector `conf` replaces or None, whether it is identical); Conflict when
        it exists and `create_only`, or when the change makes its positions unusable. Called
        under the lock."""
        existing = self.configs.get(name)
        if existing is not None and create_only:
            raise Conflict(f"connector {name!r} already exists")
        if existing is not None and existing.config == conf:
            return existing, True
        if existing is not None:
            self._check_change(existing, conf)
        else:
            self._check_room()
        return existing, False

    def put_connector(
        self, name: str, config: dict[str, Any], *, create_only: bool = False
    ) -> tuple[ConnectorInfo, bool]:
        conf, warnings = self._accepted(name, config)
        with self._lock:
            existing, identical = self._replacing(name, conf, create_only)
            if not identical:
                self._write_config(name, conf, existing)
                log.info("connector %s %s", name, "updated" if existing else "created")
            info = self.connector_info(name)
        return self._warned(info, warnings), existing is None

    def _check_room(self) -> None:
        """TooMany when the store holds `max.connectors` already (each running connector is a
        Spark query: ~45 MB of the machine, so the count must be bounded)."""
        limit = self.config.max_connectors
        count = len(self.configs.names())
        if count >= limit:
            raise TooMany(
                f"cannot create another connector: {count} exist and max.connectors is {limit}",
                key="max.connectors",
                suggestion="delete a connector, or raise max.connectors in the worker config "
                "if the machine has the memory (docs/config.md)",
            )

    # -- reads ------------------------------------------------------------------------------------
    def connectors(self) -> list[str]:
        return self.configs.names()

    def connector_config(self, name: str) -> dict[str, str]:
        return self.shown_config(self._stored(name).config)

    def connector_info(self, name: str) -> ConnectorInfo:
        stored = self._stored(name)
        return ConnectorInfo(
            name,
            self.shown_config(stored.config),
            tuple(TaskId(name, i) for i in range(len(stored.task_configs))),
            plugin_kind(self._class_of(stored.config)),
        )

    def status(self, name: str) -> ConnectorStatus:
        stored = self._stored(name)
        own, tasks = self.statuses.get(name)
        connector = (
            State(own.state, scrub(own.trace) if own.trace else None, own.worker_id)
            if own
            else State("UNASSIGNED", None, self.worker_id)
        )
        notes = self.parts.stores.counters.retrying(int(time.time() * 1000)).get(name, {})
        return ConnectorStatus(
            name,
            connector,
            tuple(
                _task_status(t.task if t.task is not None else i, t, notes)
                for i, t in enumerate(tasks)
            ),
            plugin_kind(self._class_of(stored.config)),
            delivery_of(self._class_of(stored.config), stored.config),
        )

    def _task_index(self, stored: StoredConnector, task: int) -> int:
        if not 0 <= task < len(stored.task_configs):
            raise NotFound(
                f"connector {stored.name!r} has no task {task} (it has {len(stored.task_configs)})"
            )
        return task

    def task_status(self, name: str, task: int) -> TaskStatus:
        stored = self._stored(name)
        self._task_index(stored, task)
        for t in self.status(name).tasks:
            if t.id == task:
                return t
        return TaskStatus(task, State("UNASSIGNED", None, self.worker_id))

    def task_configs(self, name: str) -> list[TaskConfig]:
        stored = self._stored(name)
        secret_keys = self.password_keys(stored.config.get("connector.class", ""))
        return [
            TaskConfig(TaskId(name, i), redact(config, secret_keys))
            for i, config in enumerate(stored.task_configs)
        ]

    # -- push sinks (sluice.push) -----------------------------------------------------------------
    def _push_sink(self, name: str) -> StoredConnector:
        stored = self._stored(name)
        cls = self._class_of(stored.config)
        if cls is None or not getattr(cls, "push_runtime", False):
            raise Conflict(
                f"connector {name!r} is not a push sink (connector.class="
                f"{stored.config.get('connector.class')!r}): it has no push settings"
            )
        return stored

    def query_progress(self, name: str) -> dict[str, Any]:
        self._stored(name)
        running = self.runner.running.get(name)
        if running is None:
            return {"connector": name, "query_id": None, "run_id": None, "batches": []}
        batches = []
        for p in running.query.recentProgress:
            batches.append(
                {
                    "batchId": p.batchId,
                    "timestamp": p.timestamp,
                    "numInputRows": int(p.numInputRows or 0),
                    "durationMs": dict(p.durationMs or {}),
                }
            )
        return {
            "connector": name,
            "query_id": str(running.query.id),
            # the id of this start of the query (Spark's runId): a restart changes it, while
            # query_id, kept in the checkpoint, stays
            "run_id": str(running.query.runId),
            "batches": batches,
        }

    def push(self, name: str) -> dict[str, Any]:
        self._push_sink(name)
        running = self.runner.running.get(name)
        return {
            "connector": name,
            # the Spark query's id, and the id of its current start: live tuning keeps both
            # (no restart); a restart keeps query_id (the checkpoint's) and changes run_id
            "query_id": str(running.query.id) if running is not None else None,
            "run_id": str(running.query.runId) if running is not None else None,
            # target names are the resolved URLs: a secret in one is masked
            **scrub_data(self.parts.push_board.progress(name)),
        }

    def tune_push(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        self._push_sink(name)
        if not changes:
            raise BadRequest("no push setting to change: give at least one key")
        try:
            self.parts.push_board.set_settings(name, changes)
        except ConfigException as exc:
            raise BadRequest(str(exc)) from None
        return self.push(name)

    # -- offsets ----------------------------------------------------------------------------------
    def offsets(self, name: str) -> list[Position]:
        self._stored(name)
        stored = self.runner.committed_positions(name)
        return [Position(json.loads(key), offset) for key, offset in sorted(stored.items())]

    def alter_offsets(self, name: str, offsets: list[dict[str, Any]]) -> None:
        changes: dict[str, dict[str, Any] | None] = {}
        for i, entry in enumerate(offsets):
            if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict):
                raise BadRequest(f"offsets[{i}]: needs a 'partition' object")
            if "offset" not in entry or not isinstance(entry["offset"], (dict, type(None))):
                raise BadRequest(f"offsets[{i}]: needs an 'offset' object or null")
        with self._lock:
            stored = self._stored(name)
            self._require_stopped(stored, "altered")
            offsets = validation.match_partitions(offsets, self.parts.stores.positions.load(name))
            validation.check_offsets(self._class_of(stored.config), offsets)
            for entry in offsets:
                changes[partition_key(entry["partition"])] = entry["offset"]
            # the fresh run first: a kill -9 between the two steps then leaves a new run that
            # starts from the positions as they are, not the old checkpoint beside new positions
            self.runner.reset_run(name)
            positions = self.parts.stores.positions
            positions.save(name, {k: v for k, v in changes.items() if v is not None})
            positions.remove(name, [k for k, v in changes.items() if v is None])

    def reset_offsets(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self._require_stopped(stored, "reset")
            # the fresh run first (see alter_offsets): killed after it, the connector still
            # resumes from the positions the offsets API shows
            self.runner.reset_run(name)
            self.parts.stores.positions.delete(name)

    # -- plugins ----------------------------------------------------------------------------------
    def validate(self, config: dict[str, Any], class_name: str | None = None) -> dict[str, Any]:
        conf = dict(config)
        if class_name is not None:
            conf.setdefault("connector.class", class_name)
        try:
            self.plugins_registry.connector(str(conf.get("connector.class", "")))
        except ConfigException as exc:
            raise NotFound(str(exc), key="connector.class") from None
        return validation.validation_result(
            self.plugins_registry,
            conf,
            prepare=self._prepare,
            topic_problem=self.parts.bus.topic_name_problem,
            screen=self.providers.check,
        )

    def plugins(self) -> list[PluginInfo]:
        return self.plugins_registry.plugins()

    def reload_plugins(self) -> list[str]:
        with self._lock:
            return self.plugins_registry.reload()

    def plugin_config(self, class_name: str) -> list[dict[str, Any]]:
        # a registered plugin only: a read must not import whatever module a request names
        try:
            cls = self.plugins_registry.connector(class_name, load=False)
        except ConfigException as exc:
            raise NotFound(str(exc)) from None
        return validation.plugin_keys(cls)

    def password_keys(self, class_name: str) -> list[str]:
        # the classes of stored configs, found as when they run (plugin_config finds only
        # registered ones): a secret is masked whatever its connector's class
        cls = self.plugins_registry.connector_or_none(class_name)
        if cls is None:
            return []
        return [d["name"] for d in validation.plugin_keys(cls) if d.get("type") == "password"]

    # -- topic data -------------------------------------------------------------------------------
    def _topic_users(self, topic: str) -> list[str]:
        return [c.name for c in self.configs.all() if topic_use(c.config).names(topic)]

    def topic_records(
        self, topic: str, queue: int | None = None, offset: int | None = None, limit: int = 20
    ) -> dict[str, Any]:
        if not 1 <= limit <= MAX_LIMIT:
            raise BadRequest(f"limit: must be between 1 and {MAX_LIMIT}, got {limit}")
        log_ = self.parts.bus.log
        if not self._topic_exists(topic):
            raise NotFound(f"topic {topic!r} not found")
        ranges = log_.offsets(topic)
        if queue is not None and queue not in ranges:
            # a queue the topic does not have is a resource that does not exist, as a topic
            raise NotFound(f"queue: topic {topic!r} has queues 0..{len(ranges) - 1}, not {queue}")
        if offset is not None and offset < 0:
            raise BadRequest(f"offset: must be at least 0, got {offset}")
        writer = None  # the first source (by name) writing the topic
        for stored in sorted(self.configs.all(), key=lambda c: c.name):
            if topic_use(stored.config).writes == topic:
                writer = stored.config
                break
        registry = self.parts.stores.schemas
        try:
            return read_records(
                log_,
                topic,
                queue=queue,
                offset=offset,
                limit=limit,
                writer_config=writer,
                registry=registry,
            )
        except UnknownTopic:
            raise NotFound(f"topic {topic!r} not found") from None
        except OffsetOutOfRange as exc:
            raise BadRequest(f"offset: {exc}") from None

    def _topic_exists(self, topic: str) -> bool:
        """False for a name no topic can have (the embedded log refuses it with ValueError, a
        contract its tests hold): such a request is a 404 like any missing topic, not a 500."""
        try:
            return bool(self.parts.bus.log.topic_exists(topic))
        except ValueError:
            return False

    def delete_topic(self, topic: str) -> None:
        if not self._topic_exists(topic):
            raise NotFound(f"topic {topic!r} not found")
        with self._lock:
            users = self._topic_users(topic)
            if users:
                raise Conflict(
                    f"topic {topic!r} is used by connector(s) {', '.join(sorted(users))}; "
                    "delete them (or change their topics) first"
                )
            log_ = self.parts.bus.log
            delete = getattr(log_, "delete_topic", None)
            if delete is None:
                raise BadRequest(f"the {self.config.bus.kind} bus cannot delete topics")
            try:
                queues = [
                    partition_key(log_.queue_partition(topic, q))
                    for q in range(log_.queue_count(topic))
                ]
                delete(topic)
            except UnknownTopic:
                raise NotFound(f"topic {topic!r} not found") from None
            self._forget_positions(set(queues))
            log.info("topic %s deleted", topic)

    def _forget_positions(self, partitions: set[str]) -> None:
        """Drop every stored position on these (deleted) queues. Positions outlive a connector,
        so a sink deleted before its topic kept them; re-created under its name, it would skip
        the first records of a topic re-created under the same name (Kafka drops a deleted
        topic's committed offsets too)."""
        positions = self.parts.stores.positions
        for connector, stored in positions.load_all().items():
            stale = [p for p in stored if p in partitions]
            if stale:
                positions.remove(connector, stale)

    # -- metrics (sluice.runtime.metrics) ---------------------------------------------------------
    def metrics(self) -> MetricsReport:
        return report_of(self._metrics_snapshot())

    def _metrics_snapshot(self) -> dict[str, Any]:
        """One read of the stores for every connector's figures (`MetricsSnapshot.take`)."""
        return self._metrics.take(self.statuses, self._last_error, self._probes_lag)

    # -- topics and allocation --------------------------------------------------------------------
    def topics(self) -> list[TopicSummary]:
        log_ = self.parts.bus.log
        found = []
        for topic in sorted(log_.topics()):
            try:
                ranges = sorted(log_.offsets(topic).items())
            except TopicDamaged:  # listed without queues: its connectors' status says why
                ranges = []
            found.append(
                TopicSummary(
                    topic, tuple(QueueOffsets(q, r.min_offset, r.max_offset) for q, r in ranges)
                )
            )
        return found

    def allocated_tasks(self) -> dict[str, list[AllocatedTask]]:
        groups: dict[str, list[AllocatedTask]] = {
            "pendingTasks": [],
            "runningTasks": [],
            "stoppingTasks": [],
            "stoppedTasks": [],
            "errorTasks": [],
        }
        group_of = {
            "RUNNING": "runningTasks",
            "RESTARTING": "pendingTasks",
            "UNASSIGNED": "pendingTasks",
            "PAUSED": "stoppedTasks",
            "DESTROYED": "stoppedTasks",
            "FAILED": "errorTasks",
        }
        for name in self.connectors():
            for task in self.status(name).tasks:
                group = group_of.get(task.state.state, "pendingTasks")
                groups[group].append(AllocatedTask(name, task))
        return groups

    # -- what each mode does its own way ----------------------------------------------------------
    @abstractmethod
    def _launch(self, name: str, duty: Duty) -> RunningConnector:
        """Start the query of a duty of this worker (the reconciler judges what it raises)."""

    @abstractmethod
    def _disowned(self, name: str, duty: Duty, failure: tuple[str, str] | None) -> bool:
        """Whether an ended query's connector is no longer this worker's to run."""

    @abstractmethod
    def _write_config(
        self, name: str, conf: dict[str, str], existing: StoredConnector | None
    ) -> None:
        """Store an accepted new or changed config (`existing`: the one it replaces) and have it
        applied, the mode's way (under the lock)."""

    @abstractmethod
    def _flush_statuses(self) -> None:
        """Write again, if this worker may, the statuses the store refused."""

    @abstractmethod
    def _require_stopped(self, stored: StoredConnector, verb: str) -> None:
        """Conflict unless `stored` is STOPPED (its offsets can be `verb` only then)."""

    @abstractmethod
    def _probes_lag(self, name: str) -> bool:
        """Whether this worker asks connector `name`'s source for its lag."""

    @staticmethod
    def _warned(info: ConnectorInfo, warnings: list[dict[str, Any]]) -> ConnectorInfo:
        """The info with the config's warnings (unknown keys), when it has any."""
        return replace(info, warnings=tuple(warnings)) if warnings else info
