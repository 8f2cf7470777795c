"""RocketMQ Connect's REST endpoints: same paths and methods (GET-style mutations included, each
declared `openapi_extra=WRITES`: see `sluice.rest._routes`), the `{"status": 200, "body": …}`
envelope on success, real HTTP status codes on errors."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from sluice.rest._common import ConnectorName, herder_of, parse_json_object
from sluice.rest._listing import shared_json
from sluice.rest._routes import WRITES, GuardedRoute
from sluice.rest._shapes import (
    allocated_tasks_body,
    info_body,
    status_body,
    task_config_body,
    task_status_body,
)
from sluice.runtime.herder import BadRequest, ConnectorInfo

router = APIRouter(tags=["RocketMQ Connect"], route_class=GuardedRoute)


def ok(body: Any) -> dict[str, Any]:
    return {"status": 200, "body": body}


@router.get("/getClusterInfo")
def cluster_info(request: Request) -> dict[str, Any]:
    return ok(herder_of(request).workers())


@router.get("/connectors/list", response_model=dict[str, Any])
async def list_connectors(request: Request) -> Response:
    """Every connector's status and info (its config: rendered once for the requests that wait
    together, see `sluice.rest._listing`)."""
    herder = herder_of(request)

    def build() -> dict[str, Any]:
        return ok(
            {
                name: {
                    "status": status_body(herder.status(name)),
                    "info": info_body(herder.connector_info(name)),
                }
                for name in herder.connectors()
            }
        )

    return await shared_json(request, "rocketmq.list", build)


@router.get("/allocated/connectors", response_model=dict[str, Any])
async def allocated_connectors(request: Request) -> Response:
    """The configs of the connectors this worker runs (shared as `/connectors/list` is)."""
    herder = herder_of(request)
    return await shared_json(
        request, "rocketmq.allocated", lambda: ok(herder.allocated_connectors())
    )


@router.get("/allocated/tasks")
def allocated_tasks(request: Request) -> dict[str, Any]:
    return ok(allocated_tasks_body(herder_of(request).allocated_tasks()))


def _all(request: Request, action: str, done: str) -> dict[str, Any]:
    herder = herder_of(request)
    names = herder.connectors()
    if not names:
        return ok(f"No connector needs to be {done}, please add connector first")
    for name in names:
        getattr(herder, action)(name)
    return ok(f"{len(names)} connectors are {done}")


@router.get("/connectors/stop/all", openapi_extra=WRITES)
def stop_all(request: Request) -> dict[str, Any]:
    return _all(request, "delete_connector", "deleted")


@router.get("/connectors/pause/all", openapi_extra=WRITES)
def pause_all(request: Request) -> dict[str, Any]:
    return _all(request, "pause", "paused")


@router.get("/connectors/resume/all", openapi_extra=WRITES)
def resume_all(request: Request) -> dict[str, Any]:
    return _all(request, "resume", "resumed")


@router.get("/connectors/{name}/config")
def connector_config(name: ConnectorName, request: Request) -> dict[str, Any]:
    return ok(info_body(herder_of(request).connector_info(name)))


@router.get("/connectors/{name}/status")
def connector_status(name: ConnectorName, request: Request) -> dict[str, Any]:
    return ok(status_body(herder_of(request).status(name)))


@router.get("/connectors/{name}/tasks")
def task_configs(name: ConnectorName, request: Request) -> dict[str, Any]:
    return ok([task_config_body(t) for t in herder_of(request).task_configs(name)])


@router.get("/connectors/{name}/tasks/{task}/status")
def task_status(name: ConnectorName, task: int, request: Request) -> dict[str, Any]:
    return ok(task_status_body(herder_of(request).task_status(name, task)))


@router.get("/connectors/{name}/stop", openapi_extra=WRITES)
def stop_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).delete_connector(name)
    return ok(f"Connector [{name}] deleted successfully")


@router.get("/connectors/{name}/delete", openapi_extra=WRITES)
def delete_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    """Remove the connector's config (RocketMQ Connect's README lists it beside `…/stop`)."""
    herder_of(request).delete_connector(name)
    return ok(f"Connector [{name}] deleted successfully")


@router.get("/connectors/{name}/pause", openapi_extra=WRITES)
def pause_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).pause(name)
    return ok(f"Connector [{name}] paused successfully")


@router.get("/connectors/{name}/resume", openapi_extra=WRITES)
def resume_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    herder_of(request).resume(name)
    return ok(f"Connector [{name}] resumed successfully")


@router.post("/connectors/{name}")
async def create_connector(name: ConnectorName, request: Request) -> dict[str, Any]:
    """Create (or update) a connector from the JSON config map in the body."""
    config = parse_json_object(await request.body(), "request body")
    info, _ = await run_in_threadpool(herder_of(request).put_connector, name, config)
    return _with_warnings(ok(herder_of(request).shown_config(config)), info)  # never a secret


@router.get("/connectors/{name}", openapi_extra=WRITES)
def create_connector_by_get(
    name: ConnectorName, request: Request, config: str = ""
) -> dict[str, Any]:
    """Create (or update) a connector from `?config=<url-encoded JSON config map>`."""
    parsed = parse_json_object(config, "query param 'config'")
    info, _ = herder_of(request).put_connector(name, parsed)
    return _with_warnings(ok(herder_of(request).shown_config(parsed)), info)  # never a secret


def _with_warnings(envelope: dict[str, Any], info: ConnectorInfo) -> dict[str, Any]:
    """The envelope with the config's warnings (unknown keys) beside `body`, when it has any."""
    if info.warnings:
        envelope["warnings"] = list(info.warnings)
    return envelope


@router.get("/plugin/reload", openapi_extra=WRITES)
def reload_plugins(request: Request) -> dict[str, Any]:
    herder_of(request).reload_plugins()
    return ok("Plugin reload succeeded")


def _plugin_body(info: Any) -> dict[str, Any]:
    data = asdict(info)
    return {
        "className": data["class_name"],
        "type": data["type"].upper(),
        "version": data["version"],
        "aliases": list(data["aliases"]),
        "delivery": data["delivery"],
        "summary": data["summary"],
    }


@router.get("/plugin/list")
def list_plugins(request: Request) -> dict[str, Any]:
    return ok([_plugin_body(p) for p in herder_of(request).plugins()])


@router.get("/plugin/list/connectors")
def list_connector_plugins(request: Request) -> dict[str, Any]:
    plugins = herder_of(request).plugins()
    return ok([_plugin_body(p) for p in plugins if p.type in ("source", "sink")])


@router.get("/plugin/config")
def plugin_config(request: Request, plugin: str = "") -> dict[str, Any]:
    """The config keys of `?plugin=<connector class>` (RocketMQ Connect leaves this empty)."""
    if not plugin:
        raise BadRequest("query param 'plugin' is required (a connector class name)")
    return ok(herder_of(request).plugin_config(plugin))


@router.get("/plugin/config/validate", openapi_extra=WRITES)
def validate_config(request: Request, config: str = "") -> dict[str, Any]:
    """Validate `?config=<JSON config map with connector.class>`. Admin only, and refused to a
    browser's cross-site request: validating builds the connector's network clients."""
    parsed = parse_json_object(config, "query param 'config'")
    if not parsed.get("connector.class"):
        raise BadRequest("connector.class: required key is missing")
    return ok(herder_of(request).validate(parsed))
