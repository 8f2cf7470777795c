"""Automatic restarts of a connector whose query failed for a transient Spark reason.

Spark gives a Python worker a hardcoded 10 s to connect back to its JVM; on a loaded machine it
misses that and the micro-batch fails ("Python worker failed to connect back"), as it does when
a Python worker or an executor dies under the query. Nothing is wrong with the connector or its
data: run again, the query resumes from its checkpoint (nothing lost or repeated). Kafka Connect
never restarts a failed task by itself (its behaviour is "none"); sluice restarts a query that
failed with one of `TRANSIENT_MARKERS` in its error, with a backoff, because these failures come
from the machine, not from the connector:

* ``restart.transient.max.attempts`` (default 5; 0 = never, Kafka Connect's behaviour): restarts
  in a row, after which the connector stays FAILED;
* ``restart.transient.backoff.max.ms`` (default 60000): the wait before restart *n* is
  ``min(1 s * 2^(n-1), this)``; a restarted query that runs this long without failing starts
  the count again.

A task that raises `sluice.sdk.RestartRequested` is restarted too, at once: a JDBC or CDC source
whose table changed its columns under it, a sink on the JVM path whose topic got a new schema
version. The restart plans them again with the new columns. These restarts are the data's doing,
not the machine's, so they neither use up nor wait out the transient attempts (a migration that
runs six `ALTER TABLE`s in a minute must not leave the connector FAILED); they have their own
limit, `REQUESTED_LIMIT` in a row, which only a task asking again and again without getting
anywhere reaches. `restart.transient.max.attempts=0` turns both kinds off.

While it waits the connector shows RESTARTING with the failure's trace. Every other failure (the
connector's own error, bad data, a fenced commit) stays FAILED until a restart through REST.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.engine.keys import RUNTIME_KEYS
from sluice.sdk import RestartRequested

#: Text of Spark failures that say the machine, not the connector, failed the micro-batch.
TRANSIENT_MARKERS = (
    "Python worker failed to connect back",
    "Python worker exited unexpectedly",
    "ExecutorLostFailure",
    # A task asking to be planned again (its table's columns or its topic's schema version
    # changed under it): `sluice.sdk.RestartRequested`.
    RestartRequested.MARKER,
)
_FIRST_DELAY_S = 1.0
#: requested restarts in a row (none of them running `restart.transient.backoff.max.ms`) after
#: which the connector stays FAILED: a task that keeps asking is looping, not following DDL
REQUESTED_LIMIT = 50


def requested_reason(failure: str) -> str | None:
    """The reason a task gave when it asked to be planned again (`RestartRequested`'s message,
    without the exception's class and the marker), found in a query's failure text (Spark wraps
    it in its own error and a Python traceback); None if the failure is no such request."""
    for line in reversed(failure.splitlines()):
        if RestartRequested.MARKER in line:
            text = line.strip()
            head, sep, rest = text.partition(": ")
            if sep and "." in head and " " not in head:  # `module.ExceptionClass: message`
                text = rest
            return text.replace(RestartRequested.MARKER, "").strip()
    return None


def is_transient(failure: str) -> bool:
    """Whether a query's failure text names a transient Spark failure."""
    return any(marker in failure for marker in TRANSIENT_MARKERS)


@dataclass
class _Entry:
    attempts: int = 0
    requested: int = 0
    due: float | None = None
    started: float = 0.0


@dataclass(frozen=True)
class Restart:
    """A scheduled automatic restart: attempt `attempt` of `of`, in `delay_s`; `requested`
    when the task asked for it (`RestartRequested`) rather than the machine failing it."""

    attempt: int
    of: int
    delay_s: float
    requested: bool = False


class TransientRestarts:
    """The automatic restarts a herder owes its connectors (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def started(self, name: str) -> None:
        """The query of `name` (re)started: the stability window starts now."""
        with self._lock:
            entry = self._entries.setdefault(name, _Entry())
            entry.started, entry.due = self._clock(), None

    def schedule(self, name: str, failure: str, config: Mapping[str, str]) -> Restart | None:
        """After the query of `name` (config `config`) failed with `failure`: the restart to
        make, or None when the failure is not transient or the attempts are used up."""
        if not is_transient(failure):
            return None
        keys = RUNTIME_KEYS.parse({k: v for k, v in config.items() if k.startswith("restart.")})
        limit = keys["restart.transient.max.attempts"]
        cap_s = keys["restart.transient.backoff.max.ms"] / 1000
        now = self._clock()
        with self._lock:
            entry = self._entries.setdefault(name, _Entry(started=now))
            if now - entry.started >= cap_s:
                entry.attempts = entry.requested = 0  # it ran long enough: a new series
            if RestartRequested.MARKER in failure and limit > 0:  # 0: no automatic restart
                return self._requested(name, entry, now)
            if entry.attempts >= limit:
                self._entries.pop(name, None)
                return None
            entry.attempts += 1
            delay = min(_FIRST_DELAY_S * 2 ** (entry.attempts - 1), cap_s)
            entry.due = now + delay
            return Restart(entry.attempts, limit, delay)

    def _requested(self, name: str, entry: _Entry, now: float) -> Restart | None:
        if entry.requested >= REQUESTED_LIMIT:
            self._entries.pop(name, None)
            return None
        entry.requested += 1
        entry.due = now
        return Restart(entry.requested, REQUESTED_LIMIT, 0.0, requested=True)

    def waiting(self, name: str) -> bool:
        """Whether an automatic restart of `name` is scheduled and not yet due."""
        with self._lock:
            entry = self._entries.get(name)
            return entry is not None and entry.due is not None and entry.due > self._clock()

    def due(self) -> list[str]:
        """The connectors whose restart is due now (each returned once)."""
        now = self._clock()
        with self._lock:
            names = [n for n, e in self._entries.items() if e.due is not None and e.due <= now]
            for name in names:
                self._entries[name].due = None
            return sorted(names)
