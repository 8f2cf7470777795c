"""Retrying a task's work after a `RetriableException` (`errors.retry.*`).

`errors.retry.timeout` (ms; 0, the default, means no retry; -1 means forever) bounds the total time
spent retrying one operation; `errors.retry.delay.max.ms` (default 60000) caps the backoff, which
starts at 300 ms and doubles. Anything other than a `RetriableException` is not retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.engine.keys import RUNTIME_KEYS
from sluice.sdk import ConnectException, RetriableException

FIRST_DELAY_MS = 300


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry an operation that raised `RetriableException`."""

    timeout_ms: int = 0
    max_delay_ms: int = 60_000

    @staticmethod
    def from_config(config: Mapping[str, str]) -> RetryPolicy:
        keys = RUNTIME_KEYS.parse(config)
        return RetryPolicy(keys["errors.retry.timeout"], keys["errors.retry.delay.max.ms"])

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
