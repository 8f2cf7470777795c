"""The Kafka bus's range reads straight from the partition leader (`sluice.clients.kafka_fetch`,
Fetch v11 decoded column-wise) against librdkafka's `read_committed` consumer, on the real Kafka 4
broker of `scripts/servers.sh`: the same records (offsets, keys, values, timestamps, headers) for
whole and partial ranges of a partition holding plain records, committed transactions and
aborted ones of two interleaved producers; compressed batches go to librdkafka; a range that
retention removed is reported."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sluice.bus.base import OffsetOutOfRange
from sluice.bus.kafka import KafkaBus
from sluice.bus.kafka._log import _to_batch
from sluice.clients.kafka_fetch import Unsupported, decode_records
from tests.integration import bus_helpers
from tests.integration.bus_helpers import RealKafka, unique

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker
_BASE_MS = int(time.time() * 1000) - 60_000


def _producer(kafka: RealKafka, **config: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": kafka.bootstraps, "linger.ms": 5, **config})


def _fill(kafka: RealKafka, topic: str) -> int:
    """Plain records, then two transactional producers interleaving committed and aborted
    transactions; returns how many records a read_committed reader sees."""
    plain = _producer(kafka)
    visible = 0
    # recent timestamps: the broker's time retention (7 days) goes by them
    for i in range(300):
        headers = [("h", f"{i}".encode()), ("sluice.writer", b"tag")] if i % 3 == 0 else None
        plain.produce(
            topic,
            value=None if i == 7 else (b"" if i == 8 else f"plain-{i}".encode() * (1 + i % 5)),
            key=None if i % 2 else f"k{i}".encode(),
            partition=0,
            timestamp=_BASE_MS + i,
            headers=headers,
        )
        visible += 1
    plain.flush(30)
    a = _producer(kafka, **{"transactional.id": f"fetch-a-{uuid.uuid4().hex[:6]}"})
    b = _producer(kafka, **{"transactional.id": f"fetch-b-{uuid.uuid4().hex[:6]}"})
    a.init_transactions(30)
    b.init_transactions(30)
    for round_ in range(4):
        a.begin_transaction()
        b.begin_transaction()
        for i in range(200):
            a.produce(topic, value=f"a{round_}-{i}".encode(), partition=0)
            b.produce(topic, value=f"b{round_}-{i}".encode(), key=b"bk", partition=0)
            if i % 50 == 0:
                a.flush(30)
                b.flush(30)
        a.flush(30)
        b.flush(30)
        if round_ % 2:
            a.abort_transaction(30)
        else:
            a.commit_transaction(30)
            visible += 200
        b.commit_transaction(30)
        visible += 200
    return visible


def _rows(batches: Any) -> list[dict[str, Any]]:
    return [row for _, batch in batches for row in batch.to_pylist()]


@pytest.fixture(scope="module")
def filled(kafka_cluster: RealKafka, tmp_path_factory: pytest.TempPathFactory) -> Any:
    topic = unique("fetch")
    kafka_cluster.create_topic(topic, 1)
    visible = _fill(kafka_cluster, topic)
    bus = KafkaBus(tmp_path_factory.mktemp("fetch"), bootstrap_servers=kafka_cluster.bootstraps)
    # `commit_transaction` returns before the markers reach the partition: wait as the bus does
    # after its own commits (a read right after the fill once saw 1,300 of 1,500 records in CI)
    bus.log._wait_stable(topic, [0])
    yield bus, topic, visible
    bus.close()


def test_leader_reads_match_librdkafka(filled: Any) -> None:
    bus, topic, visible = filled
    log = bus.log
    assert log._fetcher() is not None
    end = bus.describe(topic).ranges[0].max_offset
    fast = _rows(log._read(topic, 0, 0, end))
    slow = [r for _, rows in log._consume(topic, 0, 0, end) for r in _to_batch(rows).to_pylist()]
    # the leader path itself (no fall-back to librdkafka), in several fetches
    direct = [b for _, b, _ in log._fetch(log._fetcher(), topic, 0, 0, end)]
    assert [r for b in direct for r in b.to_pylist()] == fast
    assert len(fast) == visible
    assert fast == slow
    assert {r["value"] for r in fast if r["value"] and r["value"].startswith(b"a1-")} == set()
    headed = next(r for r in fast if r["headers"])
    assert headed["headers"] == '{"h": "0"}'  # the writer tag is left out, as librdkafka's read
    by_offset = {r["offset"]: r for r in fast}
    assert by_offset[7]["value"] is None and by_offset[8]["value"] == b""
    assert by_offset[0]["key"] == b"k0" and by_offset[1]["key"] is None
    assert round(by_offset[5]["timestamp"].timestamp() * 1000) == _BASE_MS + 5


def test_partial_ranges_start_and_stop_inside_batches(filled: Any) -> None:
    bus, topic, _ = filled
    log = bus.log
    end = bus.describe(topic).ranges[0].max_offset
    for first, last in ((1, 2), (150, 451), (299, 700), (333, end - 5), (end - 1, end)):
        fast = _rows(log._read(topic, 0, first, last))
        slow = [
            r
            for _, rows in log._consume(topic, 0, first, last)
            for r in _to_batch(rows).to_pylist()
        ]
        assert fast == slow, (first, last)
        assert all(first <= r["offset"] < last for r in fast)


def test_compressed_batches_are_read_through_librdkafka(
    kafka_cluster: RealKafka, tmp_path: Path
) -> None:
    topic = unique("fetch-gz")
    kafka_cluster.create_topic(topic, 1)
    producer = _producer(kafka_cluster, **{"compression.type": "gzip"})
    for i in range(500):
        producer.produce(topic, value=f"zipped-{i}".encode() * 4, partition=0)
    producer.flush(30)
    bus = KafkaBus(tmp_path, bootstrap_servers=kafka_cluster.bootstraps)
    try:
        fetcher = bus.log._fetcher()
        records, aborted = fetcher.fetch(topic, 0, 0)
        with pytest.raises(Unsupported, match="compressed record batch"):
            decode_records(records, 0, 500, aborted)
        rows = _rows(bus.log._read(topic, 0, 0, 500))
        assert [r["value"] for r in rows] == [f"zipped-{i}".encode() * 4 for i in range(500)]
    finally:
        bus.close()


def test_a_range_retention_removed_is_reported(kafka_cluster: RealKafka, tmp_path: Path) -> None:
    topic = unique("fetch-gone")
    kafka_cluster.create_topic(topic, 1)
    producer = _producer(kafka_cluster)
    for i in range(100):
        producer.produce(topic, value=f"{i}".encode(), partition=0)
    producer.flush(30)
    kafka_cluster.delete_records(topic, 0, 40)
    bus = KafkaBus(tmp_path, bootstrap_servers=kafka_cluster.bootstraps)
    try:
        with pytest.raises(OffsetOutOfRange) as exc:
            list(bus.log._fetch(bus.log._fetcher(), topic, 0, 10, 100))
        assert (exc.value.min_offset, exc.value.max_offset) == (40, 100)
        assert [r["value"] for r in _rows(bus.log._read(topic, 0, 40, 100))] == [
            f"{i}".encode() for i in range(40, 100)
        ]
    finally:
        bus.close()


def test_a_fetch_cut_inside_a_batch_leaves_that_batch_for_the_next(filled: Any) -> None:
    bus, topic, _ = filled
    fetcher = bus.log._fetcher()
    records, aborted = fetcher.fetch(topic, 0, 0)
    whole = decode_records(records, 0, 10**9, aborted)
    assert whole is not None and whole.next_offset > 300
    cut = decode_records(bytes(records)[:-7], 0, 10**9, aborted)
    assert cut is not None and cut.next_offset < whole.next_offset
    # the complete batches before the cut are the same records
    n = cut.batch.num_rows
    assert cut.batch.to_pylist() == whole.batch.slice(0, n).to_pylist()
    assert all(o < cut.next_offset for o in cut.batch.column("offset").to_pylist())
    assert decode_records(bytes(records)[:40], 0, 10**9, aborted) is None  # not one whole batch
