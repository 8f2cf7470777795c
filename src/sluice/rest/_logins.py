"""Credential checks that cannot stall the worker: scrypt off the event loop, on a small pool of
threads, and at most `rest.auth.failures.per.minute` failed checks per client address.

scrypt (N=2^14, r=8) costs ~50-150 ms of CPU and 16 MiB per check. Run on the REST server's
event loop, 64 wrong passwords stalled an authorised request for 21.5 s. Here a check that the
credential cache (`Credentials.remembered`) cannot answer runs on `HASH_THREADS` threads
(hashlib releases the GIL while it hashes), so the loop goes on serving requests whose
credentials are known. A client address may have at most `per_minute` checks failed in the last
60 s or in flight: the next one is answered 429 with `Retry-After`, without hashing. A credential
the cache knows is never limited: it proves itself without hashing, so a locked-out address (a
proxy, a NAT shared with a guesser) still serves its real users.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

#: threads hashing at once: the machine's cores stay free for the pipelines
HASH_THREADS = 2
#: `rest.auth.failures.per.minute` by default
DEFAULT_FAILURES_PER_MINUTE = 10
WINDOW_S = 60.0
#: client addresses tracked at most (older, settled ones are forgotten first)
MAX_CLIENTS = 10_000

T = TypeVar("T")


@dataclass
class _Client:
    failures: deque[float] = field(default_factory=deque)
    pending: int = 0


class FailureLimit:
    """At most `per_minute` failed credential checks per client address in any 60 s, checks in
    flight counted as failures until they succeed (so a burst cannot slip past the count);
    `per_minute=0` sets no limit."""

    def __init__(
        self,
        per_minute: int = DEFAULT_FAILURES_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}

    def reserve(self, client: str) -> int | None:
        """Take a slot for one check by `client`: None if taken, else the seconds to wait."""
        if self.per_minute <= 0:
            return None
        now = self.clock()
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                if len(self._clients) >= MAX_CLIENTS:
                    self._forget_settled(now)
                entry = self._clients[client] = _Client()
            self._expire(entry, now)
            if len(entry.failures) + entry.pending >= self.per_minute:
                if not entry.failures:  # all in flight: one of them ends soon
                    return 1
                return max(1, math.ceil(entry.failures[0] + WINDOW_S - now))
            entry.pending += 1
            return None

    def settle(self, client: str, *, failed: bool) -> None:
        """The check `reserve` took a slot for has ended."""
        if self.per_minute <= 0:
            return
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                return
            entry.pending = max(0, entry.pending - 1)
            if failed:
                entry.failures.append(self.clock())

    def _expire(self, entry: _Client, now: float) -> None:
        while entry.failures and entry.failures[0] <= now - WINDOW_S:
            entry.failures.popleft()

    def _forget_settled(self, now: float) -> None:
        for name in list(self._clients):
            entry = self._clients[name]
            self._expire(entry, now)
            if not entry.failures and not entry.pending:
                del self._clients[name]


class HashPool:
    """The threads credential checks run on (created at the first check)."""

    def __init__(self, threads: int = HASH_THREADS) -> None:
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on one of the pool's threads, awaited without blocking the loop."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="sluice-auth")
            pool = self._pool
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


__all__ = ["DEFAULT_FAILURES_PER_MINUTE", "FailureLimit", "HashPool"]
