"""Which live worker runs which connector: RocketMQ Connect's two allocation strategies.

Both are pure functions of (live worker ids, connector names), so every worker computes the same
answer from the same store rows without talking to the others. The unit of allocation is the
connector (one Spark query; its tasks are the query's partitions, which Spark spreads).

* `round_robin` is `DefaultAllocateConnAndTaskStrategy`: connectors in sorted order, the i-th to
  the (i mod n)-th of the sorted workers. Simple and even, but a join or leave shifts almost
  every connector.
* `consistent_hash` is `AllocateConnAndTaskStrategyByConsistentHash` over RocketMQ's
  `ConsistentHashRouter`: each worker is placed on a ring at `virtualNode` points, the point of
  replica i being the hash of `"<workerId>-<i>"`; a connector goes to the first point at or
  after the hash of its name, wrapping around. `virtualNode=0` (RocketMQ's default) means "as
  many virtual nodes as there are workers". The hash (`consistentHashFunc`, MD5 by default) is
  the first four bytes of the MD5 digest of the UTF-8 key read as an unsigned big-endian
  number. A join moves only the connectors whose ring arc the new worker takes.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable

from sluice.sdk import ConfigException

ROUND_ROBIN = "round-robin"
CONSISTENT_HASH = "consistent-hash"

#: `allocTaskStrategy` values: our short names and RocketMQ Connect's class names.
STRATEGY_ALIASES = {
    ROUND_ROBIN: ROUND_ROBIN,
    "default": ROUND_ROBIN,
    "org.apache.rocketmq.connect.runtime.service.strategy.DefaultAllocateConnAndTaskStrategy": (
        ROUND_ROBIN
    ),
    CONSISTENT_HASH: CONSISTENT_HASH,
    "org.apache.rocketmq.connect.runtime.service.strategy."
    "AllocateConnAndTaskStrategyByConsistentHash": CONSISTENT_HASH,
}


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the digest's first 4 bytes, big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


HASH_FUNCTIONS: dict[str, Callable[[str], int]] = {"MD5": md5_hash}


def strategy_name(value: str) -> str:
    """The canonical strategy for an `allocTaskStrategy` value, or a ConfigException."""
    try:
        return STRATEGY_ALIASES[value.strip()]
    except KeyError:
        raise ConfigException(
            "allocTaskStrategy",
            f"unknown strategy {value!r}",
            suggestion="use " + " or ".join(sorted(STRATEGY_ALIASES)),
        ) from None


def round_robin(workers: Iterable[str], connectors: Iterable[str]) -> dict[str, str]:
    """`{connector: worker}`: sorted connectors dealt over sorted workers."""
    ring = sorted(set(workers))
    if not ring:
        return {}
    return {name: ring[i % len(ring)] for i, name in enumerate(sorted(set(connectors)))}


class HashRing:
    """Workers placed on a hash ring at `virtual_nodes` points each."""

    def __init__(
        self,
        workers: Iterable[str],
        virtual_nodes: int = 0,
        hash_func: Callable[[str], int] = md5_hash,
    ) -> None:
        ids = sorted(set(workers))
        count = virtual_nodes or len(ids)
        points: dict[int, str] = {}
        for worker in ids:
            for replica in range(count):
                # as in a sorted map: a later worker takes a point whose hash collides
                points[hash_func(f"{worker}-{replica}")] = worker
        self._hashes = sorted(points)
        self._owners = [points[h] for h in self._hashes]
        self._hash = hash_func

    def route(self, key: str) -> str | None:
        """The worker owning `key`: the first point at or after its hash, wrapping around."""
        if not self._hashes:
            return None
        i = bisect.bisect_left(self._hashes, self._hash(key))
        return self._owners[i % len(self._owners)]


def consistent_hash(
    workers: Iterable[str],
    connectors: Iterable[str],
    virtual_nodes: int = 0,
    hash_func: Callable[[str], int] = md5_hash,
) -> dict[str, str]:
    """`{connector: worker}` by the hash ring (see the module docstring)."""
    ring = HashRing(workers, virtual_nodes, hash_func)
    out: dict[str, str] = {}
    for name in sorted(set(connectors)):
        owner = ring.route(name)
        if owner is not None:
            out[name] = owner
    return out


def allocate(
    strategy: str,
    workers: Iterable[str],
    connectors: Iterable[str],
    *,
    virtual_nodes: int = 0,
    hash_func: Callable[[str], int] = md5_hash,
) -> dict[str, str]:
    """`{connector: worker}` with the named strategy (`ROUND_ROBIN` or `CONSISTENT_HASH`)."""
    if strategy == CONSISTENT_HASH:
        return consistent_hash(workers, connectors, virtual_nodes, hash_func)
    return round_robin(workers, connectors)
