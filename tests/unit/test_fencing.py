"""Lease fencing: a generation that was superseded can no longer commit positions, sink
batches or topic publishes (each check in the same SQLite transaction as the write)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.embedded.log import EmbeddedLog, WriterFenced
from sluice.store.positions import Fenced, FencedPositions, SqlitePositionStore


def test_positions_refuse_an_older_generation(tmp_path: Path) -> None:
    store = SqlitePositionStore(tmp_path / "positions.sqlite")
    old = FencedPositions(store, 1)
    store.fence("c", 1)
    old.save("c", {"p": {"offset": 1}})
    old.check("c")
    store.fence("c", 2)  # another worker took the lease
    new = FencedPositions(store, 2)
    with pytest.raises(Fenced, match="generation 1 may no longer commit positions"):
        old.save("c", {"p": {"offset": 99}})
    with pytest.raises(Fenced, match="sink batch 7"):
        old.check("c", "sink batch 7")
    assert store.load("c") == {"p": {"offset": 1}}  # the refused save changed nothing
    new.save("c", {"p": {"offset": 2}})
    store.fence("c", 1)  # fencing never goes back
    new.check("c")
    # other connectors and unfenced saves (standalone) are untouched
    store.save("d", {"p": {"offset": 5}})
    assert store.load("d") == {"p": {"offset": 5}}


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            f.name: pa.array([None] * n, f.type)
            if f.name not in ("value",)
            else pa.array([b"x"] * n, f.type)
            for f in STORED_SCHEMA
        },
        schema=STORED_SCHEMA,
    )


def test_embedded_log_refuses_a_fenced_writers_commit(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "bus")
    log.create_topic("t", 1)
    seg = log.stage("t", 0, _rows(2))
    assert log.commit("c/run", 0, [seg], fence=("c", 1))
    log.fence("t", "c", 2)  # the new owner fences before it starts
    late = log.stage("t", 0, _rows(3))
    with pytest.raises(WriterFenced, match="epoch 1 may no longer commit to topic 't'"):
        log.commit("c/run", 1, [late], fence=("c", 1))
    assert log.offsets("t")[0].max_offset == 2  # nothing of the late commit is visible
    # the new owner replays batch 0 (already published: skipped) and goes on
    again = log.stage("t", 0, _rows(2))
    assert not log.commit("c/run", 0, [again], fence=("c", 2))
    nxt = log.stage("t", 0, _rows(3))
    assert log.commit("c/run", 1, [nxt], fence=("c", 2))
    assert log.offsets("t")[0].max_offset == 5
    # a newer epoch seen first in a commit fences the older one too
    assert log.commit("c/run", 2, [log.stage("t", 0, _rows(1))], fence=("c", 3))
    with pytest.raises(WriterFenced):
        log.commit("c/run", 3, [log.stage("t", 0, _rows(1))], fence=("c", 2))
    # unfenced writers (standalone) are not affected
    assert log.commit("other", 0, [log.stage("t", 0, _rows(1))])
