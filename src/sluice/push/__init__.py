"""The push runtime: delivers records one request each to many targets, concurrently and safely.

Any per-record sink (HTTP first, see `sluice.connectors.http`) can use it. It depends on the
standard library and `sluice.sdk` only, so it lives beside the SDK as `sluice.push` — connectors
may import it (DESIGN §7: connectors depend on `sdk` and shared client code) — instead of being
buried in one connector. `_runtime` holds the queues, the dispatcher and the memory bound;
`_policy` the retry policy; `_board` how live limits and progress cross between the REST process
and the tasks in Spark's workers (a SQLite file under the worker's store root).
"""

from sluice.push._board import (
    ALIASES,
    TUNABLE,
    PushBoard,
    parse_limits,
)
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
    "ALIASES",
    "DEAD",
    "DEFAULT_NEVER_RETRY",
    "DELIVERED",
    "PARKED",
    "TUNABLE",
    "Decision",
    "DrainResult",
    "Item",
    "Limits",
    "Outcome",
    "PushBoard",
    "PushRuntime",
    "RetryPolicy",
    "Send",
    "parse_limits",
    "parse_retry_after",
]
