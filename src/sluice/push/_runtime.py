"""The push runtime: per-target bounded queues, an asyncio dispatcher, timeouts, retries.

One `PushRuntime` serves one sink task for one micro-batch (a task object lives that long, see
`sluice.sdk.SinkTask`). The task thread `submit`s items (a target name and a payload) and finally
`drain`s; an event loop on a thread of its own sends them with the caller's `send` coroutine::

    submit ──► fresh queue per target (bounded: submit blocks when full = backpressure)
                     │  round robin over targets, fresh first
                     ▼
               dispatcher ── limits: concurrency (whole runtime), per-target concurrency,
                     │                per-target rate (token bucket), Retry-After windows
                     ▼
               send(target, payload) under asyncio.wait_for(timeout): a late attempt is cancelled
                     │
          ok ────────┼──────── failed ──► RetryPolicy.decide ──► give up: dead
                                              │
                                              └── retry: low-priority retry heap (by due time),
                                                  served for a target only when its fresh queue
                                                  is empty and no fresh item can go now

`drain(deadline)` waits until every item is delivered or dead; at the deadline whatever is still
queued or waiting to retry (and what then fails in flight) is handed back as *parked*, so the caller
can store it durably (the HTTP sink writes it to its retry topic) and the micro-batch never waits
longer than the deadline plus one request timeout. `submit` honours the same deadline: an item that
cannot be queued before it is parked at once, so a stalled target cannot hold the reader forever.

Memory bound: at most `queue_limit` queued items per target, plus the items in flight
(`concurrency`), plus the retry heap (at most the micro-batch's own items), plus the micro-batch the
caller already holds (`read.max.rows`).

Limits (`Limits`) change while it runs (`set_limits`): the dispatcher and blocked submitters wake
up at once. `progress()` returns the counters (the EventBridge proposal's `ProcessResult` fields
and more). The runtime depends on nothing but the standard library, so any per-record sink can use
it: give it a `send` coroutine that returns an `Outcome`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sluice.push._policy import RetryPolicy

DELIVERED = "delivered"
DEAD = "dead"
PARKED = "parked"
PENDING = "pending"


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: `ok`, or the HTTP status / error and any `Retry-After` (s)."""

    ok: bool
    status: int | None = None
    retry_after_s: float | None = None
    error: str = ""


Send = Callable[[str, Any], Awaitable[Outcome]]


@dataclass(frozen=True)
class Limits:
    """The tunable limits of one runtime (one task). A connector's limits are a budget for all its
    tasks together: each task runs on its share (`Limits.share`), except `queue_limit`, which bounds
    one task's memory and so stays per task.

    `core_concurrency` is the EventBridge proposal's core pool size: the connections kept open
    between bursts (capped at `concurrency`, its maximum). `rate_limit` is requests per second per
    target (0: unlimited).
    """

    concurrency: int = 16
    core_concurrency: int = 16
    per_target_concurrency: int = 16
    queue_limit: int = 1000
    rate_limit: float = 0.0

    def __post_init__(self) -> None:
        for name in ("concurrency", "core_concurrency", "per_target_concurrency", "queue_limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.rate_limit < 0:
            raise ValueError(f"rate_limit must not be negative, got {self.rate_limit}")
        if self.core_concurrency > self.concurrency:  # the proposal: core is capped at max
            object.__setattr__(self, "core_concurrency", self.concurrency)

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(Limits))

    def share(self, tasks: int) -> Limits:
        """One task's share of these connector-wide limits when `tasks` tasks run at once:
        concurrency limits and the rate limit divided evenly (rounded up, at least 1 request in
        flight each), so the connector as a whole stays within what the operator set."""
        if tasks <= 1:
            return self
        return replace(
            self,
            concurrency=-(-self.concurrency // tasks),
            core_concurrency=-(-self.core_concurrency // tasks),
            per_target_concurrency=-(-self.per_target_concurrency // tasks),
            rate_limit=self.rate_limit / tasks,
        )


@dataclass
class Item:
    """One record on its way: where it goes, what is sent, and its attempts so far.

    `first_epoch` / `due_epoch` are wall-clock seconds so that a parked item keeps its age and due
    time across processes; `ref` is the caller's handle (the record), untouched.
    """

    target: str
    payload: Any
    ref: Any = None
    attempts: int = 0
    first_epoch: float | None = None
    due_epoch: float = 0.0
    last_status: int | None = None
    last_error: str = ""
    reason: str = ""
    state: str = PENDING
    seq: int = 0


@dataclass
class DrainResult:
    """Every submitted item, by how it ended for this micro-batch."""

    delivered: list[Item] = field(default_factory=list)
    dead: list[Item] = field(default_factory=list)
    parked: list[Item] = field(default_factory=list)


@dataclass
class _Target:
    fresh: deque[Item] = field(default_factory=deque)
    active: int = 0
    blocked_until: float = 0.0  # epoch: a Retry-After window
    tokens: float = 0.0
    refilled: float = 0.0
    succeeded: int = 0
    failed: int = 0


class PushRuntime:
    """Sends submitted items with bounded concurrency per runtime and per target (thread-safe)."""

    def __init__(
        self,
        send: Send,
        *,
        policy: RetryPolicy | None = None,
        limits: Limits | None = None,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._send = send
        self.policy = policy or RetryPolicy()
        self.limits = limits or Limits()
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Condition()
        self._targets: dict[str, _Target] = {}
        self._order: deque[str] = deque()  # round robin over targets
        self._retry: list[tuple[float, int, Item]] = []  # heap by due epoch
        self._items: list[Item] = []
        self._seq = itertools.count()
        self._active = 0
        self._parking = False
        self.deadline: float | None = None
        self._latencies: deque[float] = deque(maxlen=4096)
        self.counts = dict.fromkeys(
            ("read", "succeeded", "failed", "retried", "dead_lettered", "parked", "timeouts"), 0
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.resources: list[Any] = []  # things `send` opened in the loop, closed in `close`
        self.on_loop_start: Callable[[], Awaitable[None]] | None = None
        self.on_loop_stop: Callable[[], Awaitable[None]] | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> PushRuntime:
        """Start the event-loop thread (returns self)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._wake = asyncio.Event()
            try:
                if self.on_loop_start is not None:
                    loop.run_until_complete(self.on_loop_start())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self._dispatch())
            finally:
                if self.on_loop_stop is not None:
                    loop.run_until_complete(self.on_loop_stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="sluice-push", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def close(self) -> None:
        """Cancel what is in flight and stop the loop thread."""
        self._stopping = True
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
            self._thread = None

    # -- the caller's side -----------------------------------------------------------------------
    def submit(
        self,
        target: str,
        payload: Any,
        ref: Any = None,
        *,
        attempts: int = 0,
        first_epoch: float | None = None,
        due_epoch: float | None = None,
    ) -> Item:
        """Queue one item; block while `target`'s fresh queue is full (backpressure).

        An item with a `due_epoch` (a retry read back from durable storage) goes to the retry heap
        instead. Past `deadline` (if set) an item that finds no room is parked at once.
        """
        item = Item(target, payload, ref, attempts, first_epoch, due_epoch or 0.0)
        with self._lock:
            item.seq = next(self._seq)
            self._items.append(item)
            self.counts["read"] += 1
            slot = self._target(target)
            if due_epoch is not None:
                heapq.heappush(self._retry, (item.due_epoch, item.seq, item))
            else:
                while len(slot.fresh) >= self.limits.queue_limit and not self._parking:
                    wait = None if self.deadline is None else self.deadline - self._clock()
                    if wait is not None and wait <= 0:
                        self._park(item, "the target's queue stayed full until the deadline")
                        return item
                    self._lock.wait(wait)
                if self._parking:
                    self._park(item, "submitted after the deadline")
                    return item
                slot.fresh.append(item)
        self._poke()
        return item

    def drain(self, deadline: float | None = None) -> DrainResult:
        """Wait until every item is delivered or dead, or `deadline` (epoch s) passes; then park
        what is left (waiting for attempts in flight to finish or time out) and report all."""
        deadline = self.deadline if deadline is None else deadline
        with self._lock:
            while self._pending() and not self._only_waiting_past(deadline):
                wait = None if deadline is None else deadline - self._clock()
                if wait is not None and wait <= 0:
                    break
                self._lock.wait(min(wait, 0.5) if wait is not None else 0.5)
            self._parking = True
            for slot in self._targets.values():
                while slot.fresh:
                    self._park(slot.fresh.popleft(), "still queued at the micro-batch deadline")
            while self._retry:
                self._park(heapq.heappop(self._retry)[2], "")
            self._lock.notify_all()
            while self._active:
                self._lock.wait(0.5)
            result = DrainResult()
            for item in self._items:
                {DELIVERED: result.delivered, DEAD: result.dead, PARKED: result.parked}[
                    item.state
                ].append(item)
            return result

    def set_limits(self, **changes: Any) -> Limits:
        """Change limits while running (unknown names raise `KeyError` naming them)."""
        unknown = sorted(set(changes) - set(Limits.names()))
        if unknown:
            raise KeyError(", ".join(unknown))
        with self._lock:
            self.limits = replace(self.limits, **changes)
            self._lock.notify_all()
        self._poke()
        return self.limits

    def progress(self) -> dict[str, Any]:
        """Counters, limits, pool and queue sizes, latency percentiles (ms)."""
        with self._lock:
            lat = sorted(self._latencies)
            targets = {
                name: {
                    "queued": len(s.fresh),
                    "active": s.active,
                    "succeeded": s.succeeded,
                    "failed": s.failed,
                    "blocked_for_s": round(max(0.0, s.blocked_until - self._clock()), 3),
                }
                for name, s in self._targets.items()
            }
            return {
                **self.counts,
                "core_pool_size": self.limits.core_concurrency,
                "max_pool_size": self.limits.concurrency,
                "active": self._active,
                "queue_size": sum(len(s.fresh) for s in self._targets.values()),
                "queue_limit": self.limits.queue_limit,
                "retry_queue_size": len(self._retry),
                "per_target_concurrency": self.limits.per_target_concurrency,
                "rate_limit": self.limits.rate_limit,
                "latency_ms": {
                    f"p{p}": round(lat[min(len(lat) - 1, len(lat) * p // 100)] * 1000, 2)
                    for p in (50, 90, 99)
                }
                if lat
                else {},
                "targets": targets,
            }

    # -- the dispatcher (event-loop thread) ------------------------------------------------------
    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop just closed
                loop.call_soon_threadsafe(wake.set)

    async def _dispatch(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            self._wake.clear()
            with self._lock:
                wait = self._launch_ready()
            if wait is not None and wait <= 0:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _launch_ready(self) -> float | None:
        """Start every attempt the limits allow now; return seconds until something may become
        ready by the clock (a due retry, a refilled token, an ended Retry-After), or None."""
        now = self._clock()
        next_at: float | None = None

        def later(at: float) -> None:
            nonlocal next_at
            next_at = at if next_at is None else min(next_at, at)

        while self._active < self.limits.concurrency and not self._parking:
            item = self._next_fresh(now, later) or self._next_retry(now, later)
            if item is None:
                break
            self._launch(item, now)
        return None if next_at is None else max(0.001, next_at - now)

    def _eligible(self, slot: _Target, now: float, later: Callable[[float], None]) -> bool:
        if slot.active >= self.limits.per_target_concurrency:
            return False  # a completion wakes the dispatcher
        if slot.blocked_until > now:
            later(slot.blocked_until)
            return False
        rate = self.limits.rate_limit
        if rate > 0:
            burst = max(1.0, rate)
            slot.tokens = min(burst, slot.tokens + (now - slot.refilled) * rate)
            slot.refilled = now
            if slot.tokens < 1:
                later(now + (1 - slot.tokens) / rate)
                return False
        return True

    def _next_fresh(self, now: float, later: Callable[[float], None]) -> Item | None:
        for _ in range(len(self._order)):
            name = self._order[0]
            self._order.rotate(-1)
            slot = self._targets[name]
            if slot.fresh and self._eligible(slot, now, later):
                return slot.fresh.popleft()
        return None

    def _next_retry(self, now: float, later: Callable[[float], None]) -> Item | None:
        skipped: list[tuple[float, int, Item]] = []
        found = None
        while self._retry:
            due, seq, item = self._retry[0]
            if due > now:
                later(due)
                break
            heapq.heappop(self._retry)
            slot = self._targets[item.target]
            # Fresh first: a target's retries wait while it has fresh items.
            if not slot.fresh and self._eligible(slot, now, later):
                found = item
                break
            skipped.append((due, seq, item))
        for entry in skipped:
            heapq.heappush(self._retry, entry)
        return found

    def _launch(self, item: Item, now: float) -> None:
        slot = self._targets[item.target]
        if self.limits.rate_limit > 0:
            slot.tokens -= 1
        slot.active += 1
        self._active += 1
        item.attempts += 1
        if item.first_epoch is None:
            item.first_epoch = now
        assert self._loop is not None
        task = self._loop.create_task(self._attempt(item))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _attempt(self, item: Item) -> None:
        started = time.perf_counter()
        try:
            outcome = await asyncio.wait_for(self._send(item.target, item.payload), self.timeout_s)
        except TimeoutError:
            outcome = Outcome(False, error=f"timed out after {self.timeout_s:g} s (cancelled)")
            self.counts["timeouts"] += 1
        except asyncio.CancelledError:
            outcome = Outcome(False, error="cancelled: the runtime stopped")
        except Exception as exc:  # a transport error: retried like a 5xx
            outcome = Outcome(False, error=f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - started
        with self._lock:
            self._latencies.append(elapsed)
            slot = self._targets[item.target]
            slot.active -= 1
            self._active -= 1
            now = self._clock()
            if outcome.ok:
                item.state = DELIVERED
                item.last_status = outcome.status
                slot.succeeded += 1
                self.counts["succeeded"] += 1
            else:
                self._failed(item, slot, outcome, now)
            self._lock.notify_all()
        self._poke()

    def _failed(self, item: Item, slot: _Target, outcome: Outcome, now: float) -> None:
        slot.failed += 1
        self.counts["failed"] += 1
        item.last_status = outcome.status
        item.last_error = outcome.error or f"HTTP {outcome.status}"
        if outcome.retry_after_s is not None and outcome.status in self.policy.retry_after_statuses:
            slot.blocked_until = max(slot.blocked_until, now + outcome.retry_after_s)
        decision = self.policy.decide(
            attempts=item.attempts,
            status=outcome.status,
            retry_after_s=outcome.retry_after_s,
            age_s=now - (item.first_epoch or now),
        )
        if decision.give_up:
            item.state = DEAD
            item.reason = f"{decision.reason}: {item.last_error}"
            self.counts["dead_lettered"] += 1
            return
        self.counts["retried"] += 1
        item.due_epoch = now + decision.delay_s
        if self._parking:
            self._park(item, "")
        else:
            heapq.heappush(self._retry, (item.due_epoch, item.seq, item))

    # -- helpers (under the lock) ----------------------------------------------------------------
    def _target(self, name: str) -> _Target:
        slot = self._targets.get(name)
        if slot is None:
            slot = self._targets[name] = _Target(refilled=self._clock())
            slot.tokens = max(1.0, self.limits.rate_limit)
            self._order.append(name)
        return slot

    def _park(self, item: Item, why: str) -> None:
        item.state = PARKED
        if why:
            item.reason = why
        if not item.due_epoch:
            item.due_epoch = self._clock()
        self.counts["parked"] += 1

    def _pending(self) -> bool:
        return self._active > 0 or bool(self._retry) or any(s.fresh for s in self._targets.values())

    def _only_waiting_past(self, deadline: float | None) -> bool:
        """True when nothing is in flight or queued fresh and every retry is due after
        `deadline`: waiting longer would only delay the micro-batch."""
        if deadline is None or self._active or any(s.fresh for s in self._targets.values()):
            return False
        return all(
            max(due, self._targets[item.target].blocked_until) > deadline
            for due, _, item in self._retry
        )
