"""The contract every bus backend keeps (embedded, Kafka on librdkafka's mock cluster, RocketMQ on
the real 5.x broker of `scripts/servers.sh`): exact ranges, invisible staging, idempotent
commits, roll-forward after a crash mid-commit, retention, many queues, empty and unknown topics.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from sluice.bus.base import OffsetOutOfRange, StagedSegment, UnknownTopic
from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import (
    BACKENDS,
    Harness,
    backends,
    harness_for,
    read_all,
    records,
    sink_reader,
    topic_frame,
    unique,
)

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: one mock cluster


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest) -> Harness:
    return harness_for(request.param, request)


@pytest.fixture
def bus(harness: Harness, tmp_path: Path) -> Any:
    b = harness.make_bus(tmp_path)
    yield b
    b.close()


def stage(bus: Any, writer: str, frames: list[Any], partition: int = 0) -> list[StagedSegment]:
    return bus.topic_appender(writer_id=writer).write(iter(frames), partition)


def commit(bus: Any, writer: str, batch_id: int, receipts: list[list[StagedSegment]]) -> None:
    bus.topic_appender(writer_id=writer).commit(receipts, batch_id)


def values(rows: list[dict[str, Any]]) -> list[bytes]:
    return [r["value"] for r in rows]


#: Record times an hour ago, in microseconds: a broker deletes records older than its retention
#: (Kafka's 7 days, even from the active segment, at its next retention check), and a fixed time
#: of 2023 made a Kafka read meet a partition emptied between two of the test's calls.
BASE_US = (int(time.time()) - 3600) * 1_000_000


def test_write_then_read_exact_ranges(harness: Harness, bus: Any) -> None:
    topic = harness.new_topic(bus, 4)
    n = 40
    frame = topic_frame(
        topic,
        [f"v{i:03d}".encode() for i in range(n)],
        keys=[f"k{i}".encode() if i % 2 else None for i in range(n)],
        headers=[f'{{"h": "{i}"}}' if i % 3 == 0 else None for i in range(n)],
        route=[i % 4 for i in range(n)],
        timestamps=[BASE_US + i * 1000 for i in range(n)],
    )
    commit(bus, "w", 0, [stage(bus, "w", [frame])])
    info = bus.describe(topic)
    assert info.queues == 4
    end = 10 + harness.marker
    assert [(r.queue, r.min_offset, r.max_offset) for r in info.ranges] == [
        (q, 0, end) for q in range(4)
    ]
    assert records(bus, topic) == n

    rows = read_all(bus, topic, 1, 3, 7)
    assert [r["queue_offset"] for r in rows] == [3, 4, 5, 6]
    expected = [i for i in range(n) if i % 4 == 1][3:7]
    assert values(rows) == [f"v{i:03d}".encode() for i in expected]
    assert [r["key"] for r in rows] == [f"k{i}".encode() for i in expected]
    assert [r["topic"] for r in rows] == [topic] * 4 and {r["queue_id"] for r in rows} == {1}
    stamps = [int(r["timestamp"].timestamp() * 1_000_000) for r in rows]
    assert stamps == [BASE_US + i * 1000 for i in expected]
    by_value = {r["value"]: r["headers"] for q in range(4) for r in read_all(bus, topic, q, 0, 10)}
    assert by_value[b"v000"] == '{"h": "0"}' and by_value[b"v001"] is None

    assert len(read_all(bus, topic, 0, 0, 1_000)) == 10  # the end is clipped to max_offset
    assert read_all(bus, topic, 0, end, end + 10) == []  # at the end: nothing yet
    with pytest.raises(OffsetOutOfRange) as exc:
        list(bus.log.read(topic, 0, end + 1, 20))
    assert (exc.value.min_offset, exc.value.max_offset) == (0, end)


def test_staged_batch_is_invisible_until_committed(harness: Harness, bus: Any) -> None:
    topic = harness.new_topic(bus, 2)
    frame = topic_frame(topic, [b"a", b"b", b"c"], route=[0, 1, 0])
    staged = stage(bus, "w", [frame])
    assert {s.queue for s in staged} == {0, 1} and sum(s.rows for s in staged) == 3
    assert bus.count(topic) == 0
    assert all(r.max_offset == 0 for r in bus.describe(topic).ranges)

    # an aborted batch never becomes visible, and a later batch is unaffected
    bus.topic_appender(writer_id="w").abort([staged], 0)
    assert bus.count(topic) == 0
    commit(bus, "w", 1, [stage(bus, "w", [frame])])
    assert records(bus, topic) == 3


def test_replayed_batch_is_not_appended_twice(harness: Harness, bus: Any) -> None:
    topic = harness.new_topic(bus, 2)
    frame = topic_frame(
        topic, [f"r{i}".encode() for i in range(10)], route=[i % 2 for i in range(10)]
    )
    commit(bus, "w", 3, [stage(bus, "w", [frame])])
    assert records(bus, topic) == 10
    # Spark replays batch 3 after a restart: the tasks stage the same rows again
    replay = stage(bus, "w", [frame])
    assert bus.log.commit("w", 3, replay) is False
    assert records(bus, topic) == 10
    # another writer's batch 3 and this writer's batch 4 are new data
    commit(bus, "other", 3, [stage(bus, "other", [frame])])
    commit(bus, "w", 4, [stage(bus, "w", [frame])])
    assert records(bus, topic) == 30
    end = 15 + 3 * harness.marker
    assert (
        values(read_all(bus, topic, 0, 0, end)) == [f"r{i}".encode() for i in range(0, 10, 2)] * 3
    )


def test_a_writer_of_a_superseded_generation_cannot_commit(harness: Harness, bus: Any) -> None:
    """Distributed mode: once the new owner of a connector recorded its lease generation, the
    old owner's commits are refused, whatever it had staged; the new owner's go on."""
    from sluice.bus.base import WriterFenced

    topic = harness.new_topic(bus, 2)
    old = bus.topic_appender(writer_id="c/run", fence=("c", 1))
    old.commit([old.write(iter([topic_frame(topic, [b"a"], route=[0])]), 0)], 0)
    late = old.write(iter([topic_frame(topic, [b"late"], route=[1])]), 0)
    bus.fence("c", 2)
    with pytest.raises(WriterFenced, match="fenced: writer 'c' epoch 1 may no longer commit"):
        old.commit([late], 1)
    new = bus.topic_appender(writer_id="c/run", fence=("c", 2))
    new.commit([new.write(iter([topic_frame(topic, [b"b"], route=[1])]), 0)], 1)
    assert sorted(values(read_all(bus, topic, 0, 0, 99) + read_all(bus, topic, 1, 0, 99))) == [
        b"a",
        b"b",
    ]


# Only where a commit can be half-done (the embedded log commits in one SQLite transaction).
@pytest.mark.parametrize("harness", backends(lambda h: not h.atomic_commit), indirect=True)
def test_crash_mid_commit_is_completed_by_the_replay(
    harness: Harness, bus: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = harness.new_topic(bus, 2)
    rows = [f"c{i:03d}".encode() for i in range(150)]
    frame = topic_frame(topic, rows, route=[0 if i < 100 else 1 for i in range(150)])

    real_send = type(bus.log)._send

    def dying_send(self: Any, topic_: str, tables: dict[int, Any], tag: str, check: Any) -> None:
        # the broker got the first 30 messages of each queue, then the driver died
        real_send(self, topic_, {q: t.slice(0, 30) for q, t in tables.items()}, tag, check)
        raise RuntimeError("simulated crash while sending")

    monkeypatch.setattr(type(bus.log), "_send", dying_send)
    with pytest.raises(RuntimeError, match="simulated crash"):
        commit(bus, "w", 7, [stage(bus, "w", [frame])])
    monkeypatch.setattr(type(bus.log), "_send", real_send)
    assert [r.max_offset for r in bus.describe(topic).ranges] == [30 + harness.marker] * 2

    # meanwhile another writer appends to queue 0
    commit(bus, "other", 0, [stage(bus, "other", [topic_frame(topic, [b"x"] * 5, route=[0] * 5)])])

    # a new process replays batch 7: exactly the missing rows are sent
    again = harness.make_bus(tmp_path)
    try:
        assert again.log.commit("w", 7, stage(again, "w", [frame])) is True
        assert again.log.commit("w", 7, stage(again, "w", [frame])) is False
        q0 = values(read_all(again, topic, 0, 0, 1_000))
        q1 = values(read_all(again, topic, 1, 0, 1_000))
    finally:
        again.close()
    assert [v for v in q0 if v != b"x"] == rows[:100] and q0.count(b"x") == 5
    assert q1 == rows[100:]


def test_reader_plans_exact_ranges_and_replays_them(
    harness: Harness, bus: Any, tmp_path: Path
) -> None:
    from sluice.sdk import partition_key
    from sluice.store.positions import SqlitePositionStore

    topic = harness.new_topic(bus, 3)
    frame = topic_frame(
        topic, [f"p{i}".encode() for i in range(30)], route=[i % 3 for i in range(30)]
    )
    commit(bus, "w", 0, [stage(bus, "w", [frame])])
    positions = SqlitePositionStore(str(tmp_path / "positions.sqlite"))
    reader = bus.topic_reader(
        name="snk",
        topics=[topic],
        max_tasks=2,
        control_path=str(tmp_path / "control.json"),
        positions=positions,
        max_rows=4,
    )(options={}).streamReader(schema=None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["q"] == {f"{topic}/{q}": 4 for q in range(3)}  # read limit: 4 rows per queue
    parts = reader.partitions(start, end)
    assert len(parts) == 2
    first = [row for p in parts for b in reader.read(p) for row in b.to_pylist()]
    again = [row for p in parts for b in reader.read(p) for row in b.to_pylist()]
    assert first == again and len(first) == 12
    assert sorted((r["queue_id"], r["queue_offset"]) for r in first) == [
        (q, o) for q in range(3) for o in range(4)
    ]
    reader.commit(end)
    stored = positions.load("snk")
    assert stored[partition_key(bus.queue_partition(topic, 2))] == {"queueOffset": 4}

    # a new query starts from the stored positions
    fresh = bus.topic_reader(
        name="snk",
        topics=[topic],
        max_tasks=1,
        control_path=str(tmp_path / "control.json"),
        positions=positions,
    )(options={}).streamReader(schema=None)
    begin = fresh.initialOffset()
    assert begin["q"] == {f"{topic}/{q}": 4 for q in range(3)}
    rest = fresh.latestOffset(begin, fresh.getDefaultReadLimit())
    rows = [r for p in fresh.partitions(begin, rest) for b in fresh.read(p) for r in b.to_pylist()]
    assert sorted(r["queue_offset"] for r in rows) == sorted(list(range(4, 10)) * 3)


def test_an_idle_reader_wakes_when_this_worker_commits(
    harness: Harness, bus: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that found nothing new waits on the topic's doorbell: a commit of this worker
    rings it. The pauses are made 10 minutes long, so only the bell can end the wait in time
    (other writers of a broker's topics do not ring: there the reader looks again after
    `IDLE_PAUSE_S` anyway)."""
    import threading

    import sluice.bus.spark as bus_spark

    monkeypatch.setattr(bus_spark, "IDLE_PAUSE_S", 600.0)
    topic = harness.new_topic(bus, 1)
    reader = sink_reader(bus, topic, tmp_path, idle_wait_s=600.0)
    start = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert start["q"] == {f"{topic}/0": 0}
    looked = threading.Event()
    latest = reader._latest

    def look(*args: Any) -> Any:
        try:
            return latest(*args)
        finally:
            looked.set()

    reader._latest = look
    ends: list[dict] = []
    waiting = threading.Thread(
        target=lambda: ends.append(reader.latestOffset(start, reader.getDefaultReadLimit())),
        daemon=True,
    )
    waiting.start()
    wait_until(looked.is_set, what="the reader's first look")
    commit(bus, "w", 0, [stage(bus, "w", [topic_frame(topic, [b"rung"], route=[0])])])
    wait_until(lambda: bool(ends), timeout=60, what="the reader to wake at the commit")
    rows = [
        r for p in reader.partitions(start, ends[0]) for b in reader.read(p) for r in b.to_pylist()
    ]
    assert values(rows) == [b"rung"]
    reader.stop()


def test_a_new_reader_starts_at_the_first_or_the_last_offset(
    harness: Harness, bus: Any, tmp_path: Path
) -> None:
    from sluice.sdk import ConfigException

    topic = harness.new_topic(bus, 2)
    commit(
        bus, "w", 0, [stage(bus, "w", [topic_frame(topic, [b"a", b"b", b"c"], route=[0, 0, 1])])]
    )

    def reader(where: str) -> Any:
        return bus.topic_reader(
            name=f"n-{where}",
            topics=[topic],
            max_tasks=1,
            control_path=str(tmp_path / f"{where}.json"),
            positions=None,
            consume_from=where,
        )(options={}).streamReader(schema=None)

    m = harness.marker
    first = reader("CONSUME_FROM_FIRST_OFFSET")
    start = first.initialOffset()
    assert first.latestOffset(start, None)["q"] == {f"{topic}/0": 2 + m, f"{topic}/1": 1 + m}
    assert (
        sum(
            len(list(first.read(p)))
            for p in first.partitions(start, first.latestOffset(start, None))
        )
        > 0
    )
    last = reader("CONSUME_FROM_LAST_OFFSET")
    start = last.initialOffset()
    assert start["q"] == {f"{topic}/0": 2 + m, f"{topic}/1": 1 + m}
    end = last.latestOffset(start, None)
    assert last.partitions(start, end) == []  # only what comes after the start
    commit(bus, "w", 1, [stage(bus, "w", [topic_frame(topic, [b"d"], route=[1])])])
    end = last.latestOffset(start, None)
    rows = [r for p in last.partitions(start, end) for b in last.read(p) for r in b.to_pylist()]
    assert [r["value"] for r in rows] == [b"d"]
    with pytest.raises(ConfigException, match=r"^consume.from.where: expected"):
        reader("CONSUME_FROM_TIMESTAMP")


# Only where a test can make retention happen (RocketMQ deletes by commit-log file age, 48 h).
@pytest.mark.parametrize("harness", backends(lambda h: h.can_truncate), indirect=True)
def test_retention_removes_old_offsets_and_the_reader_continues(
    harness: Harness, bus: Any, tmp_path: Path
) -> None:
    topic = harness.new_topic(bus, 1)
    for n in range(3):  # three commits: three segments of 10 on the embedded log
        frame = topic_frame(topic, [f"{n}-{i}".encode() for i in range(10)], route=[0] * 10)
        commit(bus, "w", n, [stage(bus, "w", [frame])])
    m = harness.marker
    cut, end = 20 + 2 * m, 30 + 3 * m  # where the third commit starts, and the end
    harness.truncate(bus, topic, 0, cut)
    rng = bus.describe(topic).ranges[0]
    assert (rng.min_offset, rng.max_offset) == (cut, end)
    with pytest.raises(OffsetOutOfRange) as exc:
        list(bus.log.read(topic, 0, 5, end))
    assert exc.value.min_offset == cut
    # the reader delivers what is left (and warns) instead of failing the query
    reader = bus.topic_reader(
        name="c", topics=[topic], max_tasks=1, control_path=str(tmp_path / "c.json"), positions=None
    )(options={}).streamReader(schema=None)
    from pyspark.sql.datasource import InputPartition

    rows = [r for b in reader.read(InputPartition([(topic, 0, 5, end)])) for r in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(cut, cut + 10))
    assert rows[0]["value"] == b"2-0"
    # a new reader starts at the first retained offset
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["r"] == {f"{topic}/0": cut}


def test_many_queues_keep_each_key_in_order(harness: Harness, bus: Any) -> None:
    topic = harness.new_topic(bus, 64)
    keys = [f"key-{i % 50}".encode() for i in range(1_000)]
    route = [zlib.crc32(k) & 0x7FFFFFFF for k in keys]  # what the engine computes for a key
    frame = topic_frame(topic, [f"{i}".encode() for i in range(1_000)], keys=keys, route=route)
    commit(bus, "w", 0, [stage(bus, "w", [frame], partition=1)])
    ranges = bus.describe(topic).ranges
    assert len(ranges) == 64 and records(bus, topic) == 1_000
    seen: dict[bytes, list[int]] = {}
    for r in ranges:
        for row in read_all(bus, topic, r.queue, 0, r.max_offset):
            assert (zlib.crc32(row["key"]) & 0x7FFFFFFF) % 64 == r.queue
            seen.setdefault(row["key"], []).append(int(row["value"]))
    assert len(seen) == 50
    for key, order in seen.items():
        assert order == sorted(order) and len(order) == 20, key


def test_empty_topic(harness: Harness, bus: Any, tmp_path: Path) -> None:
    topic = harness.new_topic(bus, 3)
    assert topic in bus.log.topics()
    assert [(r.min_offset, r.max_offset) for r in bus.describe(topic).ranges] == [(0, 0)] * 3
    assert bus.count(topic) == 0
    assert read_all(bus, topic, 2, 0, 10) == []
    reader = bus.topic_reader(
        name="e", topics=[topic], max_tasks=4, control_path=str(tmp_path / "e.json"), positions=None
    )(options={}).streamReader(schema=None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["q"] == {f"{topic}/{q}": 0 for q in range(3)}
    assert reader.partitions(start, end) == []
    # an empty commit is harmless
    commit(bus, "w", 0, [stage(bus, "w", [topic_frame(topic, [])])])
    assert bus.count(topic) == 0


def test_unknown_topic(harness: Harness, bus: Any, tmp_path: Path) -> None:
    missing = unique("missing")
    assert not bus.log.topic_exists(missing)
    assert bus.count(missing) == 0
    with pytest.raises(UnknownTopic, match=missing):
        bus.log.queue_count(missing)
    reader = bus.topic_reader(
        name="u",
        topics=[missing],
        max_tasks=1,
        control_path=str(tmp_path / "u.json"),
        positions=None,
    )(options={}).streamReader(schema=None)
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["q"] == {}
    # asking about a topic never creates it (Kafka: the broker auto-creates topics a metadata
    # request names unless the client says not to)
    assert missing not in bus.log.topics()


def test_ensure_topic_creates_a_missing_topic_and_keeps_an_existing_one(
    harness: Harness, bus: Any
) -> None:
    existing = harness.new_topic(bus, 3)
    assert bus.log.ensure_topic(existing, 5) == 3
    assert bus.log.queue_count(existing) == 3
    missing = unique("ensured")
    assert bus.log.ensure_topic(missing, 2) == 2
    assert bus.log.queue_count(missing) == 2


@pytest.mark.spark
def test_file_to_topic_to_file_is_byte_identical(
    harness: Harness, spark: Any, tmp_path: Path
) -> None:
    from sluice.runtime.runner import ConnectorRunner

    bus = harness.make_bus(tmp_path / "store", default_queues=4)
    topic = harness.new_topic(bus, 4)
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"line {i} ✓\n" for i in range(2_000)), encoding="utf-8")
    runner = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=100, bus=bus)
    try:
        runner.start(
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": topic,
            },
        )
        runner.start(
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": topic,
            },
        )
        wait_until(
            lambda: dst.exists() and dst.stat().st_size == src.stat().st_size,
            timeout=180,
            what="the sink file to catch up",
        )
        for name in ("src", "dst"):
            assert runner.running[name].failure() is None
    finally:
        runner.close()
        bus.close()
    assert dst.read_bytes() == src.read_bytes()
    assert records(bus, topic) == 2_000
