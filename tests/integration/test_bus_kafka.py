"""The Kafka bus on the real Kafka 4 broker (`scripts/servers.sh up kafka`): configuration errors,
an unreachable cluster, consumer-group offsets, round-trips, transactions (a second writer with the
same transactional.id fences the first) and the replication-factor key (on `kafka-cluster`).

librdkafka's mock cluster (`kafka_mock`) stays only where the real broker cannot give the fault
cheaply: every broker down and up again in the middle of a commit (the three outage tests; the
broker is shared by the whole run and by other users of the machine, so it is not restarted), and a
cluster without the topic admin API."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.bus._external import writer_tag
from sluice.bus.base import BusError, BusUnavailable
from sluice.bus.kafka import KafkaBus
from sluice.sdk import ConfigException, RetriableException
from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import (
    KafkaHarness,
    MockKafkaCluster,
    RealKafka,
    read_all,
    sink_reader,
    topic_frame,
    unique,
)

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker
kafka_mock = bus_helpers.kafka_mock  # librdkafka's mock cluster, for fault injection


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_config_requires_bootstrap_servers(tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match=r"^bootstrap.servers: required key is missing"):
        KafkaBus.from_config({"bus": "kafka"}, tmp_path)


def test_config_names_an_unknown_pass_through_key(tmp_path: Path) -> None:
    props = {"bootstrap.servers": "127.0.0.1:9092", "kafka.no.such.property": "1"}
    with pytest.raises(ConfigException, match=r"^kafka.no.such.property: No such configuration"):
        KafkaBus.from_config(props, tmp_path)
    props = {"bootstrap.servers": "127.0.0.1:9092", "kafka.bootstrap.servers": "x:1"}
    with pytest.raises(ConfigException, match=r"^kafka.bootstrap.servers: cannot be set here"):
        KafkaBus.from_config(props, tmp_path)


def test_config_passes_client_options_through(tmp_path: Path, kafka_cluster: RealKafka) -> None:
    props = {
        "bootstrap.servers": kafka_cluster.bootstraps,
        "kafka.client.id": "sluice-test",
        "kafka.socket.timeout.ms": "5000",
        "spark.master": "local[1]",
    }
    bus = KafkaBus.from_config(props, tmp_path, default_queues=3)
    assert bus.log.client_config == {"client.id": "sluice-test", "socket.timeout.ms": "5000"}
    assert bus.default_queues == 3
    bus.check()


def test_unreachable_cluster_is_a_retriable_error_naming_the_servers(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    bus = KafkaBus(tmp_path, bootstrap_servers=address, timeout_s=2)
    # the check gives up (after timeout_s) instead of waiting for the cluster: run it aside and
    # wait for it to end (a bound on a hang, not on its speed, which the machine's load decides)
    raised: list[BaseException] = []

    def check() -> None:
        try:
            bus.check()
        except BaseException as e:
            raised.append(e)

    checking = threading.Thread(target=check, daemon=True)
    checking.start()
    wait_until(lambda: not checking.is_alive(), 120, "bus.check() to give up (timeout_s=2)")
    [error] = raised
    assert isinstance(error, BusUnavailable), repr(error)
    assert f"kafka bootstrap.servers={address}: " in str(error)
    assert isinstance(error, RetriableException)
    assert "is the Kafka cluster up and reachable?" in str(error)
    with pytest.raises(BusUnavailable):
        bus.log.offsets("t")


def test_topic_created_without_admin_api_gets_the_brokers_default(
    tmp_path: Path, kafka_mock: MockKafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    bus = KafkaBus(tmp_path, bootstrap_servers=kafka_mock.bootstraps, timeout_s=20)
    topic = unique()
    with caplog.at_level(logging.WARNING, logger="sluice.bus.kafka"):
        info = bus.create_topic(topic, 6)
    assert info.queues == 4  # the mock cluster's default partition count
    assert "has 4 partitions (the broker's default), not 6" in caplog.text
    assert bus.create_topic(topic, 6).queues == 4  # existing: unchanged
    with pytest.raises(FileExistsError):
        bus.log.create_topic(topic, 6, exist_ok=False)


def test_reader_commits_consumer_group_offsets(tmp_path: Path, kafka_cluster: RealKafka) -> None:
    harness = KafkaHarness(kafka_cluster)
    bus = harness.make_bus(tmp_path)
    topic = harness.new_topic(bus, 2)
    appender = bus.topic_appender(writer_id="w")
    frame = topic_frame(topic, [b"a", b"b", b"c"], route=[0, 0, 1])
    appender.commit([appender.write(iter([frame]), 0)], 0)
    reader = sink_reader(bus, topic, tmp_path)
    end = reader.latestOffset(reader.initialOffset(), None)
    assert bus.log.group_offsets("connect-snk", topic) == {0: -1001, 1: -1001}  # nothing yet
    reader.commit(end)
    assert bus.log.group_offsets("connect-snk", topic) == {0: 3, 1: 2}  # + commit markers


def test_headers_keys_and_timestamps_round_trip(tmp_path: Path, kafka_cluster: RealKafka) -> None:
    from confluent_kafka import Consumer, TopicPartition

    harness = KafkaHarness(kafka_cluster)
    bus = harness.make_bus(tmp_path)
    topic = harness.new_topic(bus, 1)
    appender = bus.topic_appender(writer_id="w")
    frame = topic_frame(
        topic,
        [b"\x00binary\xff"],
        keys=[b"k1"],
        headers=['{"a": "1", "b": "x y"}'],
        route=[0],
        timestamps=[1_700_000_000_123_000],
    )
    appender.commit([appender.write(iter([frame]), 0)], 0)
    # what any Kafka consumer sees
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstraps,
            "group.id": "probe",
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
    finally:
        consumer.close()
    assert msg is not None and msg.error() is None
    assert (msg.key(), msg.value()) == (b"k1", b"\x00binary\xff")
    assert msg.timestamp()[1] == 1_700_000_000_123
    headers = dict(msg.headers())
    assert headers["a"] == b"1" and headers["b"] == b"x y"
    assert headers["sluice.writer"] == writer_tag("w").encode()  # for a crash recount
    # and what sluice's reader gives a sink (the batch tag is not a record header)
    (row,) = read_all(bus, topic, 0, 0, 1)
    assert row["headers"] == '{"a": "1", "b": "x y"}' and row["value"] == b"\x00binary\xff"


def _outage_bus(cluster: MockKafkaCluster, tmp_path: Path, outage_s: float) -> KafkaBus:
    # short timeouts: the outage is detected quickly and a replay waits little for requests of
    # the failed attempt that could still be in flight
    return KafkaBus(
        tmp_path,
        bootstrap_servers=cluster.bootstraps,
        client_config={"request.timeout.ms": "2000", "message.timeout.ms": "4000"},
        timeout_s=3,
        outage_s=outage_s,
    )


def _down_after_journal(monkeypatch: pytest.MonkeyPatch, bus: KafkaBus, cluster: Any) -> None:
    """The cluster goes down right after the journal noted where the batch starts (once)."""
    real = type(bus.log)._end_offsets
    calls: list[str] = []

    def then_outage(self: Any, topic: str, queues: list[int]) -> dict[int, int]:
        ends = real(self, topic, queues)
        if not calls:
            calls.append(topic)
            cluster.set_down()
        return ends

    monkeypatch.setattr(type(bus.log), "_end_offsets", then_outage)


def test_outage_longer_than_the_limit_fails_the_commit_and_the_replay_completes_it(
    tmp_path: Path, kafka_mock: MockKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = _outage_bus(kafka_mock, tmp_path, outage_s=0)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 2)
    rows = [f"o{i}".encode() for i in range(200)]
    frame = topic_frame(topic, rows, route=[i % 2 for i in range(200)])
    appender = bus.topic_appender(writer_id="w")
    staged = appender.write(iter([frame]), 0)
    _down_after_journal(monkeypatch, bus, kafka_mock)
    try:
        with pytest.raises(
            BusUnavailable, match=r"kafka bootstrap.servers=.*(writing|write to) topic"
        ):
            appender.commit([staged], 0)
    finally:
        kafka_mock.set_up()
        monkeypatch.undo()
    # Spark replays batch 0 once the cluster answers again
    deadline = time.monotonic() + 60
    while True:
        try:
            appender.commit([appender.write(iter([frame]), 0)], 0)
            break
        except BusUnavailable:
            assert time.monotonic() < deadline, "the mock cluster never came back"
    got = [v for q in (0, 1) for v in (r["value"] for r in read_all(bus, topic, q, 0, 1_000))]
    assert sorted(got) == sorted(rows) and len(got) == 200


def test_a_kept_leader_connection_the_broker_closed_is_replaced(
    tmp_path: Path, kafka_mock: MockKafkaCluster
) -> None:
    """Range reads keep one connection per broker; one the broker closed meanwhile (idle for
    connections.max.idle.ms, or restarted) is replaced at the next read, which goes through
    instead of reporting the cluster away."""
    bus = _outage_bus(kafka_mock, tmp_path, outage_s=0)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 1)
    rows = [f"c{i}".encode() for i in range(50)]
    appender = bus.topic_appender(writer_id="w")
    appender.commit([appender.write(iter([topic_frame(topic, rows, route=[0] * 50)]), 0)], 0)
    assert [r["value"] for r in read_all(bus, topic, 0, 0, 1_000)] == rows
    fetcher = bus.log._fetcher()
    leader = fetcher.leader(topic, 0)
    kept = fetcher._connections[leader]  # the read left its connection to the leader open
    kafka_mock.set_down()  # cuts every connection
    kafka_mock.set_up()
    assert [r["value"] for r in read_all(bus, topic, 0, 0, 1_000)] == rows
    assert fetcher._connections[leader] is not kept


def test_a_short_outage_is_ridden_out_by_the_commit(
    tmp_path: Path, kafka_mock: MockKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit retries until the cluster is back; meanwhile every task of the source shows
    the retry note (a micro-batch's commit holds them all up), and the notes go once it went
    through, its retries counted once."""
    from sluice.engine.retry import ConnectorNotes
    from sluice.store.counters import SqliteCounters

    bus = _outage_bus(kafka_mock, tmp_path, outage_s=120)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 2)
    rows = [f"s{i}".encode() for i in range(300)]
    frame = topic_frame(topic, rows, route=[i % 2 for i in range(300)])
    counters = SqliteCounters(tmp_path / "counters.sqlite")
    appender = bus.topic_appender(writer_id="w", notes=ConnectorNotes(counters, "src", 2))
    staged = appender.write(iter([frame]), 0)
    _down_after_journal(monkeypatch, bus, kafka_mock)
    pauses: list[float] = []
    notes: list[dict] = []

    def pause(self: Any, seconds: float) -> None:
        pauses.append(seconds)
        notes.append(counters.retrying(0).get("src", {}))
        if len(pauses) == 2:  # the outage ends after two failed attempts
            kafka_mock.set_up()

    monkeypatch.setattr(type(bus.log), "_pause", pause)
    try:
        appender.commit([staged], 0)  # no error: it retried until the cluster was back
    finally:
        kafka_mock.set_up()
        monkeypatch.undo()
    assert len(pauses) >= 2 and pauses[:2] == [0.3, 0.6]
    assert set(notes[0]) == {0, 1} and notes[0][1]["attempts"] == 1
    assert "BusUnavailable: kafka bootstrap.servers=" in notes[0][0]["error"]
    assert counters.retrying(0) == {}
    assert counters.get("src")["total-retries"] == len(pauses)
    got = [v for q in (0, 1) for v in (r["value"] for r in read_all(bus, topic, q, 0, 1_000))]
    assert sorted(got) == sorted(rows) and len(got) == 300


def test_reader_plans_nothing_during_an_outage_and_says_so(
    tmp_path: Path, kafka_mock: MockKafkaCluster
) -> None:
    """While the broker is away the reader plans nothing (no failure) and every task of its
    connector has a retry note for its status; the notes go when it answers again."""
    from sluice.engine.retry import ConnectorNotes
    from sluice.store.counters import SqliteCounters

    bus = _outage_bus(kafka_mock, tmp_path, outage_s=60)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 1)
    appender = bus.topic_appender(writer_id="w")
    appender.commit([appender.write(iter([topic_frame(topic, [b"a"], route=[0])]), 0)], 0)
    counters = SqliteCounters(tmp_path / "counters.sqlite")
    reader = sink_reader(
        bus, topic, tmp_path, max_tasks=2, notes=ConnectorNotes(counters, "snk", 2)
    )
    start = reader.initialOffset()
    kafka_mock.set_down()
    try:
        assert reader.latestOffset(start, None) == start  # nothing planned, no failure
        notes = counters.retrying(0)["snk"]
        assert set(notes) == {0, 1} and notes[0]["attempts"] == 1
        assert "BusUnavailable: kafka bootstrap.servers=" in notes[1]["error"]
    finally:
        kafka_mock.set_up()
    wait_until(
        # one record and its transaction's commit marker
        lambda: reader.latestOffset(start, None)["q"] == {f"{topic}/0": 2},
        60,
        "a plan again",
    )
    assert counters.retrying(0) == {}


def test_group_offsets_wait_for_a_broker_gone_since_planning_at_most_the_request_timeout(
    tmp_path: Path, kafka_mock: MockKafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer-group offsets (for lag tools only) are committed with the batch; a broker
    gone since the batch was planned holds the reader's commit up for bus.request.timeout.ms
    (3 s here), not for the outage (librdkafka's synchronous commit waited for it to end). The
    commit left unanswered keeps the next ones back until librdkafka reports it, so it cannot
    land after them (asynchronous commits land out of order) and overwrite newer offsets."""

    bus = _outage_bus(kafka_mock, tmp_path, outage_s=60)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 1)
    appender = bus.topic_appender(writer_id="w")
    frame = topic_frame(topic, [b"a", b"b"], route=[0, 0])
    appender.commit([appender.write(iter([frame]), 0)], 0)
    reader = sink_reader(bus, topic, tmp_path)
    end = reader.latestOffset(reader.initialOffset(), None)
    kafka_mock.set_down()
    try:
        committing = threading.Thread(target=reader.commit, args=(end,), daemon=True)
        committing.start()
        committing.join(20)
        assert not committing.is_alive(), "the reader's commit waited for the broker"
        assert "no answer within bus.request.timeout.ms (3 s)" in caplog.text
        # still unanswered: the next commit is refused at once, not sent
        with pytest.raises(BusUnavailable, match="an earlier commit is still unanswered"):
            bus.log.commit_group_offsets("connect-snk", {(topic, 0): 1})
    finally:
        kafka_mock.set_up()

    def committed() -> bool:
        try:
            bus.log.commit_group_offsets("connect-snk", {(topic, 0): 1})
        except BusUnavailable:
            return False
        return True

    wait_until(committed, 60, "a commit once the broker is back")
    # the batch's offsets (given up on, then landed) did not overwrite the newer commit
    assert bus.log.group_offsets("connect-snk", topic) == {0: 1}
    assert end["q"] != {f"{topic}/0": 1}


class _TimeoutsNoted:
    """A real librdkafka client whose `method` notes the timeout of each call in `asked`; every
    other attribute is the client's own."""

    def __init__(self, real: Any, method: str, asked: list[float]) -> None:
        self._real, self._method, self._asked = real, method, asked

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._real, name)
        if name != self._method:
            return found

        def noted(*args: Any, **kwargs: Any) -> Any:
            self._asked.append(kwargs["timeout"] if "timeout" in kwargs else args[-1])
            return found(*args, **kwargs)

        return noted


def test_a_group_commit_waits_for_its_answer_in_short_polls(
    tmp_path: Path, kafka_cluster: RealKafka
) -> None:
    """A consumer's poll returns at a message or at its timeout, not when it served the commit's
    callback (the group's consumer is assigned nothing): one long poll made every commit take
    the whole poll (200 ms on every sink batch's planning). The commit is answered through
    short polls instead, and lands."""
    bus = KafkaBus(tmp_path, bootstrap_servers=kafka_cluster.bootstraps)
    topic = KafkaHarness(kafka_cluster).new_topic(bus, 1)
    group = unique("g")
    client, _ = bus.log._group(group)
    asked: list[float] = []

    watched = _TimeoutsNoted(client.consumer, "poll", asked)  # the real one, watched
    object.__setattr__(client, "consumer", watched)
    bus.log.commit_group_offsets(group, {(topic, 0): 0})
    assert bus.log.group_offsets(group, topic) == {0: 0}
    waits = asked[1:]  # the first serves an earlier commit's outcome, without waiting
    assert asked[0] == 0 and waits and waits[0] <= 0.001 and max(waits) <= 0.05, asked


def test_librdkafkas_read_of_a_range_ending_in_a_marker_does_not_wait_out_a_long_timeout(
    tmp_path: Path, kafka_cluster: RealKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read through librdkafka (TLS, SASL, compressed batches) asks `consume` for as many
    messages as the range has offsets; a range that ends with a transaction marker never has
    them, and `consume` returns only then or at its timeout: its first wait is short, so such
    a read does not wait out a long one (200 ms on every such read before)."""
    harness = KafkaHarness(kafka_cluster)
    bus = harness.make_bus(tmp_path)
    topic = harness.new_topic(bus, 1)
    appender = bus.topic_appender(writer_id="w")
    appender.commit([appender.write(iter([topic_frame(topic, [b"a", b"b"], route=[0, 0])]), 0)], 0)
    end = bus.log.offsets(topic)[0].max_offset
    assert end == 3  # two records and the transaction's marker
    real, lock = bus.log._consumer()
    asked: list[float] = []

    watched = _TimeoutsNoted(real, "consume", asked)
    monkeypatch.setattr(bus.log, "_consumer", lambda: (watched, lock))
    read = [m.value() for _, rows in bus.log._consume(topic, 0, 0, end) for m in rows]
    assert read == [b"a", b"b"]
    assert asked[0] <= 0.005 and max(asked) <= 0.2, asked


def test_a_group_commit_refused_or_kept_waiting_is_an_error_naming_the_group(
    tmp_path: Path, kafka_mock: MockKafkaCluster
) -> None:
    bus = _outage_bus(kafka_mock, tmp_path, outage_s=60)
    # refused by the broker: the outage's error says which group and why
    with pytest.raises(BusError, match=r"offsets of group 'g'.*UNKNOWN_TOPIC_OR_PART"):
        bus.log.commit_group_offsets("g", {(unique("missing"), 0): 1})
    # another thread of this process commits for the group (its client is busy) past the bound
    _, lock = bus.log._group("g")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    held.wait(10)
    try:
        with pytest.raises(BusUnavailable, match="another thread's commit holds"):
            bus.log.commit_group_offsets("g", {(unique("t"), 0): 1})
    finally:
        release.set()
        holder.join(10)


def test_a_producer_fenced_by_another_process_of_the_same_writer_takes_its_id_back(
    tmp_path: Path, kafka_cluster: RealKafka
) -> None:
    """Spark runs a query's driver-side commit in whichever pooled Python worker is idle, so two
    processes of one live writer each make a producer with its transactional.id, and the newer
    fences the older (what failed the source with _FATAL after a Spark executor loss). Without a
    newer lease generation the fenced one takes the id back and completes its batch once."""
    from confluent_kafka import KafkaException, Producer

    from sluice.bus.kafka._log import transactional_id

    harness = KafkaHarness(kafka_cluster)
    bus = harness.make_bus(tmp_path)
    topic = harness.new_topic(bus, 2)
    writer = f"conn-{unique()}/run1"
    appender = bus.topic_appender(writer_id=writer, fence=(writer, 1))

    def batch(tag: str) -> Any:
        return topic_frame(topic, [f"{tag}{i}".encode() for i in range(10)], route=[0, 1] * 5)

    appender.commit([appender.write(iter([batch("a")]), 0)], 0)
    # Another process of the same writer (same transactional.id) makes its producer and leaves
    # a transaction open.
    txn_id = transactional_id(writer)
    other = Producer({"bootstrap.servers": kafka_cluster.bootstraps, "transactional.id": txn_id})
    other.init_transactions(30)
    other.begin_transaction()
    for i in range(5):
        other.produce(topic, value=f"z{i}".encode(), partition=i % 2)
    assert other.flush(30) == 0
    # Our producer is fenced; the generation is still ours: a new producer fences the other
    # (its open transaction is aborted and its commit refused) and batch 1 is published once.
    appender.commit([appender.write(iter([batch("b")]), 0)], 1)
    with pytest.raises(KafkaException) as refused:
        other.commit_transaction(30)
    assert refused.value.args[0].fatal() or "fenc" in str(refused.value).lower()
    values = kafka_cluster.committed_values(topic)
    assert sorted(values) == sorted(f"{t}{i}".encode() for t in "ab" for i in range(10))


def test_a_writer_of_a_superseded_generation_is_refused_before_it_touches_kafka(
    tmp_path: Path, kafka_cluster: RealKafka
) -> None:
    """Distributed mode: a worker that lost a connector's lease (a zombie) can neither make a
    producer (it would fence the new owner's) nor commit; the new owner's commits go on."""
    from sluice.bus.base import WriterFenced
    from sluice.bus.kafka import _log

    harness = KafkaHarness(kafka_cluster)
    bus = harness.make_bus(tmp_path)
    topic = harness.new_topic(bus, 2)
    name = f"conn-{unique()}"
    zombie = bus.topic_appender(writer_id=f"{name}/run1", fence=(name, 1))
    zombie_staged = zombie.write(iter([topic_frame(topic, [b"late"], route=[0])]), 0)
    bus.fence(name, 2)  # the new owner took the lease
    producers = sum(1 for key in _log._CLIENTS if key[1] == "producer")
    with pytest.raises(WriterFenced, match=rf"fenced: writer '{name}' epoch 1 may no longer"):
        zombie.commit([zombie_staged], 5)
    assert sum(1 for key in _log._CLIENTS if key[1] == "producer") == producers
    owner = bus.topic_appender(writer_id=f"{name}/run1", fence=(name, 2))
    owner.commit([owner.write(iter([topic_frame(topic, [b"new"], route=[1])]), 0)], 5)
    with pytest.raises(WriterFenced):  # the recorded generation is never lowered
        bus.fence(name, 1)
    with pytest.raises(WriterFenced):
        zombie.commit([zombie_staged], 6)
    assert kafka_cluster.committed_values(topic) == [b"new"]


def test_replication_factor_key_is_checked(tmp_path: Path) -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092"}
    for bad, why in (("two", "expected an integer"), ("0", "must be -1"), ("-2", "must be -1")):
        with pytest.raises(ConfigException, match=rf"^bus.replication.factor: {why}"):
            KafkaBus.from_config({**base, "bus.replication.factor": bad}, tmp_path)
    assert KafkaBus.from_config(base, tmp_path).log.replication_factor == -1
    bus = KafkaBus.from_config({**base, "bus.replication.factor": "3"}, tmp_path)
    assert bus.log.replication_factor == 3


@pytest.fixture
def three_brokers() -> Iterator[RealKafka]:
    """`kafka-cluster`, stopped when the test is done (no other test uses it)."""
    from tests.servers import ensure, release

    yield RealKafka(ensure("kafka-cluster"))
    release("kafka-cluster")


def test_topics_are_created_with_the_replication_factor_of_the_key(
    tmp_path: Path, three_brokers: RealKafka
) -> None:
    cluster = three_brokers
    props = {"bootstrap.servers": cluster.bootstraps, "bus.replication.factor": "3"}
    bus = KafkaBus.from_config(props, tmp_path, default_queues=5)
    topic = unique()
    assert bus.create_topic(topic).queues == 5
    assert cluster.replication_factor(topic) == 3
    appender = bus.topic_appender(writer_id="w")
    frame = topic_frame(topic, [b"x", b"y"], route=[0, 4])
    appender.commit([appender.write(iter([frame]), 0)], 0)
    assert sorted(cluster.committed_values(topic)) == [b"x", b"y"]
    # more copies than brokers: the admin API's refusal, naming the topic
    with pytest.raises(BusError, match=r"cannot create topic .*replication factor"):
        KafkaBus.from_config({**props, "bus.replication.factor": "4"}, tmp_path).create_topic(
            unique()
        )
