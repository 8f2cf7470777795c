"""How a source's records find their queue: the key's crc32 (else the source partition's hash),
and the split of a task's batch into one run of rows per queue, each in its original order."""

from __future__ import annotations

import zlib

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from sluice.bus.spark import by_queue
from sluice.engine.direct import route

_INT31 = 0x7FFFFFFF


def _route_one_by_one(keys: list[bytes | None], hashes: list[int | None]) -> list[int | None]:
    return [h if k is None else zlib.crc32(k) & _INT31 for k, h in zip(keys, hashes, strict=True)]


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=12)),
            st.one_of(st.none(), st.integers(0, _INT31)),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_route_is_the_keys_crc32_else_the_partition_hash(rows: list) -> None:
    keys = [k for k, _ in rows]
    hashes = [h for _, h in rows]
    got = route(pa.array(keys, pa.binary()), pa.array(hashes, pa.int32()))
    assert got.to_pylist() == _route_one_by_one(keys, hashes)


def test_route_of_no_key_at_all_is_the_partition_hash() -> None:
    hashes = pa.array([3, None, 7], pa.int32())
    assert route(pa.array([None, None, None], pa.binary()), hashes) is hashes


@given(st.lists(st.integers(0, 7), min_size=1, max_size=200))
def test_by_queue_keeps_each_queues_rows_in_order(targets: list[int]) -> None:
    rows = pa.record_batch({"n": list(range(len(targets)))})
    parts = list(by_queue(rows, pa.array(targets, pa.int64()), 8))
    assert [q for q, _ in parts] == sorted(set(targets))
    for queue, part in parts:
        assert part.column("n").to_pylist() == [i for i, t in enumerate(targets) if t == queue]


def test_a_batch_for_one_queue_is_passed_on_whole() -> None:
    rows = pa.record_batch({"n": [1, 2, 3]})
    [(queue, part)] = list(by_queue(rows, pa.array([5, 5, 5], pa.int64()), 8))
    assert queue == 5 and part is rows
