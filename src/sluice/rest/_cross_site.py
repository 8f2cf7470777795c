"""Browsers may not change a worker from another site's page (cross-site request forgery).

A page on any site the user visits can make their browser send a request to
`http://127.0.0.1:8082` without reading the answer: a form's POST (`text/plain`), even an image
that fetches RocketMQ Connect's `GET /connectors/{name}?config=…`. With `rest.auth=none` (the
default) that created a connector, e.g. one copying a local file to an HTTP endpoint. Browsers
say where such a request comes from: `Sec-Fetch-Site` (every current browser, on every request)
and `Origin` (on a cross-origin POST). A request that writes (`sluice.rest._routes`) and is
marked cross-site, or whose `Origin` is not the worker's own, is answered 403 by its route. The
console, served by the worker, is same-origin; the CLI and other HTTP clients send neither
header.

A worker listening on loopback only (`httpHost=127.0.0.1`, the example config) also answers 403
to any request whose `Host` is not a loopback name or address: a site whose name its own DNS
server turns into 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the worker, and
could read its answers as well as change it.

Nor may another site show the worker's pages in a frame (clickjacking: a click on a page that
overlays the console's Delete button deleted a connector): every answer says
`Content-Security-Policy: frame-ancestors 'none'` and `X-Frame-Options: DENY` (`NoFraming`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.rest._auth import is_loopback, send_error


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
    """ASGI middleware answering 403, on a worker listening on loopback only (`loopback_only`),
    to a request for another Host. (A browser's cross-site request that writes is refused by its
    route, which knows whether it writes: `sluice.rest._routes.refusal` uses `foreign_origin`.)"""

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
        await self.app(scope, receive, send)


#: what every answer says about frames
NO_FRAMES = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
)


class NoFraming:
    """ASGI middleware adding `frame-ancestors 'none'`, `X-Frame-Options: DENY` (and
    `X-Content-Type-Options: nosniff`) to every answer, errors of the other guards included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", ())}
                extra = [h for h in NO_FRAMES if h[0] not in names]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, framed)
