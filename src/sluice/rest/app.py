"""Builds the FastAPI application: both faces, their error bodies, OpenAPI at `/docs`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from sluice.rest import console, metrics, rocketmq, topics, v1
from sluice.rest._auth import AuthMiddleware, RestSecurity
from sluice.runtime.herder import Herder, HerderError
from sluice.runtime.secrets import install_log_scrubber


def error_response(request: Request, status: int, message: str) -> JSONResponse:
    """An error in the shape of the face that was called (`/v1` or RocketMQ Connect's)."""
    if request.url.path.startswith("/v1"):
        return JSONResponse({"error_code": status, "message": message}, status_code=status)
    return JSONResponse({"errorCode": status, "message": message}, status_code=status)


def create_app(herder: Herder, security: RestSecurity | None = None) -> FastAPI:
    """The REST API of one worker; every route calls `herder` and nothing else.

    `security` (from the worker config's `rest.*` keys) adds authentication and roles."""
    app = FastAPI(
        title="sluice worker",
        summary="RocketMQ Connect compatible REST API, plus a resource API under /v1",
    )
    app.state.herder = herder
    app.include_router(rocketmq.router)
    app.include_router(v1.router)
    app.include_router(metrics.router)
    app.include_router(topics.router)
    app.include_router(console.router)

    @app.exception_handler(HerderError)
    async def _herder_error(request: Request, exc: HerderError) -> JSONResponse:
        return error_response(request, exc.status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
            problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
        return error_response(request, 400, "invalid request: " + "; ".join(problems))

    if security is not None and security.credentials is not None:
        app.add_middleware(
            AuthMiddleware,
            mode=security.mode,
            credentials=security.credentials,
            metrics_open=security.metrics_open,
        )
    # every worker serves this app: its log handlers are set up by now
    install_log_scrubber()
    return app
