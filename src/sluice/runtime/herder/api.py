"""The control-plane interface (Kafka Connect calls it the herder): all that the REST API calls.

Standalone and distributed modes are two implementations of `Herder`; the worker picks one when it
is wired together. Errors are typed by what went wrong, so each face of the REST API maps them to
its own HTTP status and body.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from sluice.engine.settings import as_posted
from sluice.runtime.metrics.figures import MetricsReport
from sluice.runtime.plugins import PluginInfo
from sluice.runtime.secrets import redact


# ------------------------------------------------------------------------------ typed results
# What the herder answers; `sluice.rest` maps each to the RocketMQ Connect and `/v1` shapes.
@dataclass(frozen=True)
class TaskId:
    """One task of a connector (its index in the connector's task configs)."""

    connector: str
    task: int


@dataclass(frozen=True)
class ConnectorInfo:
    """A connector as stored: its config as it may be shown (passwords masked), its tasks and
    its kind (`source`, `sink`, or `unknown` when its class cannot be loaded). `warnings` are
    the config's non-fatal problems (unknown keys), filled only in `put_connector`'s answer."""

    name: str
    config: dict[str, str]
    tasks: tuple[TaskId, ...]
    type: str
    warnings: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class State:
    """A connector's or task's state (UNASSIGNED, RUNNING, PAUSED, STOPPED, FAILED, RESTARTING,
    DESTROYED), its failure trace (secrets scrubbed) and the worker that reported it."""

    state: str
    trace: str | None
    worker_id: str


@dataclass(frozen=True)
class Retrying:
    """A RUNNING task riding out an outage: retrying since `since_ms` (epoch ms), `attempts`
    retries so far, the last failing with `error` (its first line, secrets scrubbed)."""

    since_ms: int
    attempts: int
    error: str


@dataclass(frozen=True)
class TaskStatus:
    """The state of task `id` of a connector, and whether it is retrying (RUNNING tasks only:
    Kafka Connect has no state for it, and clients switch on the state)."""

    id: int
    state: State
    retrying: Retrying | None = None


@dataclass(frozen=True)
class ConnectorStatus:
    """A connector's own state and its tasks' (Spark runs them as one query: they share it
    unless one was reported apart)."""

    name: str
    connector: State
    tasks: tuple[TaskStatus, ...]
    type: str
    delivery: str  # the guarantee the connector gives with its config (`delivery_of`)

    def failed(self, *, include_tasks: bool = False) -> bool:
        """Whether the connector (or, with `include_tasks`, one of its tasks) is FAILED."""
        return self.connector.state == "FAILED" or (
            include_tasks and any(t.state.state == "FAILED" for t in self.tasks)
        )


@dataclass(frozen=True)
class TaskConfig:
    """The config one task was started with (passwords masked)."""

    id: TaskId
    config: dict[str, str]


@dataclass(frozen=True)
class Position:
    """One source partition (or topic queue) and the position committed for it."""

    partition: dict[str, Any]
    offset: dict[str, Any]


@dataclass(frozen=True)
class QueueOffsets:
    """The retained offsets of one queue: `min_offset <= offset < max_offset`."""

    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class TopicSummary:
    """A topic of the bus and its queues' offset ranges."""

    name: str
    queues: tuple[QueueOffsets, ...] = field(default=())


@dataclass(frozen=True)
class AllocatedTask:
    """A task as `/allocated/tasks` lists it: its connector and its status."""

    connector: str
    status: TaskStatus


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


# A connector name: 1-249 characters, no `/`, no control characters (Kafka Connect refuses ISO
# control characters too), no white space at either end, and not `.` or `..` (the name is a
# folder of the store). Written without look-arounds so that JSON Schema tools (the OpenAPI
# document's pattern) read it as Python does; \s at the ends is Python's, which also covers
# the \x1c-\x1f and \x85 that str.strip() removes.
_EDGE = r"[^/\s\x00-\x1f\x7f-\x9f]"
_EDGE_NOT_DOT = r"[^/\s\x00-\x1f\x7f-\x9f.]"
_INNER = r"[^/\x00-\x1f\x7f-\x9f]"
CONNECTOR_NAME_PATTERN = (
    rf"^(?:{_EDGE_NOT_DOT}|{_EDGE_NOT_DOT}{_EDGE}|\.{_EDGE_NOT_DOT}|{_EDGE}{_INNER}+{_EDGE})$"
)
CONNECTOR_NAME_MAX = 249
_NAME_RE = re.compile(CONNECTOR_NAME_PATTERN)


def check_connector_name(name: str) -> None:
    """BadRequest when `name` cannot be a connector's name, saying which rule it breaks."""
    if len(name) > CONNECTOR_NAME_MAX:
        raise BadRequest(
            f"connector name {name[:40]!r}… is {len(name)} characters long; "
            f"at most {CONNECTOR_NAME_MAX} are allowed"
        )
    if _NAME_RE.fullmatch(name) is None:
        raise BadRequest(
            f"connector name {name!r} is not valid: non-empty, no '/', no control "
            "characters, no white space at either end, not '.' or '..'"
        )


class NotFound(HerderError):
    """No such connector, task or plugin."""

    status = 404
    code = "not.found"


class Conflict(HerderError):
    """The request does not fit the current state (exists already, must be stopped first…)."""

    status = 409
    code = "state.conflict"


class TooMany(HerderError):
    """A limit of the worker is reached (`max.connectors`); the key names the limit."""

    status = 429
    code = "limit.reached"


class Starting(HerderError):
    """The worker answers REST while its Spark session and stores are still being built; the
    request can be sent again in a few seconds (`Retry-After`)."""

    status = 503
    code = "worker.starting"


class Herder(ABC):
    """Connector lifecycle, status, offsets, plugins and topics of one Connect cluster.

    Reads answer typed results (the dataclasses above); `sluice.rest` maps them to the RocketMQ
    Connect and `/v1` shapes. The results that are documents rather than records (validation,
    plugin config, push progress, metrics, topic records) stay JSON-shaped dicts, described in
    each method's docstring. Every method may raise a `HerderError` subclass, which the REST
    layer maps to its HTTP status in one place.
    """

    worker_id: str

    @abstractmethod
    def start(self) -> None:
        """Bring the connectors this worker runs to their target states, then keep them there
        (threads of its own) until `close`. Called once, after the REST API is up."""

    @abstractmethod
    def close(self) -> None:
        """Stop this worker's queries gracefully (and, in a cluster, hand them over)."""

    def password_keys(self, class_name: str) -> list[str]:
        """The keys connector class `class_name` declares as passwords ([] if it is unknown)."""
        try:
            definitions = self.plugin_config(class_name)
        except HerderError:
            return []
        return [d["name"] for d in definitions if d.get("type") == "password"]

    def shown_config(self, config: dict[str, str]) -> dict[str, str]:
        """`config` as REST, CLI and console may show it: under the key names its user typed
        (Kafka Connect's `topics`, `tasks.max`… as posted, though it runs under sluice's), with
        password values masked (references kept as written). Every answer that carries a
        connector config goes through this."""
        secret = self.password_keys(str(config.get("connector.class", "")))
        return as_posted(redact(config, secret))

    @abstractmethod
    def metrics(self) -> MetricsReport:
        """What `/metrics` shows: this worker's figures of the registered metrics
        (`sluice.runtime.metrics.names`), read once from each store."""

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
        """Ids of the live workers, sorted (standalone: this worker only)."""

    @abstractmethod
    def connectors(self) -> list[str]:
        """Names of every connector of the cluster, sorted."""

    @abstractmethod
    def connector_info(self, name: str) -> ConnectorInfo:
        """The stored connector `name`; `NotFound` if there is no such connector."""

    @abstractmethod
    def connector_config(self, name: str) -> dict[str, str]:
        """The stored (normalised) config of `name`; `NotFound` if unknown."""

    @abstractmethod
    def put_connector(
        self, name: str, config: dict[str, Any], *, create_only: bool = False
    ) -> tuple[ConnectorInfo, bool]:
        """Create or update `name` with `config` after the create-time checks (`BadRequest`
        naming every bad key; `Conflict` with `create_only` when it exists, or when a change
        would make its stored positions unusable). Returns (its info with the config's
        warnings, whether it was created). An identical config is a no-op."""

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
    def status(self, name: str) -> ConnectorStatus:
        """The state of `name` and its tasks, with the id of the worker running it (read from
        the status store: any worker answers for the cluster); `NotFound` if unknown."""

    @abstractmethod
    def task_status(self, name: str, task: int) -> TaskStatus:
        """The state of task `task` of `name`; `NotFound` for an unknown connector or task."""

    @abstractmethod
    def task_configs(self, name: str) -> list[TaskConfig]:
        """The task configs of the running (or last) start of `name`, passwords masked."""

    @abstractmethod
    def offsets(self, name: str) -> list[Position]:
        """What `name` has committed, per partition (the position store, overlaid by a running
        query's last committed batch)."""

    @abstractmethod
    def alter_offsets(self, name: str, offsets: list[dict[str, Any]]) -> None:
        """Set (or, with `"offset": null`, remove) positions; the connector must be STOPPED."""

    @abstractmethod
    def reset_offsets(self, name: str) -> None:
        """Forget every position of `name` (it must be STOPPED; `Conflict` otherwise)."""

    @abstractmethod
    def query_progress(self, name: str) -> dict[str, Any]:
        """The recent micro-batches of connector `name`'s Spark query as Spark reports them:
        `{"connector", "query_id", "run_id", "batches": [{"batchId", "timestamp",
        "numInputRows", "durationMs": {phase: ms}}]}` (newest last; empty while it does not run
        here). `run_id` changes with each start of the query (a restart), `query_id` does not."""

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
    def topics(self) -> list[TopicSummary]:
        """Topics of the bus, sorted by name, with their queues' offset ranges."""

    @abstractmethod
    def allocated_connectors(self) -> dict[str, dict[str, str]]:
        """`{name: config}` (as shown) of the connectors running on the worker asked."""

    @abstractmethod
    def allocated_tasks(self) -> dict[str, list[AllocatedTask]]:
        """The tasks of the worker asked, grouped as RocketMQ Connect groups them:
        `pendingTasks`, `runningTasks`, `stoppingTasks`, `stoppedTasks`, `errorTasks`."""
