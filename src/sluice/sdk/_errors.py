"""Errors a connector raises, and the runtime reports.

Hierarchy::

    ConnectException                 fatal: the task fails and shows the message in its `trace`
    ├── RetriableException           transient: the runtime retries the same work with backoff
    └── ConfigException              bad configuration: names the offending key
        └── InvalidConfig            several bad keys at once: `problems` holds one per key

Retriable versus fatal is a type, never a flag: raise `RetriableException` (or a subclass) only when
doing the same thing again may succeed (a connection dropped, a lock timed out).
"""

from __future__ import annotations


class ConnectException(Exception):
    """Root of every error a connector or the runtime raises on purpose.

    `code` is stable and machine-readable; `suggestion`, when given, tells the user what to do.
    """

    code = "connect.error"

    def __init__(self, message: str, *, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.suggestion = suggestion

    def __str__(self) -> str:
        if self.suggestion:
            return f"{self.message} ({self.suggestion})"
        return self.message


class RestartRequested(ConnectException):
    """Raised by a task whose source or target changed shape under it (a table's columns, a
    topic's schema version) so that the way on is to plan again: the runtime restarts the
    connector at once from its committed positions (nothing lost or repeated), and shows
    RESTARTING meanwhile. Such restarts do not count toward `restart.transient.max.attempts`;
    a task that asks 50 times in a row without running for a while stays FAILED."""

    code = "connect.restart_requested"
    #: In the message, so the runtime recognises the request in the failure Spark reports.
    MARKER = "(restart requested)"

    def __init__(self, reason: str, *, suggestion: str | None = None) -> None:
        super().__init__(f"{reason} {self.MARKER}", suggestion=suggestion)


class RetriableException(ConnectException):
    """A transient failure: the runtime retries the same operation after a backoff."""

    code = "connect.retriable"


class ConfigException(ConnectException):
    """A configuration value is missing or invalid; `key` names it."""

    code = "connect.config"

    def __init__(self, key: str, message: str, *, suggestion: str | None = None) -> None:
        super().__init__(f"{key}: {message}", suggestion=suggestion)
        self.key = key


class InvalidConfig(ConfigException):
    """Several keys are bad at once (`Connector.validate`): `problems` has one error per key, in
    the order found; `key` is the first one's."""

    def __init__(self, problems: list[ConfigException]) -> None:
        super().__init__(problems[0].key, "", suggestion=problems[0].suggestion)
        self.message = "; ".join(p.message for p in problems)
        self.problems = list(problems)
