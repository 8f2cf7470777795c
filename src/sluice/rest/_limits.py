"""The largest request body the worker reads (`rest.request.max.bytes`) and the longest it waits
for one (`rest.request.body.timeout.ms`).

Every route answers from a body held in memory (a config, an offsets list, a validation), and a
config is stored and handed to every task: an unbounded body lets one request take the worker's
memory. A body past the limit is answered 413 in the face's error shape before the route reads
it: at once when its `Content-Length` says so, else when the bytes received pass the limit.

A client that sends its headers and then trickles the body (a byte now and then: slowloris)
held a connection and a task for ever. The body is read here, whole, before the route runs: one
still incomplete `body_timeout_s` after the route was reached is answered 408 and the
connection closed.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.rest._auth import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES, send_error


class BodyLimit:
    """ASGI middleware refusing request bodies larger than `max_bytes` with a 413, and bodies
    slower than `timeout_s` with a 408.

    The body is read here, up to the limit, and handed to the route whole: the routes read
    every body whole anyway, and an error raised while a route reads its body would be turned
    into that route's own 400."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        declared = int(length) if length.isdigit() else None
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send, declared)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                await self._too_slow(scope, send, size, declared)
                return
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(scope, send, size)
                return
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # what follows the body: a disconnect, in time
            delivered = True
            return whole

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, size: int) -> None:
        message = (
            f"request body of {size:,}+ bytes is larger than rest.request.max.bytes "
            f"({self.max_bytes:,})"
        )
        await send_error(
            send,
            scope.get("path", ""),
            413,
            message,
            code="request.too_large",
            key="rest.request.max.bytes",
            headers=((b"connection", b"close"),),
        )

    async def _too_slow(self, scope: Scope, send: Send, size: int, declared: int | None) -> None:
        of = f" of {declared:,}" if declared is not None else ""
        message = (
            f"the request body did not arrive within rest.request.body.timeout.ms "
            f"({self.timeout_s * 1000:,.0f} ms): {size:,} bytes{of} received"
        )
        await send_error(
            send,
            scope.get("path", ""),
            408,
            message,
            code="request.timeout",
            key="rest.request.body.timeout.ms",
            headers=((b"connection", b"close"),),
        )
