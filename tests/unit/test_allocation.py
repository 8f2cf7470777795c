"""Allocation strategies: known answers derived by hand from RocketMQ Connect's algorithms.

Round-robin: sorted connectors dealt over sorted workers. Consistent hash: worker `w` replica `i`
sits at md5("w-i")[:4] (big-endian); a connector goes to the first point at or after
md5(name)[:4], wrapping around. The digests below are the first 4 bytes of MD5 of each key
(RFC 1321 vectors first), so each expected owner can be checked with any md5 tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.runtime.allocation import (
    CONSISTENT_HASH,
    ROUND_ROBIN,
    allocate,
    consistent_hash,
    md5_hash,
    round_robin,
    strategy_name,
)
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException

WORKERS = ["worker-c", "worker-a", "worker-b"]  # unsorted on purpose: both strategies sort
CONNECTORS = [f"conn-{i}" for i in range(6)]

# md5(key)[:4] for the ring of WORKERS with 3 virtual nodes and for the connectors
DIGESTS = {
    "worker-a-0": 0x6560CB66,
    "worker-a-1": 0x40430E2F,
    "worker-a-2": 0x3F6AC9A5,
    "worker-b-0": 0xE713F9C4,
    "worker-b-1": 0x862BCA05,
    "worker-b-2": 0xA9601C93,
    "worker-c-0": 0x7B2546CC,
    "worker-c-1": 0x02E1A919,
    "worker-c-2": 0x5AC30A33,
    "conn-0": 0x4A445C44,
    "conn-1": 0x7DF0D059,
    "conn-2": 0x249E49DE,
    "conn-3": 0xF5A6BC61,
    "conn-4": 0x5627617A,
    "conn-5": 0x357280CF,
}


def test_md5_hash_is_the_first_four_digest_bytes_big_endian() -> None:
    assert md5_hash("") == 0xD41D8CD9  # RFC 1321: d41d8cd98f00b204e9800998ecf8427e
    assert md5_hash("abc") == 0x90015098  # RFC 1321: 900150983cd24fb0d6963f7d28e17f72
    for key, digest in DIGESTS.items():
        assert md5_hash(key) == digest, key


def test_round_robin_deals_sorted_connectors_over_sorted_workers() -> None:
    assert round_robin(WORKERS, reversed(CONNECTORS)) == {
        "conn-0": "worker-a",
        "conn-1": "worker-b",
        "conn-2": "worker-c",
        "conn-3": "worker-a",
        "conn-4": "worker-b",
        "conn-5": "worker-c",
    }
    assert round_robin([], CONNECTORS) == {}
    # a leave shifts everything after the gap: the reason for the consistent hash
    assert round_robin(["worker-a", "worker-c"], CONNECTORS)["conn-1"] == "worker-c"


def test_consistent_hash_routes_to_the_next_point_on_the_ring() -> None:
    # ring, sorted: c-1 02e1, a-2 3f6a, a-1 4043, c-2 5ac3, a-0 6560, c-0 7b25, b-1 862b,
    # b-2 a960, b-0 e713
    expected = {
        "conn-0": "worker-c",  # 4a44 -> c-2 5ac3
        "conn-1": "worker-b",  # 7df0 -> b-1 862b
        "conn-2": "worker-a",  # 249e -> a-2 3f6a
        "conn-3": "worker-c",  # f5a6 -> past b-0 e713: wraps to c-1 02e1
        "conn-4": "worker-c",  # 5627 -> c-2 5ac3
        "conn-5": "worker-a",  # 3572 -> a-2 3f6a
    }
    assert consistent_hash(WORKERS, CONNECTORS, virtual_nodes=3) == expected
    # virtualNode=0 (RocketMQ's default) means one point per worker per worker: 3 here
    assert consistent_hash(WORKERS, CONNECTORS, virtual_nodes=0) == expected
    assert allocate(CONSISTENT_HASH, WORKERS, CONNECTORS, virtual_nodes=3) == expected


def test_a_join_moves_only_what_the_new_worker_takes() -> None:
    many = [f"conn-{i}" for i in range(40)]
    before = consistent_hash(WORKERS, many, virtual_nodes=8)
    after = consistent_hash([*WORKERS, "worker-d"], many, virtual_nodes=8)
    moved = {c for c in many if before[c] != after[c]}
    assert moved and all(after[c] == "worker-d" for c in moved)
    assert len(moved) < len(many) // 2
    rr_before = round_robin(WORKERS, CONNECTORS)
    rr_after = round_robin([*WORKERS, "worker-d"], CONNECTORS)
    assert {c for c in CONNECTORS if rr_before[c] != rr_after[c]} == {
        "conn-3",
        "conn-4",
        "conn-5",
    }


def test_strategy_names_accept_rocketmq_class_names() -> None:
    prefix = "org.apache.rocketmq.connect.runtime.service.strategy."
    assert strategy_name(prefix + "DefaultAllocateConnAndTaskStrategy") == ROUND_ROBIN
    assert strategy_name(prefix + "AllocateConnAndTaskStrategyByConsistentHash") == CONSISTENT_HASH
    with pytest.raises(ConfigException, match="allocTaskStrategy: unknown strategy 'Hashy'"):
        strategy_name("Hashy")


def test_distributed_worker_keys_are_checked_naming_the_key(tmp_path: Path) -> None:
    base = {"storePathRootDir": str(tmp_path), "cluster.store.url": "postgresql://x@h/db"}
    config = WorkerConfig.from_properties(
        {**base, "allocTaskStrategy": "consistent-hash", "virtualNode": "4"}
    )
    assert (config.cluster.alloc_strategy, config.cluster.virtual_nodes) == (CONSISTENT_HASH, 4)
    assert (config.cluster.rebalance_interval_ms, config.cluster.session_timeout_ms) == (1000, 6000)
    with pytest.raises(ConfigException, match=r"cluster\.session\.timeout\.ms: 2000 ms is less"):
        WorkerConfig.from_properties({**base, "cluster.session.timeout.ms": "2000"})
    kafka = {**base, "bus": "kafka", "bootstrap.servers": "127.0.0.1:9092"}
    assert WorkerConfig.from_properties(kafka).bus.kind == "kafka"  # every bus is fenced
    with pytest.raises(ConfigException, match=r"^bootstrap\.servers: required key is missing"):
        WorkerConfig.from_properties({**base, "bus": "kafka"})
    with pytest.raises(ConfigException, match="allocTaskStrategy: unknown strategy"):
        WorkerConfig.from_properties({**base, "allocTaskStrategy": "random"})
    with pytest.raises(ConfigException, match="consistentHashFunc"):
        WorkerConfig.from_properties({**base, "consistentHashFunc": "SHA1"})
