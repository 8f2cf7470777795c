"""The largest request body the worker reads (`rest.request.max.bytes`).

Every route answers from a body held in memory (a config, an offsets list, a validation), and a
config is stored and handed to every task: an unbounded body lets one request take the worker's
memory. A body past the limit is answered 413 in the face's error shape before the route reads
it: at once when its `Content-Length` says so, else when the bytes received pass the limit.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.rest._auth import DEFAULT_MAX_REQUEST_BYTES, send_error


class BodyLimit:
    """ASGI middleware refusing request bodies larger than `max_bytes` with a 413.

    A body without a `Content-Length` (chunked) is read here, up to the limit, and handed to
    the route whole: the routes read every body whole anyway, and an error raised while a route
    reads its body would be turned into that route's own 400."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        declared = int(length) if length.isdigit() else None
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(scope, send, declared)
                return
            await self.app(scope, receive, send)  # the server reads no more than it declared
            return
        chunks, size = [], 0
        while True:
            message = await receive()
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
