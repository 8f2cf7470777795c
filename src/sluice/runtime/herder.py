"""The control-plane interface (Kafka Connect calls it the herder): all that the REST API calls.

Standalone and distributed modes are two implementations of `Herder`; the worker picks one when it
is wired together. Errors are typed by what went wrong, so each face of the REST API maps them to
its own HTTP status and body.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from sluice.runtime.plugins import PluginInfo
from sluice.runtime.secrets import redact


class HerderError(Exception):
    """A request the herder refuses; `status` is the HTTP status it maps to."""

    status = 500
    code = "herder.error"

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        suggestion: str | None = None,
        code: str | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.suggestion = suggestion
        if code is not None:
            self.code = code
        #: every problem when there are several (config validation): `{code, key, message,
        #: suggestion}` each
        self.errors = errors or []


class BadRequest(HerderError):
    """Bad input: malformed or invalid config, unknown class… The message names the key."""

    status = 400
    code = "request.invalid"


class NotFound(HerderError):
    """No such connector, task or plugin."""

    status = 404
    code = "not.found"


class Conflict(HerderError):
    """The request does not fit the current state (exists already, must be stopped first…)."""

    status = 409
    code = "state.conflict"


class Herder(ABC):
    """Connector lifecycle, status, offsets, plugins and topics of one Connect cluster.

    Shapes follow RocketMQ Connect: INFO is `{"name", "config", "tasks": [{"connector", "task"}],
    "type"}`, STATUS is `{"name", "connector": {"state", "trace", "workerId"}, "tasks": [{"id",
    "state", "trace", "workerId"}], "type"}`.
    """

    worker_id: str

    def password_keys(self, class_name: str) -> list[str]:
        """The keys connector class `class_name` declares as passwords ([] if it is unknown)."""
        try:
            definitions = self.plugin_config(class_name)
        except HerderError:
            return []
        return [d["name"] for d in definitions if d.get("type") == "password"]

    def shown_config(self, config: dict[str, str]) -> dict[str, str]:
        """`config` as REST, CLI and console may show it: password values masked (references
        kept as written). Every answer that carries a connector config goes through this."""
        return redact(config, self.password_keys(str(config.get("connector.class", ""))))

    def metrics(self) -> dict[str, Any]:
        """What `/metrics` shows: `{"worker": {…}, "connectors": [{"name", "type", "state",
        "tasks": {state: n}, "counters": {…}, "progress": {…} | None, "lag": [{"topic",
        "queue", "lag"}]}]}`. This default knows states only; implementations add the rest."""
        connectors = []
        for name in self.connectors():
            status = self.status(name)
            tasks: dict[str, int] = {}
            for task in status["tasks"]:
                tasks[task["state"]] = tasks.get(task["state"], 0) + 1
            connectors.append(
                {
                    "name": name,
                    "type": status["type"],
                    "state": status["connector"]["state"],
                    "tasks": tasks,
                    "counters": {},
                    "progress": None,
                    "lag": [],
                }
            )
        return {"worker": {"worker_id": self.worker_id}, "connectors": connectors}

    def topic_records(
        self, topic: str, queue: int | None = None, offset: int | None = None, limit: int = 20
    ) -> dict[str, Any]:
        """Records of `topic` decoded with its writer's converters: `{"topic", "converter",
        "records": [{"queue", "offset", "timestamp", "key", "value", "headers", "position"}],
        "next": {queue: next offset}}`. Without `offset`, the last `limit` records."""
        raise BadRequest("reading topic records is not supported by this worker")

    def delete_topic(self, topic: str) -> None:
        """Delete `topic` and its data; `Conflict` while a connector uses it."""
        raise BadRequest("deleting topics is not supported by this worker")

    @abstractmethod
    def workers(self) -> list[str]:
        """Ids of the live workers."""

    @abstractmethod
    def connectors(self) -> list[str]:
        """Names of every connector of the cluster, sorted."""

    @abstractmethod
    def connector_info(self, name: str) -> dict[str, Any]:
        """INFO of `name` (see the class docstring); `NotFound` if there is no such connector."""

    @abstractmethod
    def connector_config(self, name: str) -> dict[str, str]:
        """The stored (normalised) config of `name`; `NotFound` if unknown."""

    @abstractmethod
    def put_connector(
        self, name: str, config: dict[str, Any], *, create_only: bool = False
    ) -> tuple[dict[str, Any], bool]:
        """Create or update; returns (INFO, created). An identical config is a no-op."""

    @abstractmethod
    def delete_connector(self, name: str) -> None:
        """Stop `name` and forget its config and status; its positions are kept."""

    @abstractmethod
    def pause(self, name: str) -> None:
        """Target state PAUSED: the query stops, its checkpoint stays (resume goes on from it)."""

    @abstractmethod
    def resume(self, name: str) -> None:
        """Target state STARTED (from PAUSED or STOPPED)."""

    @abstractmethod
    def stop(self, name: str) -> None:
        """Stop the connector's query but keep its config (target state STOPPED)."""

    @abstractmethod
    def restart(self, name: str, task: int | None = None) -> None:
        """Restart the connector's query from its checkpoint (a task restart restarts them all:
        they are partitions of one query); `NotFound` for an unknown task."""

    @abstractmethod
    def status(self, name: str) -> dict[str, Any]:
        """STATUS of `name`, with the id of the worker running it."""

    @abstractmethod
    def task_status(self, name: str, task: int) -> dict[str, Any]:
        """One task's `{"id", "state", "trace", "workerId"}`."""

    @abstractmethod
    def task_configs(self, name: str) -> list[dict[str, Any]]:
        """`[{"id": {"connector", "task"}, "config": {…}}]` of the running (or last) start."""

    @abstractmethod
    def offsets(self, name: str) -> list[dict[str, Any]]:
        """`[{"partition": {…}, "offset": {…}}]` from the position store."""

    @abstractmethod
    def alter_offsets(self, name: str, offsets: list[dict[str, Any]]) -> None:
        """Set (or, with `"offset": null`, remove) positions; the connector must be STOPPED."""

    @abstractmethod
    def reset_offsets(self, name: str) -> None:
        """Forget every position of `name` (it must be STOPPED; `Conflict` otherwise)."""

    @abstractmethod
    def push(self, name: str) -> dict[str, Any]:
        """A push sink's live limits and progress: `{"connector", "settings", "totals",
        "tasks": [...]}` (each task: the EventBridge proposal's `ProcessResult` fields and more)."""

    @abstractmethod
    def tune_push(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a running push sink's limits (applied by its tasks within ~1 s, no restart);
        unknown keys are a `BadRequest` naming the key. Returns `push(name)`."""

    @abstractmethod
    def validate(self, config: dict[str, Any], class_name: str | None = None) -> dict[str, Any]:
        """Kafka Connect's validation result: `{"name", "error_count", "configs": [...]}`."""

    @abstractmethod
    def plugins(self) -> list[PluginInfo]:
        """Connector, transform and converter plugins this worker can load."""

    @abstractmethod
    def reload_plugins(self) -> list[str]:
        """Rescan `pluginPaths`; the modules (re)loaded."""

    @abstractmethod
    def plugin_config(self, class_name: str) -> list[dict[str, Any]]:
        """The config keys of a connector class (runtime keys included), Kafka Connect style."""

    @abstractmethod
    def topics(self) -> list[dict[str, Any]]:
        """Topics of the bus with their queues' offset ranges."""

    @abstractmethod
    def allocated_connectors(self) -> dict[str, dict[str, str]]:
        """`{name: config}` of the connectors running on the worker asked."""

    @abstractmethod
    def allocated_tasks(self) -> dict[str, list[dict[str, Any]]]:
        """The worker's tasks grouped as RocketMQ Connect groups them (pending, running, …)."""
