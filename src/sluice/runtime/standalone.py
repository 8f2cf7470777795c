"""The standalone herder: one worker, embedded stores, every connector a query on its Spark.

Target states and configs live in the config store, statuses in the status store, positions in
the position store, all SQLite under `storePathRootDir`, so they survive a restart: on boot each
connector is brought back to its target state, resuming its query from its checkpoint.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback
from typing import Any

from pyspark.sql import SparkSession

from sluice.engine.errors import ErrorPolicy
from sluice.engine.keys import RUNTIME_KEYS
from sluice.engine.transforms import parse_transforms
from sluice.push import PushBoard
from sluice.runtime.herder import BadRequest, Conflict, Herder, NotFound
from sluice.runtime.plugins import PluginInfo, PluginRegistry
from sluice.runtime.runner import SINK_KEYS, ConnectorRunner
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import (
    ConfigException,
    ConfigKey,
    ConnectException,
    Connector,
    SinkConnector,
    SourceConnector,
    normalize_config,
    partition_key,
)
from sluice.store.configs import ConfigStore, StoredConnector
from sluice.store.statuses import StatusStore

log = logging.getLogger(__name__)

_STATE_OF_TARGET = {"STARTED": "RUNNING", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}


def _kind(cls: type[Connector] | None) -> str:
    if cls is not None and issubclass(cls, SourceConnector):
        return "source"
    if cls is not None and issubclass(cls, SinkConnector):
        return "sink"
    return "unknown"


def _trace(exc: BaseException) -> str:
    """The cause on the first line (what status tables show), the full traceback after it."""
    return f"{type(exc).__name__}: {exc}\n\n" + "".join(traceback.format_exception(exc))


class StandaloneHerder(Herder):
    """Runs connectors on one worker; the REST API's only entry into the runtime."""

    def __init__(
        self,
        spark: SparkSession,
        config: WorkerConfig,
        plugins: PluginRegistry,
        *,
        configs: ConfigStore,
        statuses: StatusStore,
    ) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.plugins_registry = plugins
        self.runner = ConnectorRunner(
            spark,
            config.store_root,
            trigger_interval_ms=config.trigger_interval_ms,
            default_queues=config.default_queues,
            retention_ms=config.retention_ms,
            retention_bytes=config.retention_bytes,
            plugins=plugins,
            bus=config.create_bus(),
        )
        self.configs = configs
        self.statuses = statuses
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None

    # -- boot and shutdown ------------------------------------------------------------------------
    def start(self) -> None:
        """Bring every stored connector to its target state, then watch the queries.

        Called once the REST API is up: every connector to start shows UNASSIGNED first, then
        RUNNING (or FAILED) as its query comes up; the lock is taken per connector so that REST
        writes are not held up for the whole boot.
        """
        stored_all = self.configs.all()
        with self._lock:
            for stored in stored_all:
                if stored.target_state == "STARTED":
                    tasks = len(stored.task_configs)
                    self.statuses.put(stored.name, "UNASSIGNED", self.worker_id, tasks=tasks)
                else:
                    self._set_idle(stored)
        for stored in stored_all:
            with self._lock:
                if self._closed.is_set():
                    return
                current = self.configs.get(stored.name)
                if (
                    current is not None
                    and current.target_state == "STARTED"
                    and current.name not in self.runner.running
                ):
                    self._start(current)
        self._monitor = threading.Thread(target=self._watch, name="sluice-status", daemon=True)
        self._monitor.start()

    def close(self) -> None:
        """Stop every query gracefully; their tasks show UNASSIGNED until the next boot."""
        self._closed.set()
        with self._lock:
            for name in list(self.runner.running):
                n = len(self.runner.running[name].task_configs)
                self.runner.stop(name)
                self.statuses.put(name, "UNASSIGNED", self.worker_id, tasks=n)
            self.runner.close()

    def _watch(self) -> None:
        interval = self.config.status_poll_ms / 1000
        while not self._closed.wait(interval):
            try:
                self._check_queries()
            except Exception:  # keep watching; one bad check must not blind the worker
                log.exception("status check failed")

    def _check_queries(self) -> None:
        with self._lock:
            for name, running in list(self.runner.running.items()):
                if running.query.isActive:
                    continue
                failure = running.failure()
                tasks = len(running.task_configs)
                self.runner.stop(name)
                if failure is None:
                    self.statuses.put(name, "UNASSIGNED", self.worker_id, tasks=tasks)
                    continue
                cause, trace = failure
                log.error("connector %s failed: %s", name, cause)
                self.statuses.put(
                    name, "FAILED", self.worker_id, trace=f"{cause}\n\n{trace}", tasks=tasks
                )

    # -- lifecycle --------------------------------------------------------------------------------
    def _start(self, stored: StoredConnector) -> None:
        name = stored.name
        try:
            running = self.runner.start(name, stored.config)
        except Exception as exc:  # a connector that cannot start fails alone, the worker goes on
            log.error("connector %s failed to start: %s", name, exc)
            self.statuses.put(name, "FAILED", self.worker_id, trace=_trace(exc))
            return
        self.configs.set_task_configs(name, list(running.task_configs))
        self.statuses.put(name, "RUNNING", self.worker_id, tasks=len(running.task_configs))
        log.info("connector %s started (%s, run %s)", name, running.kind, running.run)

    def _set_idle(self, stored: StoredConnector) -> None:
        state = _STATE_OF_TARGET[stored.target_state]
        tasks = len(stored.task_configs) if stored.target_state == "PAUSED" else 0
        self.statuses.put(stored.name, state, self.worker_id, tasks=tasks)

    def _stored(self, name: str) -> StoredConnector:
        stored = self.configs.get(name)
        if stored is None:
            raise NotFound(f"connector {name!r} not found")
        return stored

    def _class_of(self, config: dict[str, str]) -> type[Connector] | None:
        try:
            return self.plugins_registry.connector(config.get("connector.class", ""))
        except ConfigException:
            return None

    def _check(self, config: dict[str, Any]) -> dict[str, str]:
        """A normalised config the connector accepts, or BadRequest naming the key."""
        try:
            conf = normalize_config(config)
            if not conf.get("connector.class", "").strip():
                raise ConfigException("connector.class", "required key is missing")
            cls = self.plugins_registry.connector(conf["connector.class"])
            connector = cls()
            RUNTIME_KEYS.parse(conf)
            topics: list[str] = []
            if isinstance(connector, SinkConnector):
                topics = SINK_KEYS.parse(conf)["connect.topicnames"]
                if not topics:
                    raise ConfigException(
                        "connect.topicnames", "required key is missing: a sink reads topics"
                    )
            ErrorPolicy.from_config(conf, topics)
            parse_transforms(conf, self.plugins_registry.transform)
            connector.validate(conf)
        except ConnectException as exc:
            raise BadRequest(str(exc)) from None
        except Exception as exc:  # a plugin's validate crashed: still the caller's config
            raise BadRequest(
                f"config rejected by the connector: {type(exc).__name__}: {exc}"
            ) from exc
        return conf

    def put_connector(
        self, name: str, config: dict[str, Any], *, create_only: bool = False
    ) -> tuple[dict[str, Any], bool]:
        if not name or "/" in name or name.strip() != name:
            raise BadRequest(f"connector name {name!r} is not valid (non-empty, no '/')")
        conf = self._check(config)
        with self._lock:
            existing = self.configs.get(name)
            if existing is not None and create_only:
                raise Conflict(f"connector {name!r} already exists")
            if existing is not None and existing.config == conf:
                return self.connector_info(name), False  # identical: nothing to do
            if existing is not None:
                self.runner.stop(name)  # positions now say exactly where it ended
            # a new or changed config starts a fresh checkpoint from the stored positions
            self.runner.reset_run(name)
            target = existing.target_state if existing is not None else "STARTED"
            self.configs.put(name, conf, target)
            stored = self._stored(name)
            if target == "STARTED":
                self._start(stored)
            else:
                self._set_idle(stored)
            log.info("connector %s %s", name, "updated" if existing else "created")
            return self.connector_info(name), existing is None

    def delete_connector(self, name: str) -> None:
        with self._lock:
            self._stored(name)
            self.runner.stop(name)
            self.configs.delete(name)
            self.statuses.delete(name)
            log.info("connector %s deleted (its positions are kept)", name)

    def pause(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.runner.stop(name)
            self.configs.set_target_state(name, "PAUSED")
            stored.target_state = "PAUSED"
            self._set_idle(stored)

    def resume(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.configs.set_target_state(name, "STARTED")
            if name not in self.runner.running:
                stored.target_state = "STARTED"
                self._start(stored)

    def stop(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self.runner.stop(name)
            self.configs.set_target_state(name, "STOPPED")
            stored.target_state = "STOPPED"
            self._set_idle(stored)

    def restart(self, name: str, task: int | None = None) -> None:
        """Restart the connector's query. Its tasks are partitions of one Spark query, so
        restarting one task restarts them all (from the checkpoint: nothing lost or repeated)."""
        with self._lock:
            stored = self._stored(name)
            if task is not None:
                self._task_index(stored, task)
            if stored.target_state != "STARTED":
                return  # Kafka Connect restarts only what should be running
            tasks = len(stored.task_configs)
            self.statuses.put(name, "RESTARTING", self.worker_id, tasks=tasks)
            self.runner.stop(name)
            self._start(stored)

    # -- reads ------------------------------------------------------------------------------------
    def workers(self) -> list[str]:
        return [self.worker_id]

    def connectors(self) -> list[str]:
        return self.configs.names()

    def connector_config(self, name: str) -> dict[str, str]:
        return self._stored(name).config

    def connector_info(self, name: str) -> dict[str, Any]:
        stored = self._stored(name)
        return {
            "name": name,
            "config": stored.config,
            "tasks": [{"connector": name, "task": i} for i in range(len(stored.task_configs))],
            "type": _kind(self._class_of(stored.config)),
        }

    def status(self, name: str) -> dict[str, Any]:
        stored = self._stored(name)
        own, tasks = self.statuses.get(name)
        return {
            "name": name,
            "connector": {
                "state": own.state if own else "UNASSIGNED",
                "trace": own.trace if own else None,
                "workerId": own.worker_id if own else self.worker_id,
            },
            "tasks": [
                {"id": t.task, "state": t.state, "trace": t.trace, "workerId": t.worker_id}
                for t in tasks
            ],
            "type": _kind(self._class_of(stored.config)),
        }

    def _task_index(self, stored: StoredConnector, task: int) -> int:
        if not 0 <= task < len(stored.task_configs):
            raise NotFound(
                f"connector {stored.name!r} has no task {task} (it has {len(stored.task_configs)})"
            )
        return task

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        stored = self._stored(name)
        self._task_index(stored, task)
        for t in self.status(name)["tasks"]:
            if t["id"] == task:
                return t
        return {"id": task, "state": "UNASSIGNED", "trace": None, "workerId": self.worker_id}

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        stored = self._stored(name)
        return [
            {"id": {"connector": name, "task": i}, "config": config}
            for i, config in enumerate(stored.task_configs)
        ]

    # -- push sinks (sluice.push) -----------------------------------------------------------------
    def _push_sink(self, name: str) -> StoredConnector:
        stored = self._stored(name)
        cls = self._class_of(stored.config)
        if cls is None or not getattr(cls, "push_runtime", False):
            raise BadRequest(
                f"connector {name!r} is not a push sink (connector.class="
                f"{stored.config.get('connector.class')!r}): it has no push settings"
            )
        return stored

    def push(self, name: str) -> dict[str, Any]:
        self._push_sink(name)
        running = self.runner.running.get(name)
        return {
            "connector": name,
            # the Spark query's id: live tuning keeps it (no restart)
            "query_id": str(running.query.id) if running is not None else None,
            **PushBoard(self.runner.push_board_path).progress(name),
        }

    def tune_push(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        self._push_sink(name)
        if not changes:
            raise BadRequest("no push setting to change: give at least one key")
        try:
            PushBoard(self.runner.push_board_path).set_settings(name, changes)
        except ConfigException as exc:
            raise BadRequest(str(exc)) from None
        return self.push(name)

    # -- offsets ----------------------------------------------------------------------------------
    def offsets(self, name: str) -> list[dict[str, Any]]:
        self._stored(name)
        stored = self.runner.committed_positions(name)
        return [
            {"partition": json.loads(key), "offset": offset}
            for key, offset in sorted(stored.items())
        ]

    def _require_stopped(self, stored: StoredConnector, verb: str) -> None:
        if stored.target_state != "STOPPED" or stored.name in self.runner.running:
            raise Conflict(
                f"connector {stored.name!r} must be STOPPED before its offsets can be {verb} "
                f"(it is {stored.target_state}); PUT /v1/connectors/{stored.name}/stop first"
            )

    def alter_offsets(self, name: str, offsets: list[dict[str, Any]]) -> None:
        changes: dict[str, dict[str, Any] | None] = {}
        for i, entry in enumerate(offsets):
            if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict):
                raise BadRequest(f"offsets[{i}]: needs a 'partition' object")
            if "offset" not in entry or not isinstance(entry["offset"], (dict, type(None))):
                raise BadRequest(f"offsets[{i}]: needs an 'offset' object or null")
            changes[partition_key(entry["partition"])] = entry["offset"]
        with self._lock:
            stored = self._stored(name)
            self._require_stopped(stored, "altered")
            positions = self.runner.positions
            positions.save(name, {k: v for k, v in changes.items() if v is not None})
            positions.remove(name, [k for k, v in changes.items() if v is None])
            self.runner.reset_run(name)

    def reset_offsets(self, name: str) -> None:
        with self._lock:
            stored = self._stored(name)
            self._require_stopped(stored, "reset")
            self.runner.positions.delete(name)
            self.runner.reset_run(name)

    # -- plugins ----------------------------------------------------------------------------------
    def validate(self, config: dict[str, Any], class_name: str | None = None) -> dict[str, Any]:
        conf = dict(config)
        if class_name is not None:
            conf.setdefault("connector.class", class_name)
        cls_name = str(conf.get("connector.class", ""))
        try:
            cls = self.plugins_registry.connector(cls_name)
        except ConfigException as exc:
            raise NotFound(str(exc)) from None
        try:
            raw = normalize_config(conf)
        except ConfigException as exc:
            raise BadRequest(str(exc)) from None
        definitions = {**RUNTIME_KEYS.keys, **cls.config_def.keys}
        errors: dict[str, list[str]] = {key: [] for key in definitions}
        try:
            self._check(raw)
        except BadRequest as exc:
            key = exc.message.split(":", 1)[0]
            errors.setdefault(key, []).append(exc.message)
        configs = []
        for key, errs in errors.items():
            definition = definitions.get(key)
            configs.append(
                {
                    "definition": _definition(key, definition),
                    "value": {"name": key, "value": raw.get(key), "errors": errs},
                }
            )
        return {
            "name": f"{cls.__module__}.{cls.__qualname__}",
            "error_count": sum(len(e) for e in errors.values()),
            "configs": configs,
        }

    def plugins(self) -> list[PluginInfo]:
        return self.plugins_registry.plugins()

    def reload_plugins(self) -> list[str]:
        with self._lock:
            return self.plugins_registry.reload()

    def plugin_config(self, class_name: str) -> list[dict[str, Any]]:
        try:
            cls = self.plugins_registry.connector(class_name)
        except ConfigException as exc:
            raise NotFound(str(exc)) from None
        keys = {**RUNTIME_KEYS.keys, **cls.config_def.keys}
        return [_definition(name, key) for name, key in keys.items()]

    # -- topics and allocation --------------------------------------------------------------------
    def topics(self) -> list[dict[str, Any]]:
        log_ = self.runner.bus.log
        return [
            {
                "name": topic,
                "queues": [
                    {"queue_id": q, "min_offset": r.min_offset, "max_offset": r.max_offset}
                    for q, r in sorted(log_.offsets(topic).items())
                ],
            }
            for topic in sorted(log_.topics())
        ]

    def allocated_connectors(self) -> dict[str, dict[str, str]]:
        return {name: self._stored(name).config for name in sorted(self.runner.running)}

    def allocated_tasks(self) -> dict[str, list[dict[str, Any]]]:
        groups: dict[str, list[dict[str, Any]]] = {
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
            for task in self.status(name)["tasks"]:
                groups[group_of.get(task["state"], "pendingTasks")].append(
                    {"connector": name, "task": task["id"], **task}
                )
        return groups


def _definition(name: str, key: ConfigKey | None) -> dict[str, Any]:
    if key is None:
        return {
            "name": name,
            "type": "string",
            "required": False,
            "default_value": None,
            "documentation": "",
        }
    default = None if key.required else key.default
    return {
        "name": name,
        "type": key.type,
        "required": key.required,
        "default_value": None if default is None else str(default),
        "documentation": key.doc,
    }
