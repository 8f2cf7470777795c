"""The embedded bus around the log: reader planning (pause/resume/reset) and maintenance."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def _batch(values: range) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array([str(v).encode() for v in values], pa.binary())})


def test_reader_plans_pauses_and_resets(tmp_path: Path) -> None:
    from sluice.bus.embedded import EmbeddedBus

    bus = EmbeddedBus(tmp_path, default_queues=2)
    bus.create_topic("t")
    for q in (0, 1):
        bus.log.append("t", q, _batch(range(10)))
    control = bus.reader_control(str(tmp_path / "control.json"))
    reader_cls = bus.topic_reader(
        name="c",
        topics=["t"],
        max_tasks=2,
        control_path=str(tmp_path / "control.json"),
        positions=None,
    )
    reader = reader_cls(options={}).streamReader(schema=None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["q"] == {"t/0": 10, "t/1": 10} and end["r"] == {"t/0": 0, "t/1": 0}
    control.apply([{"op": "pause", "partition": {"topic": "t", "queueId": "1"}}])
    bus.log.append("t", 1, _batch(range(5)))
    after = reader.latestOffset(end, None)
    assert after["q"]["t/1"] == 10  # paused: no progress
    control.apply(
        [
            {"op": "resume", "partition": {"topic": "t", "queueId": "1"}},
            {
                "op": "reset",
                "partition": {"topic": "t", "queueId": "0"},
                "offset": {"queueOffset": 3},
            },
        ]
    )
    again = reader.latestOffset(end, None)
    assert again["q"] == {"t/0": 10, "t/1": 15} and again["r"] == {"t/0": 3}
    ranges = [tuple(r) for p in reader.partitions(end, again) for r in p.value]
    assert ranges == [("t", 0, 3, 10), ("t", 1, 10, 15)]
    # a reset is applied once: the next plan, starting from that end, finds nothing new (its
    # answer is that end itself: no micro-batch, no second reset)
    assert reader.latestOffset(again, None) == again
    reader.commit(again)
    assert control.load()["resets"] == {}


def test_bus_maintenance_applies_retention_and_removes_orphans(tmp_path: Path) -> None:
    from sluice.bus.embedded import EmbeddedBus

    bus = EmbeddedBus(tmp_path, default_queues=1)
    bus.create_topic("t")
    for _ in range(3):
        bus.log.append("t", 0, _batch(range(100)))
    bus.log.stage("t", 0, _batch(range(5)))  # a writer died before committing this
    result = bus.maintain(retention_bytes=1, orphan_age_s=0)
    assert result["orphans_removed"] == 1
    assert result["segments_expired"] >= 2
    rng = bus.log.offsets("t")[0]
    assert rng.max_offset == 300 and rng.min_offset >= 200
