"""Retrying a task's work after a `RetriableException` (`errors.retry.*`).

`errors.retry.timeout` (ms; 0, the default, means no retry; -1 means forever) bounds the total time
spent retrying one operation; `errors.retry.delay.max.ms` (default 60000) caps the backoff, which
starts at 300 ms and doubles. Anything other than a `RetriableException` is not retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.sdk import ConfigException, ConnectException, RetriableException

FIRST_DELAY_MS = 300


def _int(config: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = config.get(key, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigException(key, f"expected an integer (milliseconds), got {raw!r}") from None
    if value < minimum:
        raise ConfigException(key, f"must be at least {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry an operation that raised `RetriableException`."""

    timeout_ms: int = 0
    max_delay_ms: int = 60_000

    @staticmethod
    def from_config(config: Mapping[str, str]) -> RetryPolicy:
        return RetryPolicy(
            timeout_ms=_int(config, "errors.retry.timeout", 0, -1),
            max_delay_ms=_int(config, "errors.retry.delay.max.ms", 60_000, 0),
        )

    def call(self, operation: Callable[[], None], what: str) -> int:
        """Run `operation`, retrying it as configured; return how many retries it took."""
        started = time.monotonic()
        delay_ms = FIRST_DELAY_MS
        retries = 0
        while True:
            try:
                operation()
                return retries
            except RetriableException as exc:
                spent_ms = (time.monotonic() - started) * 1000
                wait_ms = min(delay_ms, self.max_delay_ms)
                if self.timeout_ms != -1 and spent_ms + wait_ms > self.timeout_ms:
                    raise ConnectException(
                        f"{what} failed after {retries} retries in {spent_ms:.0f} ms "
                        f"(errors.retry.timeout={self.timeout_ms}): {exc}",
                        suggestion="raise errors.retry.timeout to retry longer",
                    ) from exc
                # Backoff inside the executor task: the micro-batch waits, nothing is skipped.
                time.sleep(wait_ms / 1000)
                retries += 1
                delay_ms *= 2
