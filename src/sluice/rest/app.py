"""Builds the FastAPI application: both faces, their error bodies, OpenAPI at `/docs`.

Every error reaches the wire here, in the shape of the face that was called: `/v1` answers
`{"error_code", "message", "code", "key", "suggestion", "errors"}` (Kafka Connect's two fields
first), the RocketMQ Connect face `{"errorCode", "message", "code", "key", "suggestion",
"errors"}`. `errors` lists every problem of a config when there are several. A store that does
not answer (the cluster store's PostgreSQL down, SQLite locked) is a 503 naming it, not a 500.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

import sluice
from sluice.rest import console, metrics, rocketmq, topics, v1
from sluice.rest._auth import HEALTH_PATH, AuthMiddleware, RestSecurity, is_v1_face
from sluice.rest._common import CONFIG_SCHEMA
from sluice.rest._cross_site import NO_FRAMES, CrossSiteGuard, NoFraming
from sluice.rest._limits import BodyLimit
from sluice.rest._listing import SharedRenders
from sluice.rest._log_lines import install_log_escaper
from sluice.rest._routes import GuardedRoute, writes
from sluice.runtime.herder import Herder, HerderError
from sluice.runtime.herder.booting import BootingHerder
from sluice.runtime.secrets import install_log_scrubber, scrub
from sluice.runtime.stores import STORE_ERRORS, store_outage

log = logging.getLogger(__name__)


def error_body(
    request: Request,
    status: int,
    message: str,
    *,
    code: str | None = None,
    key: str | None = None,
    suggestion: str | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The error body of the face `request` called."""
    status_key = "error_code" if is_v1_face(request.url.path) else "errorCode"
    return {
        status_key: status,
        "message": message,
        "code": code,
        "key": key,
        "suggestion": suggestion,
        "errors": errors or [],
    }


def error_response(request: Request, status: int, message: str, **fields: Any) -> JSONResponse:
    """An error in the shape of the face that was called (`/v1` or RocketMQ Connect's)."""
    headers = fields.pop("headers", None)
    return JSONResponse(
        error_body(request, status, message, **fields), status_code=status, headers=headers
    )


class ProblemBody(BaseModel):
    """One bad key of a config (or one problem of a request)."""

    code: str
    key: str
    message: str
    suggestion: str | None = None


class V1Error(BaseModel):
    """The `/v1` error body (Kafka Connect's `error_code` and `message`, then sluice's)."""

    error_code: int
    message: str
    code: str | None = None
    key: str | None = None
    suggestion: str | None = None
    errors: list[ProblemBody] = []


class RocketMQError(BaseModel):
    """The RocketMQ Connect face's error body."""

    errorCode: int
    message: str
    code: str | None = None
    key: str | None = None
    suggestion: str | None = None
    errors: list[ProblemBody] = []


_WHY = {
    400: "Invalid request: a bad parameter, body or config key (every bad key in `errors`)",
    404: "No such connector, task, plugin, topic or route",
    408: "The request body did not arrive within rest.request.body.timeout.ms",
    409: "The request does not fit the connector's state",
    429: (
        "Too many: a create past the worker's max.connectors, or (rest.auth) too many failed "
        "credential checks from this address (`Retry-After` says when to try again)"
    ),
    500: "The worker failed unexpectedly",
    503: "The worker is still starting, or a store it needs does not answer (the message says "
    "which); retry after Retry-After",
    401: "No valid credentials (rest.auth): the `WWW-Authenticate` header names the scheme",
    403: (
        "A change asked by read-only credentials or by a browser's cross-site request, or a "
        "Host a worker listening on loopback only does not answer for"
    ),
    413: "The request body is larger than the worker's rest.request.max.bytes",
}


def _statuses(path: str, method: str) -> tuple[int, ...]:
    """The error statuses the route at `path` answers besides 2xx (see `sluice.runtime.herder`:
    BadRequest 400, NotFound 404, Conflict 409, TooMany 429; a store down 503)."""
    statuses = [400, 404, 500, 503]
    mutates_config = method in ("post", "put") and (
        path in ("/v1/connectors", "/connectors/{name}") or path.endswith(("/{name}", "/config"))
    )
    creates = mutates_config or (path == "/connectors/{name}" and method == "get")
    if creates or path.endswith(("/offsets", "/push", "/task/adjust")):
        statuses.append(409)
    if creates:
        statuses.append(429)  # max.connectors
    return tuple(sorted(statuses))


def _guarded(path: str, security: RestSecurity | None) -> bool:
    if security is None or security.mode == "none":
        return False
    return path != HEALTH_PATH and not (security.metrics_open and path == "/metrics")


def _auth_statuses(
    path: str, method: str, operation: dict[str, Any], security: RestSecurity | None
) -> tuple[int, ...]:
    """401 and 429 (failed checks) on every route `rest.auth` guards, and 403 on those a
    read-only user may not call."""
    if not _guarded(path, security):
        return ()
    return (401, 403, 429) if writes(method, operation) else (401, 429)


def _document_security(schema: dict[str, Any], security: RestSecurity) -> None:
    """The scheme `rest.auth` asks for (HTTP basic or bearer), required by every route it
    guards (an open `/metrics` says it needs none)."""
    name = "basic" if security.mode == "basic" else "token"
    scheme = {"type": "http", "scheme": "basic" if name == "basic" else "bearer"}
    schema["components"]["securitySchemes"] = {name: scheme}
    schema["security"] = [{name: []}]
    for path, operations in schema.get("paths", {}).items():
        if not _guarded(path, security):
            for operation in operations.values():
                operation["security"] = []


#: RocketMQ Connect routes that take a config map as JSON in a query parameter.
_JSON_QUERY = {("/connectors/{name}", "get"), ("/plugin/config/validate", "get")}


def _describe_raw_inputs(schema: dict[str, Any]) -> None:
    """What the RocketMQ Connect face reads by hand: a JSON config map in `?config=` or as the
    raw body of `POST /connectors/{name}`, and a required `?plugin=` (the handlers parse them
    themselves, to answer RocketMQ Connect's messages)."""
    paths = schema.get("paths", {})
    for path, method in _JSON_QUERY:
        operation = paths[path][method]
        operation["parameters"] = [
            p for p in operation.get("parameters", []) if p.get("name") != "config"
        ] + [
            {
                "name": "config",
                "in": "query",
                "required": True,
                "description": "the connector config map as JSON",
                "content": {"application/json": {"schema": CONFIG_SCHEMA}},
            }
        ]
    for parameter in paths["/plugin/config"]["get"].get("parameters", []):
        if parameter.get("name") == "plugin":
            parameter["required"] = True
            parameter["schema"] = {"type": "string", "minLength": 1, "title": "Plugin"}
    paths["/connectors/{name}"]["post"]["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": CONFIG_SCHEMA}},
    }


def _document_errors(app: FastAPI, security: RestSecurity | None = None) -> dict[str, Any]:
    """The OpenAPI document with every error status each route answers and its body; FastAPI's
    default 422 is gone (validation errors are answered as 400). With `rest.auth` on, the
    security scheme, and the 401 (and, for mutations, 403) of every route it guards."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (ProblemBody, V1Error, RocketMQError):
        components[model.__name__] = model.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
    _describe_raw_inputs(schema)
    for path, operations in schema.get("paths", {}).items():
        body = "V1Error" if is_v1_face(path) else "RocketMQError"
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            statuses = _statuses(path, method) + _auth_statuses(path, method, operation, security)
            if "requestBody" in operation:
                statuses += (408, 413)  # sluice.rest._limits
            if 403 not in statuses:
                statuses += (403,)  # sluice.rest._cross_site
            for status in sorted(set(statuses)):
                responses[str(status)] = {
                    "description": _WHY[status],
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}
                    },
                }
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    if security is not None and security.mode != "none":
        _document_security(schema, security)
    app.openapi_schema = schema
    return schema


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document lists for `path`, so `Allow` and the document agree by
    construction. The most specific path wins (`/connectors/list` over `/connectors/{name}`),
    as the document describes it."""
    found: dict[int, set[str]] = {}
    for template, operations in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            found.setdefault(template.count("{"), set()).update(m.upper() for m in operations)
    return sorted(found[min(found)]) if found else []


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    """A validation error's location as the user wrote it: `query param 'plugin'`,
    `path param 'name'`, `offsets[0].partition`, `body`."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] in ("query", "path", "header"):
        return f"{parts[0]} param {parts[1]!r}"
    if parts and parts[0] == "body":
        parts = parts[1:]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def _json_position(body: bytes, pos: int) -> str:
    text = body.decode("utf-8", "replace")
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column} (char {pos})"


def create_app(herder: Herder, security: RestSecurity | None = None) -> FastAPI:
    """The REST API of one worker; every route calls `herder` and nothing else.

    `security` (from the worker config's `rest.*` keys) adds authentication and roles."""
    app = FastAPI(
        title="sluice worker",
        version=sluice.__version__,
        summary="RocketMQ Connect compatible REST API, plus a resource API under /v1",
        description=(
            "Kafka Connect tooling: use `/v1` as the base URL (Kafka Connect's bodies and "
            "errors). The root paths answer in RocketMQ Connect's `{status, body}` envelope."
        ),
    )
    app.router.route_class = GuardedRoute  # `GET /` below; the routers set their own
    app.state.herder = herder
    app.state.renders = SharedRenders()
    app.include_router(rocketmq.router)
    app.include_router(v1.router)
    app.openapi = lambda: _document_errors(app, security)  # type: ignore[method-assign]

    @app.get("/", tags=["v1"])
    def root() -> dict[str, Any]:
        """The worker's version (Kafka Connect's `GET /`)."""
        return {"version": sluice.__version__, "commit": None, "worker_id": herder.worker_id}

    @app.get(HEALTH_PATH, tags=["v1"], responses={503: {"description": "Still starting"}})
    def health() -> JSONResponse:
        """Whether the worker is up and ready to serve requests (Kafka Connect's KIP-1017), for
        liveness and readiness probes: 200 once its Spark session, stores and herder are built,
        503 while it starts. Open without credentials; it tells nothing else."""
        if isinstance(herder, BootingHerder) and not herder.is_ready:
            body = {"status": "starting", "message": "the worker is still starting"}
            return JSONResponse(body, status_code=503, headers={"Retry-After": "2"})
        return JSONResponse({"status": "healthy", "message": "the worker is ready"})

    app.include_router(metrics.router)
    app.include_router(topics.router)
    app.include_router(console.router)

    @app.exception_handler(HerderError)
    async def _herder_error(request: Request, exc: HerderError) -> JSONResponse:
        return error_response(
            request,
            exc.status,
            exc.message,
            code=exc.code,
            key=exc.key,
            suggestion=exc.suggestion,
            errors=exc.errors,
            # a worker still booting (503): worth asking again soon
            headers={"Retry-After": "2"} if exc.status == 503 else None,
        )

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(getattr(exc, "headers", None) or {})
        method, path = request.method, request.url.path
        suggestion = None
        if exc.status_code in (404, 405) and method in _allowed_methods(app, f"/v1{path}"):
            # Kafka Connect's paths typed without the prefix (`POST /connectors`)
            suggestion = f"Kafka Connect's routes are under /v1 here: {method} /v1{path}"
        if exc.status_code == 404:
            message = f"no route {method} {path}"
        elif exc.status_code == 405:
            # Starlette names the methods of the first route on the path only; a path served by
            # several routes (GET, PUT, DELETE of one connector) allows them all.
            allowed = _allowed_methods(app, path)
            headers["Allow"] = ", ".join(allowed)
            message = (
                f"method {request.method} is not allowed on {request.url.path} "
                f"(allowed: {', '.join(allowed)})"
            )
        else:
            message = str(exc.detail)
        return error_response(
            request,
            exc.status_code,
            message,
            code="request.route" if exc.status_code in (404, 405) else "request.invalid",
            suggestion=suggestion,
            headers=headers or None,
        )

    async def _failed(request: Request, exc: Exception) -> JSONResponse:
        """An exception no route turned into an answer: a store that does not answer is a 503
        naming it (with `Retry-After`), anything else a 500."""
        outage = store_outage(exc)
        if outage is not None:
            log.warning("%s %s: %s", request.method, request.url.path, outage)
            return error_response(
                request,
                503,
                scrub(outage),
                code="store.unavailable",
                suggestion="retry when the store answers again (Retry-After)",
                headers={"Retry-After": "5", **dict(_frame_headers())},
            )
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(
            request,
            500,
            scrub(f"internal error: {type(exc).__name__}: {exc}"),
            code="internal",
            headers=dict(_frame_headers()),  # answered outside NoFraming (Starlette's last resort)
        )

    for store_error in STORE_ERRORS:
        app.add_exception_handler(store_error, _failed)
    app.add_exception_handler(Exception, _failed)

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        # Python's JSON parser recurses once per level: a body nested deeper than the
        # interpreter's limit fails in the parser (FastAPI's, for /v1 bodies), not as bad JSON
        return error_response(
            request,
            400,
            "invalid request: the JSON document is nested too deeply",
            code="request.invalid",
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        body = await request.body()
        for error in exc.errors():
            loc = [p for p in error.get("loc", ()) if p != "body"]
            if error.get("type") == "json_invalid":
                pos = next((p for p in error.get("loc", ()) if isinstance(p, int)), 0)
                reason = (error.get("ctx") or {}).get("error", "invalid")
                problems.append(f"malformed JSON at {_json_position(body, pos)}: {reason}")
                continue
            if not loc and body.strip():  # sent without a JSON content type: parse it here
                try:
                    json.loads(body)
                except ValueError as bad:
                    where = _json_position(body, getattr(bad, "pos", 0))
                    reason = getattr(bad, "msg", str(bad))
                    problems.append(f"malformed JSON at {where}: {reason}")
                    continue
            problems.append(f"{_where(error.get('loc', ()))}: {error.get('msg', 'invalid')}")
        return error_response(
            request, 400, "invalid request: " + "; ".join(problems), code="request.invalid"
        )

    # The guards, innermost first (Starlette runs the last one added first): the body is read
    # only once the caller may send one. Roles and cross-site requests are checked by the
    # route a request reaches, which knows whether it writes (sluice.rest._routes).
    limits = security if security is not None else RestSecurity()
    app.add_middleware(
        BodyLimit, max_bytes=limits.max_request_bytes, timeout_s=limits.body_timeout_s
    )
    app.add_middleware(CrossSiteGuard, loopback_only=limits.loopback_only)
    if security is not None and security.credentials is not None:
        app.add_middleware(
            AuthMiddleware,
            mode=security.mode,
            credentials=security.credentials,
            metrics_open=security.metrics_open,
            failures_per_minute=security.failures_per_minute,
        )
    app.add_middleware(NoFraming)
    # every worker serves this app: its log handlers are set up by now
    install_log_scrubber()
    install_log_escaper()
    return app


def _frame_headers() -> list[tuple[str, str]]:
    return [(k.decode(), v.decode()) for k, v in NO_FRAMES]


__all__ = ["create_app", "error_body", "error_response"]
