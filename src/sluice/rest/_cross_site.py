"""Browsers may not change a worker from another site's page (cross-site request forgery).

A page on any site the user visits can make their browser send a request to
`http://127.0.0.1:8082` without reading the answer: a form's POST (`text/plain`), even an image
that fetches RocketMQ Connect's `GET /connectors/{name}?config=…`. With `rest.auth=none` (the
default) that created a connector, e.g. one copying a local file to an HTTP endpoint. Browsers
say where such a request comes from: `Sec-Fetch-Site` (every current browser, on every request)
and `Origin` (on a cross-origin POST). A request that changes something (`is_mutation`) and is
marked cross-site, or whose `Origin` is not the worker's own, is answered 403. The console,
served by the worker, is same-origin; the CLI and other HTTP clients send neither header.

A worker listening on loopback only (`httpHost=127.0.0.1`, the example config) also answers 403
to any request whose `Host` is not a loopback name or address: a site whose name its own DNS
server turns into 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the worker, and
could read its answers as well as change it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from sluice.rest._auth import is_loopback, is_mutation, send_error


def foreign_origin(scope: Scope) -> str | None:
    """Where a browser says a request came from when that is not this worker, else None."""
    headers = Headers(scope=scope)
    site = headers.get("sec-fetch-site", "")
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}"
    origin = headers.get("origin")
    if origin is None:
        return None
    host = headers.get("host", "")
    parts = urlsplit(origin)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    netloc = parts.netloc if parts.port not in (None, default) else (parts.hostname or "")
    if origin == "null" or netloc.lower() != host.lower().removesuffix(f":{default}"):
        return f"Origin: {origin}"
    return None


class CrossSiteGuard:
    """ASGI middleware answering 403 to a browser's cross-site request that changes state, and,
    on a worker listening on loopback only (`loopback_only`), to a request for another Host."""

    def __init__(self, app: ASGIApp, loopback_only: bool = False) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.loopback_only:
            host = urlsplit("//" + Headers(scope=scope).get("host", "")).hostname or ""
            if host and not is_loopback(host):
                message = (
                    f"this worker listens on loopback only and does not answer for Host {host!r} "
                    "(a name that resolves to it, as in DNS rebinding); use 127.0.0.1 or localhost"
                )
                await send_error(send, scope["path"], 403, message, code="request.host")
                return
        if scope["type"] == "http" and is_mutation(scope["method"], scope["path"]):
            where = foreign_origin(scope)
            if where is not None:
                message = (
                    f"a browser's cross-site request may not change this worker ({where}); "
                    "use the console this worker serves, the CLI or another HTTP client"
                )
                await send_error(send, scope["path"], 403, message, code="request.cross_site")
                return
        await self.app(scope, receive, send)
