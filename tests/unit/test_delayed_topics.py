"""A delayed topic (a push sink's retry topic) read as a delay queue, on a real embedded log: the
topic reader plans a queue only up to its first record whose due time is still ahead, so a
parked record is read back once due instead of being read, and parked again, at every
micro-batch (issue 33: 10,157 retry records for 3,000 inputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from sluice.bus.embedded import EmbeddedBus
from sluice.bus.spark import TopicReaderPlan, _due_time, _TopicReader

DUE = "sluice.push.due"
NOW = 1_800_000_000.0


def _records(*headers: dict[str, str] | None) -> pa.Table:
    n = len(headers)
    return pa.table(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array([b"v"] * n, pa.binary()),
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "headers": pa.array(
                [None if h is None else json.dumps(h) for h in headers], pa.string()
            ),
        }
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [NOW]
    monkeypatch.setattr("sluice.bus.spark.time.time", lambda: now[0])
    return now


def _end(reader: _TopicReader, first: int) -> int:
    return reader.latestOffset({"q": {"r/0": first}}, ReadAllAvailable())["q"]["r/0"]


def test_a_delayed_queue_is_read_up_to_its_first_record_not_due(
    tmp_path: Path, clock: list[float]
) -> None:
    bus = EmbeddedBus(tmp_path / "bus", default_queues=1)
    bus.create_topic("r", 1)
    bus.log.append(
        "r",
        0,
        _records(
            {DUE: repr(NOW - 5)},  # 0: due
            None,  # 1: no headers: due
            {DUE: "soon"},  # 2: unreadable: due (never held for good)
            {DUE: repr(NOW + 30)},  # 3: ahead
            {DUE: repr(NOW - 60)},  # 4: due, but behind 3 (a delay queue keeps its order)
        ),
    )
    delayed = _TopicReader(TopicReaderPlan("sink", bus.log, ("r",), delayed={"r": DUE}))
    assert _end(delayed, 0) == 3
    assert _end(delayed, 3) == 3  # held: nothing new to plan, no micro-batch
    clock[0] = NOW + 31
    assert _end(delayed, 3) == 5  # due now: it and what waited behind it
    # a plain reader of the same topic plans everything at once
    plain = _TopicReader(TopicReaderPlan("other", bus.log, ("r",)))
    clock[0] = NOW
    assert _end(plain, 0) == 5


def test_records_appended_behind_a_held_one_wait_and_a_due_one_before_it_does_not(
    tmp_path: Path, clock: list[float]
) -> None:
    bus = EmbeddedBus(tmp_path / "bus", default_queues=1)
    bus.create_topic("r", 1)
    reader = _TopicReader(TopicReaderPlan("sink", bus.log, ("r",), delayed={"r": DUE}))
    bus.log.append("r", 0, _records({DUE: repr(NOW - 1)}))
    assert _end(reader, 0) == 1
    bus.log.append("r", 0, _records({DUE: repr(NOW + 10)}, {DUE: repr(NOW)}))
    assert _end(reader, 1) == 1
    bus.log.append("r", 0, _records({DUE: repr(NOW - 100)}))
    assert _end(reader, 1) == 1
    clock[0] = NOW + 10.5
    assert _end(reader, 1) == 4


def test_due_time_reads_the_header_or_none() -> None:
    assert _due_time(json.dumps({DUE: "12.5", "x": "y"}), DUE) == 12.5
    assert _due_time(json.dumps({"x": "y"}), DUE) is None
    assert _due_time(None, DUE) is None
    assert _due_time("{not json " + DUE, DUE) is None
    assert _due_time(json.dumps({DUE: "later"}), DUE) is None
