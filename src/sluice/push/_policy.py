"""The retry policy of the push runtime: what to do after a failed attempt (pure logic).

`RetryPolicy.decide` is given one failed attempt (its HTTP status or none, its `Retry-After`, how
many attempts the record has had and when its first one started) and answers either "give up" (with
the reason) or "retry after this many seconds". The order of the checks is the contract:

1. a status in `never_retry` (400, 401, 403, 413 by default, as Azure Event Grid) gives up at once;
2. the record has had `max_attempts` attempts, or is older than `max_age_s`: give up;
3. a `Retry-After` on a status in `retry_after_statuses` (429, 503) is honoured as the delay,
   never shortened (a larger computed backoff still wins), but capped by what is left of the age;
4. otherwise the backoff: `initial * 2**(attempt-1)` (exponential) or `initial * attempt` (linear),
   capped at `max_backoff_s`, then spread by ±`jitter` (a fraction) so retries do not stampede.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

DEFAULT_NEVER_RETRY = frozenset({400, 401, 403, 413})
DEFAULT_RETRY_AFTER = frozenset({429, 503})


@dataclass(frozen=True)
class Decision:
    """What to do with a record after a failed attempt."""

    give_up: bool
    delay_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds and backoff of retries (see the module docstring for the order of the checks)."""

    max_attempts: int = 5
    max_age_s: float = 3600.0
    backoff: str = "exponential"
    initial_s: float = 0.5
    max_backoff_s: float = 30.0
    jitter: float = 0.2
    never_retry: frozenset[int] = DEFAULT_NEVER_RETRY
    retry_after_statuses: frozenset[int] = DEFAULT_RETRY_AFTER
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.backoff not in ("exponential", "linear"):
            raise ValueError(f"backoff must be exponential or linear, got {self.backoff!r}")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def backoff_s(self, attempt: int) -> float:
        """The delay before attempt `attempt + 1`, without jitter (attempt counts from 1)."""
        if self.backoff == "exponential":
            raw = self.initial_s * (2 ** min(attempt - 1, 60))
        else:
            raw = self.initial_s * attempt
        return min(raw, self.max_backoff_s)

    def decide(
        self,
        *,
        attempts: int,
        status: int | None,
        retry_after_s: float | None,
        age_s: float,
    ) -> Decision:
        """After the `attempts`-th failed attempt of a record first tried `age_s` ago."""
        if status is not None and status in self.never_retry:
            return Decision(True, reason=f"HTTP {status} is never retried")
        if attempts >= self.max_attempts:
            return Decision(True, reason=f"gave up after {attempts} attempts")
        left = self.max_age_s - age_s
        if left <= 0:
            return Decision(
                True, reason=f"gave up after {age_s:.1f} s (max age {self.max_age_s} s)"
            )
        delay = self.backoff_s(attempts)
        if self.jitter:
            delay *= 1 + self.rng.uniform(-self.jitter, self.jitter)
        if retry_after_s is not None and status in self.retry_after_statuses:
            delay = max(delay, retry_after_s)
        if delay > left:
            return Decision(True, reason=f"next attempt would pass the max age {self.max_age_s} s")
        return Decision(False, delay_s=delay)


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_epoch)
