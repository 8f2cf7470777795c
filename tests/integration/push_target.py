"""A real HTTP target for the push tests: uvicorn on 127.0.0.1 (ephemeral port) in a thread of the
test process, with per-path behaviour the test sets and a log of every request it received.

Behaviour per first path segment (`/a/...` → "a"): `{"delay": s}` answers 200 after `s` seconds;
`{"hang": s}` holds the request `s` seconds (the client should give up first); `{"status": n,
"retry_after": s}` answers `n` (with `Retry-After`); `{"fail_first": k, "status": n}` fails the
first k requests of each idempotency key, then answers 200; `{"hold_after": k}` answers the
first k requests under the path and holds every later one until the test gives the path another
behaviour (a request whose client died meanwhile is dropped, not received): a push stopped
mid-way by construction, whatever the machine's speed.

The target also counts the requests in flight under each path (`in_flight_peak`): a concurrency
limit shows there, not in a rate the machine's load decides.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tests.conftest import wait_until


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int
    duration: float = 0.0


@dataclass
class Target:
    """The server and what it saw."""

    port: int = 0
    behaviour: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[Received] = field(default_factory=list)
    #: every request as it arrived (answered or not yet): (path, idempotency key, time)
    arrivals: list[tuple[str, str, float]] = field(default_factory=list)
    attempts: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: requests in flight now, and the most at once since `reset_peak`, per first path segment
    in_flight: Counter = field(default_factory=Counter)
    peaks: Counter = field(default_factory=Counter)
    #: requests held now (`hold_after`), per first path segment
    holding: Counter = field(default_factory=Counter)
    arrived_count: Counter = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ok(self, prefix: str) -> list[Received]:
        with self.lock:
            return [r for r in self.log if r.path.startswith(f"/{prefix}") and r.status < 300]

    def seen(self, prefix: str) -> list[Received]:
        """Answered requests under `/prefix`."""
        with self.lock:
            return [r for r in self.log if r.path.startswith(f"/{prefix}")]

    def arrived(self, prefix: str) -> list[tuple[str, str, float]]:
        """Every request under `/prefix`, answered or still held."""
        with self.lock:
            return [a for a in self.arrivals if a[0].startswith(f"/{prefix}")]

    def in_flight_peak(self, segment: str) -> int:
        """The most requests under `/segment` in flight at once since `reset_peak(segment)`."""
        with self.lock:
            return self.peaks[segment]

    def reset_peak(self, segment: str) -> None:
        with self.lock:
            self.peaks[segment] = self.in_flight[segment]

    def held(self, segment: str) -> int:
        """Requests under `/segment` held now (`hold_after`)."""
        with self.lock:
            return self.holding[segment]

    def reset(self) -> None:
        with self.lock:
            self.log.clear()
            self.arrivals.clear()
            self.attempts.clear()
            self.behaviour.clear()
            self.in_flight.clear()
            self.peaks.clear()
            self.holding.clear()
            self.arrived_count.clear()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client died before its whole body arrived (kill -9): not received
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        segment = path.strip("/").split("/")[0]
        spec = self.behaviour.get(segment, {})
        started = time.time()
        key = headers.get("idempotency-key", "")
        with self.lock:
            self.arrivals.append((path, key, started))
            self.attempts[(path, key)] += 1
            attempt = self.attempts[(path, key)]
            self.arrived_count[segment] += 1
            arrived = self.arrived_count[segment]
            self.in_flight[segment] += 1
            self.peaks[segment] = max(self.peaks[segment], self.in_flight[segment])
        try:
            if "hold_after" in spec and arrived > spec["hold_after"]:
                if not await self._hold(segment, spec, receive):
                    return  # its client died while it was held: not received
                spec = self.behaviour.get(segment, {})
            await self._answer(spec, path, headers, body, started, attempt, send)
        finally:
            with self.lock:
                self.in_flight[segment] -= 1

    async def _hold(self, segment: str, spec: dict[str, Any], receive: Any) -> bool:
        """Hold a request until `segment` gets another behaviour (True) or its client goes
        (False)."""
        gone = asyncio.ensure_future(receive())  # the next message can only be a disconnect
        with self.lock:
            self.holding[segment] += 1
        try:
            while self.behaviour.get(segment) is spec:
                if gone.done():
                    return False
                await asyncio.sleep(0.01)
            return not gone.done()
        finally:
            gone.cancel()
            with self.lock:
                self.holding[segment] -= 1

    async def _answer(
        self,
        spec: dict[str, Any],
        path: str,
        headers: dict[str, str],
        body: bytes,
        started: float,
        attempt: int,
        send: Any,
    ) -> None:
        status, extra = 200, []
        if "hang" in spec:
            await asyncio.sleep(spec["hang"])
        if "delay" in spec:
            await asyncio.sleep(spec["delay"])
        if "fail_first" in spec:
            if attempt <= spec["fail_first"]:
                status = spec.get("status", 500)
        elif "status" in spec:
            status = spec["status"]
        if "retry_after" in spec and status >= 300:
            extra.append((b"retry-after", str(spec["retry_after"]).encode()))
        self._note(path, headers, body, started, status)
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": b"ok" if status < 300 else b"no"})

    def _note(self, path: str, headers: dict, body: bytes, started: float, status: int) -> None:
        with self.lock:
            self.log.append(Received(path, headers, body, started, status, time.time() - started))


def serve() -> tuple[Target, uvicorn.Server, threading.Thread]:
    target = Target()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    target.port = sock.getsockname()[1]
    config = uvicorn.Config(target, log_level="error", lifespan="off", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "the test HTTP target to start", every=0.01)
    return target, server, thread
