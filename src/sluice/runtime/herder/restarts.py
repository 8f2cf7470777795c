"""Automatic restarts of a connector whose query failed for a passing reason: the machine (a
transient Spark failure), the data (a task asking to be planned again) or a server that was away.

Spark gives a Python worker a hardcoded 10 s to connect back to its JVM; on a loaded machine it
misses that and the micro-batch fails ("Python worker failed to connect back"), as it does when
a Python worker or an executor dies under the query. Nothing is wrong with the connector or its
data: run again, the query resumes from its checkpoint (nothing lost or repeated). Kafka Connect
never restarts a failed task by itself (its behaviour is "none"); sluice restarts a query that
failed with one of `TRANSIENT_MARKERS` in its error, with a backoff, because these failures come
from the machine, not from the connector:

* ``restart.transient.max.attempts`` (default 5; 0 = no automatic restart of any kind, Kafka
  Connect's behaviour): restarts in a row, after which the connector stays FAILED;
* ``restart.transient.backoff.max.ms`` (default 60000): the wait before restart *n* is
  ``min(1 s * 2^(n-1), this)``; a restarted query that runs this long without failing starts
  the count again.

A task that raises `sluice.sdk.RestartRequested` is restarted too, at once: a JDBC or CDC source
whose table changed its columns under it, a sink on the JVM path whose topic got a new schema
version. The restart plans them again with the new columns. These restarts are the data's doing,
not the machine's, so they neither use up nor wait out the transient attempts (a migration that
runs six `ALTER TABLE`s in a minute must not leave the connector FAILED); they have their own
limit, `REQUESTED_LIMIT` in a row, which only a task asking again and again without getting
anywhere reaches. `restart.transient.max.attempts=0` turns every kind off (also the retriable
restarts below).

A query that failed for a *retriable* reason, a server it talks to being away
(`RETRIABLE_MARKERS`: a `RetriableException`, also the one `errors.retry.*` gave up on; a
database driver's `OperationalError`; a refused or reset connection; a full disk), is restarted
too, with the same backoff, for as long as `restart.retriable.timeout.ms` (default 600000, 10
min; -1 = forever) from its first failure of the series: a sink whose database was down longer
than its `errors.retry.timeout` comes back by itself when the database does, and a query that
died while the worker's own store was away is started again when it answers (`hasten`). A config
error (a `ConfigException` naming a key) never is, whatever driver error it quotes.

A sink that cannot start because a topic it reads has no registered schema yet
(`SchemaNotRegisteredError`: its source has not run its first micro-batch, or was not created yet)
*waits*: it is started again every few seconds (1 s, doubling to `WAIT_CAP_S`), with no limit
in count or time, and shows RUNNING with the reason as its trace meanwhile — Kafka Connect's
users create a sink before its source and expect it to pick the topic up. Only
`restart.transient.max.attempts=0` turns this off (the sink is then FAILED, as before).

While it waits for any other restart the connector shows RESTARTING with the failure's trace.
Every other failure (the connector's own error, bad data, a fenced commit) stays FAILED until a
restart through REST.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.engine.converters import SchemaNotRegisteredError
from sluice.engine.retry import GAVE_UP_MARKER
from sluice.engine.settings import restart_policy
from sluice.sdk import ConfigException, RestartRequested, RetriableException

#: Text of Spark failures that say the machine, not the connector, failed the micro-batch.
TRANSIENT_MARKERS = (
    "Python worker failed to connect back",
    "Python worker exited unexpectedly",
    "ExecutorLostFailure",
    # A task asking to be planned again (its table's columns or its topic's schema version
    # changed under it): `sluice.sdk.RestartRequested`.
    RestartRequested.MARKER,
)
#: Text of failures that say a server the query talks to (or the disk it writes) is away: worth a
#: restart once it is back.
RETRIABLE_MARKERS = (
    # sluice.sdk's transient error, and the error `errors.retry.*` raises when it gave up on one
    # (Spark reports only the last error of a task, not what it was raised from)
    "RetriableException",
    GAVE_UP_MARKER,
    # its subclasses, as the failure text names them (a class name, not its bases): a broker
    # away or busy (Kafka's coordinator still loading, RocketMQ's flow control)
    "BusUnavailable",
    "RocketMQUnavailable",
    # DB-API drivers (psycopg, SQLAlchemy, sqlite3, PyMySQL): the database is away or refused
    "OperationalError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "BrokenPipeError",
    # a disk that is full or failing (a store file, a checkpoint): the machine's, not the data's
    "No space left on device",
    "Disk quota exceeded",
    "File too large",
    "Input/output error",
    "database or disk is full",
    "disk I/O error",
)
_FIRST_DELAY_S = 1.0
#: the longest wait between two starts of a sink waiting for a schema: it starts at most this
#: long after the schema is registered
WAIT_CAP_S = 5.0
#: Text of failures that mean "not yet": the start is tried again, without limit
WAITING_MARKERS = (SchemaNotRegisteredError.__name__,)
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


def _backoff(attempt: int, cap_s: float) -> float:
    """The wait before automatic restart number `attempt` of a series: 1 s, doubling, at most
    `cap_s` (every kind of restart backs off the same way)."""
    return min(_FIRST_DELAY_S * 2 ** (attempt - 1), cap_s)


def is_waiting(failure: str) -> bool:
    """Whether a query's failure (or start's) text says it waits for something to exist (a
    topic's first schema), not that anything failed."""
    cause = failure.split("\n", 1)[0]
    return any(marker in cause for marker in WAITING_MARKERS)


def is_transient(failure: str) -> bool:
    """Whether a query's failure text names a transient Spark failure."""
    return any(marker in failure for marker in TRANSIENT_MARKERS)


#: Errors that name a config key: a human must change the config, a restart changes nothing.
_CONFIG_ERRORS = ("ConfigException", "InvalidConfig")


def is_retriable(failure: str) -> bool:
    """Whether a query's failure text (its cause on the first line) says a server it talks to
    was away. A config error never is, whatever it wraps (a database that refused the password
    answers with a driver's `OperationalError` too)."""
    cause = failure.split("\n", 1)[0].split(":", 1)[0].strip()
    if cause.rsplit(".", 1)[-1] in _CONFIG_ERRORS:
        return False
    return any(marker in failure for marker in RETRIABLE_MARKERS)


def retriable_start_error(exc: BaseException) -> bool:
    """Whether a start that raised `exc` met a server that was away.

    The exception is at hand, with what it was raised from: a `RetriableException` anywhere in
    its chain counts, also under a config error (a connector's start-time check reports a
    database that does not answer as a `ConfigException` naming its URL key, raised from the
    `RetriableException` of its connection attempts); the other markers count only outside a
    config error (a refused password is a driver's `OperationalError` too)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(e, RetriableException) for e in chain):
        return True
    if isinstance(exc, ConfigException):
        return False
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    texts = " ".join(str(e) for e in chain)
    return any(marker in names or marker in texts for marker in RETRIABLE_MARKERS)


@dataclass
class _Entry:
    attempts: int = 0
    requested: int = 0
    retriable: int = 0
    waits: int = 0
    #: when the current series of retriable failures began (None: not in one)
    retriable_since: float | None = None
    due: float | None = None
    started: float = 0.0


@dataclass(frozen=True)
class Restart:
    """A scheduled automatic restart: attempt `attempt` of `of` (0: no limit on the count, a
    retriable failure's restarts are bounded by time), in `delay_s`; `kind` says why:
    `transient` (the machine failed it), `requested` (the task asked, `RestartRequested`),
    `retriable` (a server it talks to was away) or `waiting` (a topic it reads has no schema
    yet, `SchemaNotRegisteredError`: no limit)."""

    attempt: int
    of: int
    delay_s: float
    kind: str = "transient"

    @property
    def requested(self) -> bool:
        return self.kind == "requested"


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

    def schedule(
        self,
        name: str,
        failure: str,
        config: Mapping[str, str],
        *,
        retriable: bool | None = None,
    ) -> Restart | None:
        """After the query of `name` (config `config`) failed with `failure` (or could not
        start): the restart to make, or None when the failure is none of the kinds restarted
        automatically or their attempts (or time) are used up. `retriable` overrides what the
        text says (a start's exception tells it better, `retriable_start_error`)."""
        transient = is_transient(failure)
        waiting = is_waiting(failure)
        retriable = is_retriable(failure) if retriable is None else retriable
        if not transient and not retriable and not waiting:
            return None
        policy = restart_policy(config)
        limit = policy.max_attempts
        cap_s = policy.backoff_max_ms / 1000
        if limit == 0:  # Kafka Connect's behaviour: no automatic restart of any kind
            return None
        now = self._clock()
        with self._lock:
            entry = self._entries.setdefault(name, _Entry(started=now))
            if now - entry.started >= cap_s:  # it ran long enough: a new series
                entry.attempts = entry.requested = entry.retriable = entry.waits = 0
                entry.retriable_since = None
            if waiting:
                entry.waits += 1
                delay = _backoff(entry.waits, WAIT_CAP_S)
                entry.due = now + delay
                return Restart(entry.waits, 0, delay, kind="waiting")
            if RestartRequested.MARKER in failure:
                return self._requested(name, entry, now)
            if transient:
                return self._transient(name, entry, now, limit, cap_s)
            return self._retriable(name, entry, now, policy.retriable_timeout_ms, cap_s)

    def _transient(
        self, name: str, entry: _Entry, now: float, limit: int, cap_s: float
    ) -> Restart | None:
        if entry.attempts >= limit:
            self._entries.pop(name, None)
            return None
        entry.attempts += 1
        entry.due = now + (delay := _backoff(entry.attempts, cap_s))
        return Restart(entry.attempts, limit, delay)

    def _retriable(
        self, name: str, entry: _Entry, now: float, timeout_ms: int, cap_s: float
    ) -> Restart | None:
        if entry.retriable_since is None:
            entry.retriable_since = now
        if timeout_ms == 0 or (timeout_ms > 0 and now - entry.retriable_since > timeout_ms / 1000):
            self._entries.pop(name, None)
            return None
        entry.retriable += 1
        entry.due = now + (delay := _backoff(entry.retriable, cap_s))
        return Restart(entry.retriable, 0, delay, kind="retriable")

    def _requested(self, name: str, entry: _Entry, now: float) -> Restart | None:
        if entry.requested >= REQUESTED_LIMIT:
            self._entries.pop(name, None)
            return None
        entry.requested += 1
        entry.due = now
        return Restart(entry.requested, REQUESTED_LIMIT, 0.0, kind="requested")

    def hasten(self) -> list[str]:
        """Make the waiting restarts of retriable failures due now (the server that was away
        answers again: no need to wait out the backoff); the names hastened."""
        now = self._clock()
        with self._lock:
            names = [
                name
                for name, e in self._entries.items()
                if e.retriable_since is not None and e.due is not None and e.due > now
            ]
            for name in names:
                self._entries[name].due = now
        return sorted(names)

    def forget(self, name: str) -> None:
        """`name` is no longer this worker's to run: drop its restarts (a later one starts a
        new series)."""
        with self._lock:
            self._entries.pop(name, None)

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
