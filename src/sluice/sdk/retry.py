"""Retry with backoff: the one loop behind every "try again later" in sluice.

Used by the engine (`errors.retry.*` around a task's `put` and `flush`, `sluice.engine.retry`), the
bus (riding out a broker outage, `sluice.bus.base.retry_outage`) and connectors (the JDBC sink's
`max.retries`, opening a database connection). Each caller says what is worth retrying, when to
stop (a time budget, a number of attempts, or both) and what to raise then; the waits come from
one `Backoff`.

While a loop retries it tells the `RetryWatcher` its thread is `watching` with (if any): the
engine sets one around each task's work, so that a task's status can say it is riding out an
outage wherever the loop runs (a connector's own read, the engine's `errors.retry.*`, the bus).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn, Protocol, TypeVar

from sluice.sdk._errors import RetriableException

T = TypeVar("T")

__all__ = ["Backoff", "LoopReport", "RetryWatcher", "current_watcher", "retry", "watching"]


class RetryWatcher(Protocol):
    """Told about the retry loops that run in its thread while it is `watching`."""

    def retrying(self, error: BaseException, wait_s: float) -> None:
        """A loop failed with `error` and waits `wait_s` before trying again."""

    def settled(self) -> None:
        """A loop that had retried ended: it succeeded, or gave up and raises."""


_watched = threading.local()


@contextmanager
def watching(watcher: RetryWatcher | None) -> Iterator[None]:
    """Run the body with `watcher` told about every retry loop of this thread (nested: the
    innermost watcher is told; on exit the previous one is back)."""
    previous = getattr(_watched, "watcher", None)
    _watched.watcher = watcher
    try:
        yield
    finally:
        _watched.watcher = previous


def current_watcher() -> RetryWatcher | None:
    """The watcher this thread's retry loops report to now (None outside `watching`)."""
    return getattr(_watched, "watcher", None)


class LoopReport:
    """What one retry loop tells its watcher: each retry, and that it settled (once, and only
    if it retried). `retry` reports through one; so does a loop that cannot be a `retry` call
    (a read that resumes a generator), which leaves `watcher` None to report to the thread's
    watcher of the moment: the engine sets it around each step of such a generator."""

    def __init__(self, watcher: RetryWatcher | None = None) -> None:
        self._watcher = watcher
        self._retried = False

    def _target(self) -> RetryWatcher | None:
        return self._watcher if self._watcher is not None else current_watcher()

    def retrying(self, error: BaseException, wait_s: float) -> None:
        self._retried = True
        if (watcher := self._target()) is not None:
            watcher.retrying(error, wait_s)

    def settled(self) -> None:
        if self._retried:
            self._retried = False
            if (watcher := self._target()) is not None:
                watcher.settled()


@dataclass(frozen=True)
class Backoff:
    """The waits between attempts, in seconds: ``first_s``, multiplied by ``factor`` after each
    failure, at most ``max_s``; every ``long_every``-th consecutive failure waits ``long_s``
    instead (RocketMQ Connect's sink task pauses like that after 16 pull errors in a row)."""

    first_s: float = 0.3
    factor: float = 2.0
    max_s: float = 60.0
    long_every: int = 0
    long_s: float = 0.0

    @classmethod
    def fixed(cls, seconds: float) -> Backoff:
        """The same wait after every failure."""
        return cls(first_s=seconds, factor=1.0, max_s=seconds)

    def waits(self) -> Iterator[float]:
        """The wait after the 1st, 2nd, … consecutive failure."""
        delay, failures = self.first_s, 0
        while True:
            failures += 1
            if self.long_every and failures % self.long_every == 0:
                yield self.long_s
            else:
                yield min(delay, self.max_s)
            delay = min(delay * self.factor, self.max_s)


def _is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RetriableException)


def _reraise(exc: BaseException, retries: int, spent_s: float) -> NoReturn:
    raise exc


def retry(
    call: Callable[[], T],
    *,
    backoff: Backoff,
    timeout_s: float | None = None,
    attempts: int | None = None,
    retriable: Callable[[BaseException], bool] = _is_retriable,
    give_up: Callable[[BaseException, int, float], NoReturn] = _reraise,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """``call()``, called again after each failure that ``retriable`` accepts (by default a
    `RetriableException`) with the waits of ``backoff``; anything else propagates at once.

    It stops after ``attempts`` calls, or when the next wait would end more than ``timeout_s``
    after the first call began (``None``: no such limit; ``timeout_s=0``: no retry): then
    ``give_up(last error, retries made, seconds spent)`` raises (by default the last error
    itself). ``on_retry(error, retry number, wait)`` is called before each wait (to log it).
    Runs where it is called (a driver thread or an executor task): the caller waits, nothing
    is skipped. The thread's `RetryWatcher` (see `watching`) is told of each retry, and that
    the loop settled if it retried.
    """
    started = time.monotonic()
    waits = backoff.waits()
    retries = 0
    report = LoopReport(current_watcher())
    try:
        while True:
            try:
                return call()
            except Exception as exc:
                if not retriable(exc):
                    raise
                wait = next(waits)
                spent = time.monotonic() - started
                if (attempts is not None and retries + 1 >= attempts) or (
                    timeout_s is not None and spent + wait > timeout_s
                ):
                    give_up(exc, retries, spent)
                retries += 1
                if on_retry is not None:
                    on_retry(exc, retries, wait)
                report.retrying(exc, wait)
                sleep(wait)
    finally:
        report.settled()
