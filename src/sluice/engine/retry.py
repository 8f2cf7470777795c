"""Retrying a task's work after a `RetriableException` (`errors.retry.*`).

`errors.retry.timeout` (ms; 0, the default, means no retry; -1 means forever) bounds the total time
spent retrying one operation; `errors.retry.delay.max.ms` (default 60000) caps the backoff, which
starts at 300 ms and doubles. Anything other than a `RetriableException` is not retried.

`RetryNotes` is how a task's status learns that it retries: the engine runs each task's work
`watching` a `RetryNotes` of that task, so every retry loop of `sluice.sdk.retry` that runs there
(this policy's, a connector's own, the bus's) keeps a note in the counters store, which executors
reach too, and the herder shows it beside the task's RUNNING state until the loop settles.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeVar

from sluice.sdk import ConnectException
from sluice.sdk.retry import Backoff, RetryWatcher, retry, watching

FIRST_DELAY_MS = 300
#: In the message of the error raised when `errors.retry.*` gives up on a `RetriableException`:
#: Spark reports only that error's text, so this is how the runtime tells the failure was
#: retriable (`sluice.runtime.herder.restarts` restarts the query once the server is back).
GAVE_UP_MARKER = "(errors.retry.timeout="
#: At most one store write per second per retrying task: a tight loop must not hammer the store.
NOTE_EVERY_S = 1.0
#: A note stays meaningful this long after the retry it announces is due: an attempt may take a
#: while (a connect timeout), and a note whose writer died must still disappear.
NOTE_GRACE_S = 60.0
#: The longest error text a note keeps (its first line).
NOTE_ERROR_CHARS = 300
T = TypeVar("T")
log = logging.getLogger(__name__)


class RetryStore(Protocol):
    """Where retry notes go (the counters store). Must pickle."""

    def note_retrying(
        self, connector: str, task: int, note: Mapping[str, Any], retries: int = 0
    ) -> None: ...

    def clear_retrying(self, connector: str, task: int | None = None, retries: int = 0) -> None: ...


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _error_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text[:NOTE_ERROR_CHARS]


class RetryNotes:
    """A `RetryWatcher` keeping the store's note of task `task` of `connector`: written at a
    loop's first retry, then at most every `NOTE_EVERY_S`, and cleared when the loop settles
    (the retries are added to `total-retries` with these writes, unless `counts` is False: a
    loop several notes watch is counted once). A store that fails is logged, never raised: a
    status note must not fail the task it describes."""

    def __init__(
        self,
        store: RetryStore,
        connector: str,
        task: int,
        *,
        clock: Callable[[], float] = time.time,
        counts: bool = True,
    ) -> None:
        self.store, self.connector, self.task, self._clock = store, connector, task, clock
        self.counts = counts
        self._since: float | None = None
        self._written: float | None = None
        self._attempts = 0
        self._uncounted = 0

    def retrying(self, error: BaseException, wait_s: float) -> None:
        now = self._clock()
        if self._since is None:
            self._since = now
        self._attempts += 1
        self._uncounted += self.counts
        if self._written is not None and now - self._written < NOTE_EVERY_S:
            return
        self._written = now
        retries, self._uncounted = self._uncounted, 0
        note = {
            "since_ms": _ms(self._since),
            "attempts": self._attempts,
            "error": _error_text(error),
            "until_ms": _ms(now + wait_s + NOTE_GRACE_S),
        }
        self._safely(self.store.note_retrying, self.connector, self.task, note, retries=retries)

    def settled(self) -> None:
        if self._written is not None:
            self._safely(
                self.store.clear_retrying, self.connector, self.task, retries=self._uncounted
            )
        self._since = self._written = None
        self._attempts = self._uncounted = 0

    def _safely(self, write: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            write(*args, **kwargs)
        except Exception as exc:  # the note is a courtesy; the retry loop goes on
            log.warning("%s task %d: retry note not stored: %s", self.connector, self.task, exc)


class _Every:
    """A `RetryWatcher` passing each report on to several (one per task)."""

    def __init__(self, watchers: Sequence[RetryWatcher]) -> None:
        self.watchers = tuple(watchers)

    def retrying(self, error: BaseException, wait_s: float) -> None:
        for watcher in self.watchers:
            watcher.retrying(error, wait_s)

    def settled(self) -> None:
        for watcher in self.watchers:
            watcher.settled()


@dataclass(frozen=True)
class ConnectorNotes:
    """The retry notes of a connector's `tasks` tasks, for the bus (picklable): its topic writer
    and reader do not run inside one task's work, so the runner hands them this to call. With a
    task (`notes(3)`, a reader's Spark partition: partition mod tasks), that task's note; without
    (`notes()`, a micro-batch's commit or the reader's planning, which hold up every task), the
    note of every task."""

    store: RetryStore
    connector: str
    tasks: int

    def __call__(self, partition: int | None = None) -> RetryWatcher:
        ids = range(self.tasks) if partition is None else [partition % max(1, self.tasks)]
        # one loop, one retry in `total-retries`, however many tasks it holds up
        return _Every([RetryNotes(self.store, self.connector, t, counts=t == ids[0]) for t in ids])


def watching_task(
    store: RetryStore | None, connector: str, task: int
) -> contextlib.AbstractContextManager[None]:
    """A context in which the retry loops of task `task` of `connector` keep its note in `store`
    (none without a store)."""
    if store is None:
        return contextlib.nullcontext()
    return watching(RetryNotes(store, connector, task))


def watched(
    store: RetryStore | None, connector: str, task: int, items: Generator[T, None, None]
) -> Iterator[T]:
    """`items`, each produced watching task `task` of `connector`: for a generator such as an
    executor's read, whose watcher must be set only while it runs, not while it is suspended."""
    notes = RetryNotes(store, connector, task) if store is not None else None
    try:
        while True:
            with watching(notes):
                try:
                    item = next(items)
                except StopIteration:
                    return
            yield item
    finally:
        items.close()


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry an operation that raised `RetriableException`."""

    timeout_ms: int = 0
    max_delay_ms: int = 60_000

    def call(self, operation: Callable[[], object], what: str) -> int:
        """Run `operation`, retrying it as configured; return how many retries it took."""
        return self.run(operation, what)[1]

    def run(
        self, operation: Callable[[], T], what: str, sleep: Callable[[float], object] = time.sleep
    ) -> tuple[T, int]:
        """Run `operation`, retrying it as configured; return its result and how many retries
        it took. Backoff happens inside the executor task: the micro-batch waits, nothing is
        skipped. `sleep` waits between attempts (an `Event.wait` cuts the waits short)."""
        retries = 0

        def counted(exc: BaseException, number: int, wait: float) -> None:
            nonlocal retries
            retries = number

        def give_up(exc: BaseException, made: int, spent_s: float) -> NoReturn:
            raise ConnectException(
                f"{what} failed after {made} retries in {spent_s * 1000:.0f} ms "
                f"{GAVE_UP_MARKER}{self.timeout_ms}): {exc}",
                suggestion="raise errors.retry.timeout to retry longer",
            ) from exc

        result = retry(
            operation,
            backoff=Backoff(FIRST_DELAY_MS / 1000, 2.0, self.max_delay_ms / 1000),
            timeout_s=None if self.timeout_ms == -1 else self.timeout_ms / 1000,
            give_up=give_up,
            on_retry=counted,
            sleep=sleep,
        )
        return result, retries
