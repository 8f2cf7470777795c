"""Retrying a task's work after a `RetriableException` (`errors.retry.*`).

`errors.retry.timeout` (ms; 0, the default, means no retry; -1 means forever) bounds the total time
spent retrying one operation; `errors.retry.delay.max.ms` (default 60000) caps the backoff, which
starts at 300 ms and doubles. Anything other than a `RetriableException` is not retried.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from sluice.engine.keys import RUNTIME_KEYS
from sluice.sdk import ConnectException
from sluice.sdk._retry import Backoff, retry

FIRST_DELAY_MS = 300
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry an operation that raised `RetriableException`."""

    timeout_ms: int = 0
    max_delay_ms: int = 60_000

    @staticmethod
    def from_config(config: Mapping[str, str]) -> RetryPolicy:
        keys = RUNTIME_KEYS.parse(config)
        return RetryPolicy(keys["errors.retry.timeout"], keys["errors.retry.delay.max.ms"])

    def call(self, operation: Callable[[], object], what: str) -> int:
        """Run `operation`, retrying it as configured; return how many retries it took."""
        return self.run(operation, what)[1]

    def run(self, operation: Callable[[], T], what: str) -> tuple[T, int]:
        """Run `operation`, retrying it as configured; return its result and how many retries
        it took. Backoff happens inside the executor task: the micro-batch waits, nothing is
        skipped."""
        retries = 0

        def counted(exc: BaseException, number: int, wait: float) -> None:
            nonlocal retries
            retries = number

        def give_up(exc: BaseException, made: int, spent_s: float) -> NoReturn:
            raise ConnectException(
                f"{what} failed after {made} retries in {spent_s * 1000:.0f} ms "
                f"(errors.retry.timeout={self.timeout_ms}): {exc}",
                suggestion="raise errors.retry.timeout to retry longer",
            ) from exc

        result = retry(
            operation,
            backoff=Backoff(FIRST_DELAY_MS / 1000, 2.0, self.max_delay_ms / 1000),
            timeout_s=None if self.timeout_ms == -1 else self.timeout_ms / 1000,
            give_up=give_up,
            on_retry=counted,
        )
        return result, retries
