"""Builds the FastAPI application: both faces, their error bodies, OpenAPI at `/docs`.

Every error reaches the wire here, in the shape of the face that was called: `/v1` answers
`{"error_code", "message", "code", "key", "suggestion", "errors"}` (Kafka Connect's two fields
first), the RocketMQ Connect face `{"errorCode", "message", "code", "key", "suggestion",
"errors"}`. `errors` lists every problem of a config when there are several.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

import sluice
from sluice.rest import rocketmq, v1
from sluice.runtime.herder import Herder, HerderError


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
    status_key = "error_code" if request.url.path.startswith("/v1") else "errorCode"
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


def _json_position(body: bytes, pos: int) -> str:
    text = body.decode("utf-8", "replace")
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column} (char {pos})"


def create_app(herder: Herder) -> FastAPI:
    """The REST API of one worker; every route calls `herder` and nothing else."""
    app = FastAPI(
        title="sluice worker",
        version=sluice.__version__,
        summary="RocketMQ Connect compatible REST API, plus a resource API under /v1",
    )
    app.state.herder = herder
    app.include_router(rocketmq.router)
    app.include_router(v1.router)

    @app.get("/", tags=["v1"])
    def root() -> dict[str, Any]:
        """The worker's version (Kafka Connect's `GET /`)."""
        return {"version": sluice.__version__, "commit": None, "worker_id": herder.worker_id}

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
        )

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(
            request,
            exc.status_code,
            message,
            code="request.route" if exc.status_code in (404, 405) else "request.invalid",
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        body = await request.body()
        for error in exc.errors():
            loc = [str(p) for p in error.get("loc", ()) if p != "body"]
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
            where = ".".join(loc)
            problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
        return error_response(
            request, 400, "invalid request: " + "; ".join(problems), code="request.invalid"
        )

    return app


__all__ = ["create_app", "error_body", "error_response"]
