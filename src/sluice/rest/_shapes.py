"""The herder's typed results as JSON bodies: RocketMQ Connect's shapes, which `/v1` shares.

`info_body` → `{"name", "config", "tasks": [{"connector", "task"}], "type"}` (plus `warnings`
when the config has some); `status_body` → `{"name", "connector": {"state", "trace",
"workerId"}, "tasks": [{"id", "state", "trace", "workerId"}], "type"}`, a task riding out an
outage with `"retrying": {"since": epoch ms, "attempts", "error"}` too (docs/operations.md). The
one place where a result becomes a body: both faces call these.
"""

from __future__ import annotations

from typing import Any

from sluice.runtime.herder import (
    AllocatedTask,
    ConnectorInfo,
    ConnectorStatus,
    Position,
    State,
    TaskConfig,
    TaskId,
    TaskStatus,
    TopicSummary,
)


def _task_id(task: TaskId) -> dict[str, Any]:
    return {"connector": task.connector, "task": task.task}


def info_body(info: ConnectorInfo) -> dict[str, Any]:
    body = {
        "name": info.name,
        "config": info.config,
        "tasks": [_task_id(t) for t in info.tasks],
        "type": info.type,
    }
    if info.warnings:
        body["warnings"] = list(info.warnings)
    return body


def _state(state: State) -> dict[str, Any]:
    return {"state": state.state, "trace": state.trace, "workerId": state.worker_id}


def task_status_body(task: TaskStatus) -> dict[str, Any]:
    body = {"id": task.id, **_state(task.state)}
    if task.retrying is not None:  # only then: a Kafka Connect client sees its usual shape
        note = task.retrying
        body["retrying"] = {"since": note.since_ms, "attempts": note.attempts, "error": note.error}
    return body


def status_body(status: ConnectorStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "connector": _state(status.connector),
        "tasks": [task_status_body(t) for t in status.tasks],
        "type": status.type,
        "delivery": status.delivery,
    }


def task_config_body(task: TaskConfig) -> dict[str, Any]:
    return {"id": _task_id(task.id), "config": task.config}


def position_body(position: Position) -> dict[str, Any]:
    return {"partition": position.partition, "offset": position.offset}


def topic_body(topic: TopicSummary) -> dict[str, Any]:
    return {
        "name": topic.name,
        "queues": [
            {"queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset}
            for q in topic.queues
        ],
    }


def allocated_tasks_body(groups: dict[str, list[AllocatedTask]]) -> dict[str, Any]:
    """RocketMQ Connect's groups; each task `{"connector", "task", "id", "state", "trace",
    "workerId"}`."""
    return {
        group: [
            {"connector": t.connector, "task": t.status.id, **task_status_body(t.status)}
            for t in tasks
        ]
        for group, tasks in groups.items()
    }
