"""The `/v1` resource API: proper verbs and status codes, Kafka Connect's shapes where it has one.

Errors are `{"error_code": <HTTP status>, "message": "…"}`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from sluice.rest._common import (
    CONFIG_SCHEMA,
    CONNECTOR_NAME_MAX,
    NAME_PATTERN,
    ConfigValue,
    ConnectorName,
    herder_of,
)
from sluice.rest._listing import shared_json
from sluice.rest._routes import WRITES, GuardedRoute
from sluice.rest._shapes import (
    info_body,
    position_body,
    status_body,
    task_config_body,
    task_status_body,
    topic_body,
)
from sluice.runtime.herder import BadRequest, NotFound

router = APIRouter(prefix="/v1", tags=["v1"], route_class=GuardedRoute)

#: A connector config map as the whole JSON body.
ConfigBody = Annotated[dict[str, ConfigValue], Body(json_schema_extra=CONFIG_SCHEMA)]
#: A config to validate: `connector.class` may come from the path instead.
ValidateBody = Annotated[dict[str, ConfigValue], Body()]
#: A push sink's limits to change.
PushBody = Annotated[dict[str, int | float], Body()]


class NewConnector(BaseModel):
    """The body of `POST /v1/connectors`."""

    name: str = Field(min_length=1, max_length=CONNECTOR_NAME_MAX, pattern=NAME_PATTERN)
    config: Annotated[dict[str, ConfigValue], Field(json_schema_extra=CONFIG_SCHEMA)]


class OffsetEntry(BaseModel):
    """One partition's position; `"offset": null` removes it."""

    partition: dict[str, Any] = Field(description="a partition as GET …/offsets shows it")
    offset: dict[str, Any] | None = Field(description="the position, or null to remove it")


class Offsets(BaseModel):
    """`{"offsets": [{"partition": {…}, "offset": {…} | null}]}` as the offsets API shows it."""

    offsets: list[OffsetEntry]


@router.get("/connectors")
async def list_connectors(
    request: Request, expand: Annotated[list[Literal["status", "info"]] | None, Query()] = None
) -> Any:
    """Connector names; with `?expand=status` and/or `?expand=info` (repeatable, as in Kafka
    Connect) a map of name to the requested parts (rendered once for the requests that wait
    together: see `sluice.rest._listing`)."""
    herder = herder_of(request)
    if not expand:
        return await run_in_threadpool(herder.connectors)
    for part in expand:
        if part not in ("status", "info"):
            raise BadRequest(f"expand must be 'status' or 'info', got {part!r}", key="expand")
    parts = tuple(dict.fromkeys(expand))
    fetch = {
        "status": lambda name: status_body(herder.status(name)),
        "info": lambda name: info_body(herder.connector_info(name)),
    }

    def build() -> dict[str, Any]:
        return {name: {part: fetch[part](name) for part in parts} for name in herder.connectors()}

    return await shared_json(request, ("v1.list", parts), build)


@router.post("/connectors", status_code=201)
def create_connector(body: NewConnector, request: Request) -> dict[str, Any]:
    info, _ = herder_of(request).put_connector(body.name, body.config, create_only=True)
    return info_body(info)


@router.get("/connectors/{name}")
def get_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    return info_body(herder_of(request).connector_info(name))


@router.put("/connectors/{name}")
@router.put("/connectors/{name}/config")
def put_connector(
    name: ConnectorName, request: Request, response: Response, config: ConfigBody
) -> dict[str, Any]:
    info, created = herder_of(request).put_connector(name, config)
    response.status_code = 201 if created else 200
    return info_body(info)


@router.get("/connectors/{name}/config")
def get_config(name: ConnectorName, request: Request) -> dict[str, str]:
    return herder_of(request).connector_config(name)


@router.delete("/connectors/{name}", status_code=204)
def delete_connector(name: ConnectorName, request: Request) -> Response:
    herder_of(request).delete_connector(name)
    return Response(status_code=204)


@router.get("/connectors/{name}/status")
def status(name: ConnectorName, request: Request) -> dict[str, Any]:
    return status_body(herder_of(request).status(name))


@router.get("/connectors/{name}/tasks")
def tasks(name: ConnectorName, request: Request) -> list[dict[str, Any]]:
    return [task_config_body(t) for t in herder_of(request).task_configs(name)]


@router.get("/connectors/{name}/tasks/{task}/status")
def task_status(name: ConnectorName, task: int, request: Request) -> dict[str, Any]:
    return task_status_body(herder_of(request).task_status(name, task))


@router.put("/connectors/{name}/pause", status_code=202)
def pause(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).pause(name)
    return status_body(herder_of(request).status(name))


@router.put("/connectors/{name}/resume", status_code=202)
def resume(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).resume(name)
    return status_body(herder_of(request).status(name))


@router.put("/connectors/{name}/stop", status_code=202)
def stop(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).stop(name)
    return status_body(herder_of(request).status(name))


@router.post("/connectors/{name}/restart", status_code=202)
def restart(
    name: ConnectorName, request: Request, includeTasks: bool = False, onlyFailed: bool = False
) -> dict[str, Any]:
    """Kafka Connect's restart: with `onlyFailed=true` only a FAILED connector (or, with
    `includeTasks=true`, one with a FAILED task) restarts. A connector's tasks are partitions of
    one Spark query, so restarting restarts them all; answers the status after it."""
    herder = herder_of(request)
    if onlyFailed:
        status = herder.status(name)
        if not status.failed(include_tasks=includeTasks):
            return status_body(status)
    herder.restart(name)
    return status_body(herder.status(name))


@router.post("/connectors/{name}/tasks/{task}/restart", status_code=202)
def restart_task(name: ConnectorName, task: int, request: Request) -> dict[str, Any]:
    herder_of(request).restart(name, task)
    return status_body(herder_of(request).status(name))


@router.get("/connectors/{name}/offsets")
def get_offsets(name: ConnectorName, request: Request) -> dict[str, Any]:
    return {"offsets": [position_body(p) for p in herder_of(request).offsets(name)]}


@router.patch("/connectors/{name}/offsets")
def alter_offsets(name: ConnectorName, body: Offsets, request: Request) -> dict[str, Any]:
    herder_of(request).alter_offsets(name, [e.model_dump() for e in body.offsets])
    return {"message": f"The offsets of connector {name!r} have been altered"}


@router.delete("/connectors/{name}/offsets")
def reset_offsets(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).reset_offsets(name)
    return {"message": f"The offsets of connector {name!r} have been reset"}


@router.get("/connectors/{name}/progress")
def get_progress(name: ConnectorName, request: Request) -> dict[str, Any]:
    """The connector's recent micro-batches as Spark reports them (`durationMs` per phase:
    latestOffset, queryPlanning, walCommit, addBatch, commitOffsets, triggerExecution)."""
    return herder_of(request).query_progress(name)


@router.get("/connectors/{name}/push")
def get_push(name: ConnectorName, request: Request) -> dict[str, Any]:
    """A push sink's live limits and progress (totals, and each task's current micro-batch)."""
    return herder_of(request).push(name)


@router.patch("/connectors/{name}/push")
def tune_push(name: ConnectorName, body: PushBody, request: Request) -> dict[str, Any]:
    """Change a running push sink's limits (`concurrency`, `core_concurrency`,
    `per_target_concurrency`, `queue_limit`, `rate_limit`); its tasks apply them within ~1 s."""
    return herder_of(request).tune_push(name, body)


@router.get("/connectors/{name}/task/adjust", operation_id="adjust_push_get", openapi_extra=WRITES)
@router.post("/connectors/{name}/task/adjust", operation_id="adjust_push_post")
def adjust_push(
    name: ConnectorName,
    request: Request,
    consumerCurrentQueueSizeLimit: int | None = None,
    maxThreadSize: int | None = None,
    coreThreadSize: int | None = None,
) -> dict[str, Any]:
    """The EventBridge proposal's `/task/adjust?consumerCurrentQueueSizeLimit=&maxThreadSize=&
    coreThreadSize=`, an alias of `PATCH …/push`; any other query parameter is refused."""
    known = {"consumerCurrentQueueSizeLimit", "maxThreadSize", "coreThreadSize"}
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown parameter; use one of {', '.join(sorted(known))}")
    changes = {
        k: v
        for k, v in (
            ("consumerCurrentQueueSizeLimit", consumerCurrentQueueSizeLimit),
            ("maxThreadSize", maxThreadSize),
            ("coreThreadSize", coreThreadSize),
        )
        if v is not None
    }
    return herder_of(request).tune_push(name, changes)


@router.get("/connector-plugins")
def plugins(request: Request, connectorsOnly: bool = True) -> list[dict[str, Any]]:
    """Connector plugins; with `?connectorsOnly=false` also transforms, converters and predicates
    (Kafka Connect's query parameter)."""
    return [
        {
            "class": p.class_name,
            "type": p.type,
            "version": p.version,
            "aliases": list(p.aliases),
            "delivery": p.delivery,
            "summary": p.summary,
        }
        for p in herder_of(request).plugins()
        if not connectorsOnly or p.type in ("source", "sink")
    ]


@router.put("/connector-plugins/{class_name}/config/validate")
def validate(class_name: str, request: Request, config: ValidateBody) -> dict[str, Any]:
    """Validate a config (Kafka Connect's route). Admin only, as every PUT: validating builds
    the connector's network clients."""
    return herder_of(request).validate(config, class_name)


@router.get("/topics")
def topics(request: Request) -> list[dict[str, Any]]:
    return [topic_body(t) for t in herder_of(request).topics()]


@router.get("/topics/{name}")
def topic(name: str, request: Request) -> dict[str, Any]:
    for t in herder_of(request).topics():
        if t.name == name:
            return topic_body(t)
    raise NotFound(f"topic {name!r} not found")
