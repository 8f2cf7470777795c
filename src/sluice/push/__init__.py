"""The push runtime: delivers records one request each to many targets, concurrently and safely.

Any per-record sink (HTTP first, see `sluice.connectors.http`) can use it: it depends on nothing
but the standard library, so it sits beside `sluice.sdk` (connectors may import it, DESIGN §7) and
is not buried in one connector. See `_runtime` for the queues, the dispatcher and the memory bound,
and `_policy` for the retry policy.
"""

from sluice.push._policy import DEFAULT_NEVER_RETRY, Decision, RetryPolicy, parse_retry_after
from sluice.push._runtime import (
    DEAD,
    DELIVERED,
    PARKED,
    DrainResult,
    Item,
    Limits,
    Outcome,
    PushRuntime,
    Send,
)

__all__ = [
    "DEAD",
    "DEFAULT_NEVER_RETRY",
    "DELIVERED",
    "PARKED",
    "Decision",
    "DrainResult",
    "Item",
    "Limits",
    "Outcome",
    "PushRuntime",
    "RetryPolicy",
    "Send",
    "parse_retry_after",
]
