"""Answers that carry every connector's config (`/connectors/list`, `/v1/connectors?expand=…`,
`/allocated/connectors`), rendered once for all the requests waiting for them.

A config may be megabytes (`rest.request.max.bytes` allows 4 MiB) and these answers hold every
config. Rendered per request, 1,000 concurrent lists of one 4 MiB config took the worker from
270 MiB to 2.7 GiB: each request read the config from the store, copied it, serialised it and
held the bytes until its client had read them. Here the requests for one answer share its
rendering: the first starts one; those arriving while it runs wait for the next one, which starts
when it ends and serves them all. So no answer is older than its request (a list after a create
shows the connector), at most two renderings of an answer are under way at any time, every
response sends the same bytes, and it sends them in `PIECE` slices, each written once the
client has taken the previous ones (uvicorn's flow control): a slow reader holds no copy.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

#: bytes sent at a time (an answer larger than this is streamed)
PIECE = 64 << 10


def render_json(content: Any) -> bytes:
    """`content` as FastAPI's JSONResponse renders it."""
    return json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


@dataclass
class _Slot:
    #: the rendering under way and the one the requests that arrived since then wait for
    running: asyncio.Future[bytes] | None = None
    waiting: asyncio.Future[bytes] | None = None
    #: the task that renders for `waiting` (kept: the loop holds tasks weakly)
    task: asyncio.Task[None] | None = None


def _consume(future: asyncio.Future[bytes]) -> None:
    """Mark a failure seen: every waiter may have gone (the clients hung up)."""
    if not future.cancelled():
        future.exception()


class SharedRenders:
    """One rendering per answer for the requests that wait for it together (see the module
    docstring). `renders` counts the renderings made (for tests and curiosity)."""

    def __init__(self) -> None:
        # per event loop: a future belongs to one (a test client may run one per request)
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Slot]] = (
            weakref.WeakKeyDictionary()
        )
        self.renders = 0

    async def get(self, key: Hashable, build: Callable[[], bytes]) -> bytes:
        """The bytes of answer `key`, from a rendering (`build`, run on a worker thread) that
        started after this call."""
        loop = asyncio.get_running_loop()
        slot = self._slots.setdefault(loop, {}).setdefault(key, _Slot())
        if slot.waiting is None:
            slot.waiting = loop.create_future()
            slot.waiting.add_done_callback(_consume)
            slot.task = loop.create_task(self._render(slot, build))
        return await asyncio.shield(slot.waiting)

    async def _render(self, slot: _Slot, build: Callable[[], bytes]) -> None:
        if slot.running is not None:  # it started before the requests of `slot.waiting` came
            await asyncio.wait([slot.running])
        future, slot.waiting = slot.waiting, None
        assert future is not None
        slot.running = future
        self.renders += 1
        try:
            future.set_result(await run_in_threadpool(build))
        except Exception as exc:  # every waiter gets it (a HerderError answers as usual)
            future.set_exception(exc)
        finally:
            slot.running = None


async def _pieces(data: bytes) -> AsyncIterator[memoryview]:
    # an async generator: Starlette runs a plain iterator's every step on a worker thread
    view = memoryview(data)
    for start in range(0, len(view), PIECE):
        yield view[start : start + PIECE]


async def shared_json(request: Request, key: Hashable, build: Callable[[], Any]) -> Response:
    """The JSON answer `build()` makes, shared with the requests for `key` that wait with this
    one (`build` runs on a worker thread)."""
    renders: SharedRenders = request.app.state.renders
    data = await renders.get(key, lambda: render_json(build()))
    if len(data) <= PIECE:
        return Response(data, media_type="application/json")
    return StreamingResponse(
        _pieces(data),
        media_type="application/json",
        headers={"content-length": str(len(data))},
    )


__all__ = ["PIECE", "SharedRenders", "render_json", "shared_json"]
