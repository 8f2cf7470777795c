"""Which requests write, declared beside each route, and the route that refuses them.

A request *writes* — it needs the `admin` role and a browser may not send it from another site —
when its method is not GET, HEAD or OPTIONS, or when its route is declared with
`openapi_extra=WRITES`: RocketMQ Connect's GETs that change state (create, stop, delete, pause,
resume, the `/all` routes, `/plugin/reload`), the EventBridge `GET …/task/adjust`, and
validation, which builds the connector's network clients. Every route of the app is a
`GuardedRoute`, which checks this in the route the router chose, before anything of the request
is read or run: so a route is classified where it is declared, by the router's own choice, and
never by a list of paths kept beside the routes (that list missed `GET …/delete`). The OpenAPI
document shows the mark as `x-sluice-writes: true`.

Authentication (401) is the job of `sluice.rest._auth.AuthMiddleware`, which leaves the
principal in the request's state; the Host check is `sluice.rest._cross_site.CrossSiteGuard`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from sluice.rest._auth import Principal, error_json
from sluice.rest._cross_site import foreign_origin

#: `openapi_extra` of a GET route that writes (see the module docstring)
WRITES: dict[str, Any] = {"x-sluice-writes": True}
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def writes(method: str, openapi_extra: dict[str, Any] | None) -> bool:
    """True if a request with `method` to a route declared with `openapi_extra` writes."""
    return method.upper() not in READ_METHODS or bool((openapi_extra or {}).get("x-sluice-writes"))


def route_writes(route: APIRoute, method: str) -> bool:
    """True if `method` on `route` writes."""
    return writes(method, route.openapi_extra)


def refusal(request: Request) -> Response | None:
    """The 403 a request that writes gets from a read-only user (`rest.auth`) or from a
    browser's page on another site; None when it may go on."""
    path = request.url.path
    principal: Principal | None = request.scope.get("state", {}).get("principal")
    if principal is not None and principal.role != "admin":
        why = (
            f"{principal.name} is {principal.role}: this request changes state or opens "
            "connections from the worker (admin only)"
        )
        return error_json(path, 403, why, code="auth.read_only")
    where = foreign_origin(request.scope)
    if where is not None:
        message = (
            f"a browser's cross-site request may not change this worker ({where}); "
            "use the console this worker serves, the CLI or another HTTP client"
        )
        return error_json(path, 403, message, code="request.cross_site")
    return None


class GuardedRoute(APIRoute):
    """The route class of every route of the app: a request that writes (`route_writes`) is
    refused by `refusal` before its body is parsed or its endpoint runs."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            if route_writes(self, request.method):
                refused = refusal(request)
                if refused is not None:
                    return refused
            return await handler(request)

        return guarded


__all__ = ["READ_METHODS", "WRITES", "GuardedRoute", "refusal", "route_writes", "writes"]
