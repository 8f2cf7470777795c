"""The topic reader's 0..n-1 offsets cache: right values, and memory that follows the batches."""

from __future__ import annotations

from sluice.bus import spark


def test_arange_gives_0_to_n_and_grows_only_with_the_batches_seen() -> None:
    spark._OFFSETS_CACHE.clear()
    assert spark._arange(0).to_pylist() == []
    assert spark._arange(3).to_pylist() == [0, 1, 2]
    # a trickled pipeline's worker keeps a small cache, not a fixed million entries (8 MiB)
    assert len(spark._OFFSETS_CACHE["a"]) == 1024
    big = spark._arange(5000)
    assert big.to_pylist() == list(range(5000))
    assert len(spark._OFFSETS_CACHE["a"]) == 8192
    assert spark._arange(1024).to_pylist() == list(range(1024))
    assert len(spark._OFFSETS_CACHE["a"]) == 8192
