"""The replicator connectors on real brokers: 100k messages with keys, tags and properties copied
RocketMQ → RocketMQ (two topics on the one broker) and Kafka (the real Kafka 4 broker of
`scripts/servers.sh`) → RocketMQ and → Kafka, through a sluice topic on the embedded bus; and their
configuration errors."""

from __future__ import annotations

import socket
import time
import zlib
from collections import defaultdict
from typing import Any

import pytest

from sluice.clients.rocketmq import RocketMQClient
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import ROCKETMQ_NAMESRV, RealKafka, unique

pytestmark = pytest.mark.spark

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker

N = 100_000


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _key(i: int) -> str:
    return f"key-{i % 997}"


def _body(i: int) -> bytes:
    return f"message {i} é".encode() + bytes([0, 255, i % 256])  # binary bodies survive


def _count(client: RocketMQClient, topic: str) -> int:
    queues = client.queues(topic, fresh=True)
    return sum(hi - lo for lo, hi in client.offsets(topic, queues).values()) if queues else 0


def _pull_all(client: RocketMQClient, topic: str) -> dict[int, list]:
    """Every message of ``topic`` by target queue, in queue order."""
    queues = client.queues(topic, fresh=True)
    out: dict[int, list] = {}
    for q, (lo, hi) in client.offsets(topic, queues).items():
        out[q.queue_id] = list(client.pull(topic, q, lo, hi))
    return out


def _copied(
    runner: ConnectorRunner, target: RocketMQClient, topic: str, started: float
) -> dict[int, list]:
    def done() -> bool:
        for running in runner.running.values():
            assert running.query.exception() is None, running.failure()
        return _count(target, topic) >= N

    try:
        wait_until(done, 600, f"{N} messages in {topic}", every=1.0)
    except AssertionError as exc:  # say where it stalled: which hop, the queries, the retries
        raise AssertionError(f"{exc}; {_where(runner, target, topic)}") from None
    elapsed = time.monotonic() - started
    print(f"replicated {N} messages in {elapsed:.1f}s: {N / elapsed:,.0f} msg/s")
    messages = _pull_all(target, topic)
    assert sum(len(m) for m in messages.values()) == N  # nothing duplicated
    return messages


def _kafka_topic_of_n(kafka_cluster: RealKafka, base: int) -> str:
    """A fresh topic of 8 partitions holding the N test messages, each key's in order. A produce
    that failed (a just-started cluster on a busy machine can refuse some, and an idempotent
    producer then drops what it queued) fills another topic rather than re-sending out of order;
    the topic's end offsets must add up to N before the test goes on."""
    import confluent_kafka
    from confluent_kafka.admin import OffsetSpec

    failures: list[str] = []
    for _attempt in range(3):
        source = unique("ksrc")
        kafka_cluster.create_topic(source, 8)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": kafka_cluster.bootstraps, "enable.idempotence": True}
        )
        errors: list[str] = []

        def delivered(err: Any, _msg: Any, errors: list[str] = errors) -> None:
            if err is not None:
                errors.append(str(err))

        for i in range(N):
            while True:
                try:
                    producer.produce(
                        source,
                        value=_body(i),
                        key=_key(i).encode(),
                        partition=zlib.crc32(_key(i).encode()) % 8,
                        timestamp=base + i,
                        headers=[("TAGS", f"tag{i % 5}"), ("seq", str(i)), ("p", f"v {i % 7} é")],
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(120) == 0
        ends = kafka_cluster.admin.list_offsets(
            {confluent_kafka.TopicPartition(source, p): OffsetSpec.latest() for p in range(8)},
            request_timeout=30,
        )
        held = sum(f.result().offset for f in ends.values())
        if not errors and held == N:
            return source
        failures.append(f"{source}: {held} of {N} stored, errors {sorted(set(errors))[:3]}")
    raise AssertionError(f"Kafka did not store the test's messages: {failures}")


def _where(runner: ConnectorRunner, target: RocketMQClient, topic: str) -> str:
    """Where a copy stands: the target's messages per queue, each query's batches (rows read)
    and committed positions, the records of each sluice topic between them, the retries."""
    queues = target.queues(topic, fresh=True)
    per_queue = {q.queue_id: hi - lo for q, (lo, hi) in target.offsets(topic, queues).items()}
    queries = {
        name: {
            "status": r.query.status,
            "rows per batch": [(p["batchId"], p["numInputRows"]) for p in r.query.recentProgress],
            "committed": runner.committed_positions(name),
        }
        for name, r in runner.running.items()
    }
    topics = {t: runner.bus.count(t) for t in runner.bus.log.topics()}
    retrying = runner.counters.retrying(int(time.time() * 1000))
    return (
        f"target per queue {per_queue}; sluice topics {topics}; queries {queries}; "
        f"retrying {retrying}"
    )


def _assert_per_key_order(messages: dict[int, list]) -> None:
    """Each key's messages arrive in one target queue, in the order they were produced."""
    where: dict[str, int] = {}
    last: dict[str, int] = defaultdict(lambda: -1)
    for queue, ms in messages.items():
        for m in ms:
            key, seq = m.properties["KEYS"], int(m.properties["seq"])
            assert where.setdefault(key, queue) == queue, f"{key} in two queues"
            assert seq > last[key], f"{key}: {seq} after {last[key]}"
            last[key] = seq


@pytest.mark.rocketmq
@pytest.mark.timeout(900)
def test_rocketmq_to_rocketmq_copies_100k_intact(runner: ConnectorRunner) -> None:
    client = RocketMQClient(ROCKETMQ_NAMESRV)
    source = unique("rsrc")
    queues = client.create_topic(source, 8)
    by_queue: dict[int, list] = defaultdict(list)
    for i in range(N):
        props = {"KEYS": _key(i), "TAGS": f"tag{i % 5}", "seq": str(i), "p": f"v {i % 7} é"}
        by_queue[zlib.crc32(_key(i).encode()) % 8].append((_body(i), props))
    for q, messages in by_queue.items():
        client.send(source, queues[q], messages)
    wait_until(lambda: _count(client, source) == N, 60, f"{N} messages readable in {source}")
    born = {
        int(m.properties["seq"]): m.born_timestamp
        for ms in _pull_all(client, source).values()
        for m in ms
    }

    started = time.monotonic()
    runner.start(
        "rmq-in",
        {
            "connector.class": "RocketMQSourceConnector",
            "source.namesrv": ROCKETMQ_NAMESRV,
            "source.topics": source,
            "value.converter": "ByteArrayConverter",
            "max.tasks": "2",
        },
    )
    runner.start(
        "rmq-out",
        {
            "connector.class": "RocketMQSinkConnector",
            "target.namesrv": ROCKETMQ_NAMESRV,
            "connect.topicnames": source,
            "topic.rename.format": "${topic}-copy",
            "value.converter": "ByteArrayConverter",
            "max.tasks": "2",
        },
    )
    messages = _copied(runner, client, f"{source}-copy", started)
    seen = set()
    for ms in messages.values():
        for m in ms:
            i = int(m.properties["seq"])
            assert m.body == _body(i)
            assert m.properties["KEYS"] == _key(i)
            assert m.properties["TAGS"] == f"tag{i % 5}"
            assert m.properties["p"] == f"v {i % 7} é"
            assert int(m.properties["sluice.ts"]) == born[i]  # the timestamp is kept
            seen.add(i)
    assert seen == set(range(N))
    _assert_per_key_order(messages)


@pytest.mark.rocketmq
@pytest.mark.timeout(900)
def test_kafka_to_rocketmq_copies_100k_intact(
    runner: ConnectorRunner, kafka_cluster: RealKafka
) -> None:
    base = 1_700_000_000_000
    source = _kafka_topic_of_n(kafka_cluster, base)

    started = time.monotonic()
    runner.start(
        "kafka-in",
        {
            "connector.class": "KafkaSourceConnector",
            "source.bootstrap.servers": kafka_cluster.bootstraps,
            "source.topics.regex": f"{source}|no-such-topic",
            "topic.rename.format": "${topic}-via-sluice",
            "key.converter": "ByteArrayConverter",
            "value.converter": "ByteArrayConverter",
            "max.tasks": "2",
        },
    )
    target = unique("kcopy")
    runner.start(
        "rmq-out",
        {
            "connector.class": "RocketMQSinkConnector",
            "target.namesrv": ROCKETMQ_NAMESRV,
            "connect.topicnames": f"{source}-via-sluice",
            "topic.rename.format": target,
            "value.converter": "ByteArrayConverter",
            "max.tasks": "2",
        },
    )
    client = RocketMQClient(ROCKETMQ_NAMESRV)
    messages = _copied(runner, client, target, started)
    seen = set()
    for ms in messages.values():
        for m in ms:
            i = int(m.properties["seq"])
            assert m.body == _body(i)
            assert m.properties["KEYS"] == _key(i)
            assert m.properties["TAGS"] == f"tag{i % 5}"
            assert m.properties["p"] == f"v {i % 7} é"
            assert int(m.properties["sluice.ts"]) == base + i  # the Kafka timestamp is kept
            seen.add(i)
    assert seen == set(range(N))
    _assert_per_key_order(messages)


# ----------------------------------------------------------------------------- config errors
def _rmq_source(**extra: str) -> dict[str, str]:
    return {
        "connector.class": "RocketMQSourceConnector",
        "source.namesrv": ROCKETMQ_NAMESRV or "127.0.0.1:9876",
        "source.topics": "t",
        **extra,
    }


def test_bad_replicator_configs_name_the_key(runner: ConnectorRunner) -> None:
    closed = f"127.0.0.1:{_closed_port()}"
    cases = [
        (_rmq_source(**{"source.namesrv": closed}), rf"^source.namesrv: cannot reach .*{closed}"),
        ({**_rmq_source(), "source.topics": ""}, r"^source.topics: required key is missing"),
        (
            _rmq_source(**{"source.topics.regex": "a.*"}),
            r"^source.topics.regex: set either source.topics or source.topics.regex",
        ),
        (
            {**_rmq_source(), "source.topics": "", "source.topics.regex": "orders-(["},
            r"^source.topics.regex: invalid regular expression",
        ),
        (_rmq_source(**{"topic.rename.format": "a b"}), r"^topic.rename.format: gives 'a b'"),
        (
            {
                "connector.class": "RocketMQSinkConnector",
                "target.namesrv": closed,
                "connect.topicnames": "t",
            },
            rf"^target.namesrv: cannot reach .*{closed}",
        ),
        (
            {
                "connector.class": "KafkaSourceConnector",
                "source.bootstrap.servers": closed,
                "source.topics": "t",
            },
            rf"^source.bootstrap.servers: cannot reach .*{closed}",
        ),
        (
            {
                "connector.class": "KafkaSourceConnector",
                "source.bootstrap.servers": closed,
                "source.topics.regex": "(",
            },
            r"^source.topics.regex: invalid regular expression",
        ),
        (
            {
                "connector.class": "KafkaSinkConnector",
                "target.bootstrap.servers": closed,
                "connect.topicnames": "t",
                "target.kafka.no.such.option": "1",
            },
            r"^target.bootstrap.servers: invalid client configuration: .*no.such.option",
        ),
        (
            {
                "connector.class": "KafkaSinkConnector",
                "target.bootstrap.servers": closed,
                "connect.topicnames": "t",
            },
            rf"^target.bootstrap.servers: cannot reach .*{closed}",
        ),
    ]
    for config, message in cases:
        with pytest.raises(ConfigException, match=message):
            runner.start("bad", config)
        assert "bad" not in runner.running


@pytest.mark.rocketmq
def test_a_missing_source_topic_is_named(runner: ConnectorRunner) -> None:
    with pytest.raises(ConfigException, match=r"^source.topics: topic\(s\) 'no-such-topic-"):
        runner.start("bad", _rmq_source(**{"source.topics": f"no-such-topic-{unique()}"}))


def test_a_missing_kafka_source_topic_is_named(
    runner: ConnectorRunner, kafka_cluster: RealKafka
) -> None:
    config = {
        "connector.class": "KafkaSourceConnector",
        "source.bootstrap.servers": kafka_cluster.bootstraps,
        "source.topics": "absent-topic",
    }
    with pytest.raises(ConfigException, match=r"^source.topics: topic\(s\) 'absent-topic'"):
        runner.start("bad", config)


def test_kafka_to_kafka_keeps_keys_headers_timestamps_and_partitions(
    runner: ConnectorRunner, kafka_cluster: RealKafka
) -> None:
    import confluent_kafka

    n = 5_000
    source, target = unique("kk-src"), unique("kk-dst")
    kafka_cluster.create_topic(source, 4)
    kafka_cluster.create_topic(target, 8)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_cluster.bootstraps})
    for i in range(n):
        producer.produce(
            source,
            value=_body(i),
            key=None if i % 10 == 0 else _key(i).encode(),
            partition=i % 4 if i % 10 == 0 else zlib.crc32(_key(i).encode()) % 4,
            timestamp=1_600_000_000_000 + i,
            headers=[("seq", str(i)), ("h", "é")],
        )
    assert producer.flush(60) == 0
    runner.start(
        "kafka-in",
        {
            "connector.class": "org.apache.rocketmq.connect.kafka.connector.KafkaSourceConnector",
            "source.bootstrap.servers": kafka_cluster.bootstraps,
            "source.topics": source,
            "connect.topicname": "mirror",
            "key.converter": "ByteArrayConverter",
            "value.converter": "ByteArrayConverter",
        },
    )
    runner.start(
        "kafka-out",
        {
            "connector.class": "KafkaSinkConnector",
            "target.bootstrap.servers": kafka_cluster.bootstraps,
            "connect.topicnames": "mirror",
            "topic.rename.format": target,
            "key.converter": "ByteArrayConverter",
            "value.converter": "ByteArrayConverter",
            "target.kafka.linger.ms": "1",
        },
    )
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstraps,
            "group.id": unique("probe"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",  # the sink writes in transactions
        }
    )
    consumer.subscribe([target])
    got: list = []

    def all_arrived() -> bool:
        for running in runner.running.values():
            assert running.query.exception() is None, running.failure()
        got.extend(m for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
        return len(got) >= n

    try:
        wait_until(all_arrived, 300, f"{n} records in {target}")
    except AssertionError as exc:  # say how far it got and what each query was doing
        doing = {name: r.query.status["message"] for name, r in runner.running.items()}
        raise AssertionError(f"{exc}: {len(got)} arrived; queries: {doing}") from None
    finally:
        consumer.close()
    assert len(got) == n
    assert len({dict(m.headers())["seq"] for m in got}) == n  # each record once
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    last: dict[bytes | None, int] = defaultdict(lambda: -1)
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        headers = dict(m.headers())
        i = int(headers["seq"])
        assert m.value() == _body(i)
        assert m.key() == (None if i % 10 == 0 else _key(i).encode())
        assert headers["h"] == "é".encode()
        assert m.timestamp()[1] == 1_600_000_000_000 + i
        partitions[m.key()].add(m.partition())
        if m.key() is not None:
            assert i > last[m.key()]  # one key: in order
            last[m.key()] = i
    assert all(len(p) == 1 for k, p in partitions.items() if k is not None)


@pytest.mark.rocketmq
def test_rocketmq_source_regex_copies_only_matching_topics(runner: ConnectorRunner) -> None:
    client = RocketMQClient(ROCKETMQ_NAMESRV)
    prefix = unique("rx")
    for suffix, count in (("a", 300), ("b", 200), ("skip", 100)):
        queues = client.create_topic(f"{prefix}-{suffix}", 2)
        client.send(f"{prefix}-{suffix}", queues[0], [(b"x", {"TAGS": suffix})] * count)
    runner.start(
        "rx-in",
        {
            "connector.class": "RocketMQSourceConnector",
            "source.namesrv": ROCKETMQ_NAMESRV,
            "source.topics.regex": f"{prefix}-(a|b)",
            "topic.rename.format": "${topic}-mid",
            "value.converter": "ByteArrayConverter",
        },
    )
    runner.start(
        "rx-out",
        {
            "connector.class": "RocketMQSinkConnector",
            "target.namesrv": ROCKETMQ_NAMESRV,
            "connect.topicnames": f"{prefix}-a-mid;{prefix}-b-mid;{prefix}-skip-mid",
            "topic.rename.format": "${topic}-copy",
            "target.queues": "3",
            "value.converter": "ByteArrayConverter",
        },
    )

    def copied() -> tuple[int, int]:
        for running in runner.running.values():
            assert running.query.exception() is None, running.failure()
        return _count(client, f"{prefix}-a-mid-copy"), _count(client, f"{prefix}-b-mid-copy")

    wait_until(lambda: copied() == (300, 200), 300, "both matching topics copied", every=0.5)
    assert len(client.queues(f"{prefix}-a-mid-copy")) == 3  # created with target.queues
    assert not client.queues(f"{prefix}-skip-mid-copy", fresh=True)
    assert not runner.bus.log.topic_exists(f"{prefix}-skip-mid")


def test_kafka_source_waiting_for_records_that_never_come_is_retriable(
    kafka_cluster: RealKafka,
) -> None:
    from sluice.connectors.kafka import KafkaSourceTask
    from sluice.sdk import RetriableException

    topic = unique("idle")
    kafka_cluster.create_topic(topic, 1)
    task = KafkaSourceTask()
    task.start(
        {
            "source.bootstrap.servers": kafka_cluster.bootstraps,
            "source.topics": topic,
            "source.timeout.ms": "1000",
        }
    )
    partition = {"topic": topic, "partition": "0"}
    assert task.partitions() == [partition]
    with pytest.raises(RetriableException, match=rf"no data from {topic}/0 at offset 0"):
        list(task.read(partition, None, {"offset": 5}))  # the range says 5; none exist


@pytest.mark.rocketmq
def test_rocketmq_source_queue_without_a_route_is_retriable() -> None:
    from sluice.clients.rocketmq import RocketMQUnavailable
    from sluice.connectors.rocketmq import RocketMQSourceTask
    from sluice.sdk import ReadLimit

    task = RocketMQSourceTask()
    task.start({"source.namesrv": ROCKETMQ_NAMESRV, "source.topics": "gone"})
    partition = {"topic": unique("gone"), "brokerName": "broker-x", "queueId": "0"}
    with pytest.raises(RocketMQUnavailable, match=r"has no route now"):
        task.latest(partition, None, ReadLimit())


@pytest.mark.rocketmq
def test_rocketmq_sink_replaying_a_batch_sends_each_message_once() -> None:
    import pyarrow as pa

    from sluice.clients import rocketmq as rm
    from sluice.connectors.rocketmq import RocketMQSinkTask
    from sluice.sdk import BatchId, SinkTaskContext

    topic, n = unique("eos"), 5_000
    RocketMQClient(ROCKETMQ_NAMESRV).create_topic(topic, 2)

    def frame(first: int) -> pa.RecordBatch:
        seqs = range(first, first + n)
        return pa.RecordBatch.from_pydict(
            {
                "topic": [topic] * n,
                "queue_id": [i % 4 for i in seqs],  # sluice queues 0..3 → target queues 0..1
                "queue_offset": list(seqs),
                "key": [_key(i) for i in seqs],
                "value": [_body(i) for i in seqs],
                "timestamp": pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", "UTC")),
                "headers": [f'{{"seq": "{i}"}}' for i in seqs],
            }
        )

    def task(batch: BatchId, crash_after_sends: int | None = None) -> RocketMQSinkTask:
        t = RocketMQSinkTask()
        t.context = SinkTaskContext("eos connector", 0, batch)
        t.start(
            {
                "target.namesrv": ROCKETMQ_NAMESRV,
                "connect.topicnames": "x",
                "topic.rename.format": topic,
            }
        )
        if crash_after_sends is not None:
            real, sends = t.client.broker, [0]

            def dying(address: str, requests: list) -> list:
                if requests[0][0] == rm.SEND_BATCH_MESSAGE:
                    sends[0] += 1
                    if sends[0] > crash_after_sends:
                        raise RuntimeError("the worker died here")
                return real(address, requests)

            t.client.broker = dying  # type: ignore[method-assign]
        return t

    batch = BatchId("run1", 7)
    # 2,500 messages per target queue = two sends each: die after three sends (mid-queue)
    crashing = task(batch, crash_after_sends=3)
    crashing.put_batch(frame(0))
    with pytest.raises(RuntimeError, match="died"):
        crashing.flush(batch)
    target = RocketMQClient(ROCKETMQ_NAMESRV)
    assert 0 < _count(target, topic) < n  # partly sent
    for _ in range(2):  # the replay completes it; a second replay sends nothing
        replay = task(batch)
        replay.put_batch(frame(0))
        replay.flush(batch)
        wait_until(lambda: _count(target, topic) >= n, 30, "the replay's messages")
        target.wait_dispatched(target.queues(topic)[0].address)  # duplicates would be readable
        seqs = [int(m.properties["seq"]) for ms in _pull_all(target, topic).values() for m in ms]
        assert sorted(seqs) == list(range(n))
    following = task(BatchId("run1", 8))
    following.put_batch(frame(n))
    following.flush(BatchId("run1", 8))
    wait_until(lambda: _count(target, topic) >= 2 * n, 30, "the next batch")
    seqs = [int(m.properties["seq"]) for ms in _pull_all(target, topic).values() for m in ms]
    assert sorted(seqs) == list(range(2 * n))


def _sink_task(servers: str, target: str, connector: str, batch: object) -> object:
    from sluice.connectors.kafka.sink import KafkaSinkTask
    from sluice.sdk._connector import SinkTaskContext

    task = KafkaSinkTask()
    task.context = SinkTaskContext(connector_name=connector, task_id=0, batch_id=batch)
    task.start(
        {
            "target.bootstrap.servers": servers,
            "connect.topicnames": "m",
            "topic.rename.format": target,
        }
    )
    return task


def _sink_rows(values: list[bytes]) -> object:
    import pyarrow as pa

    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["m"] * n,
            "queue_id": [i % 2 for i in range(n)],
            "queue_offset": list(range(n)),
            "key": [None] * n,
            "value": values,
            "timestamp": pa.array([None] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "headers": [None] * n,
        }
    )


def test_kafka_sink_replay_of_a_delivered_batch_produces_nothing(kafka_cluster: RealKafka) -> None:
    from sluice.sdk import BatchId

    target, name = unique("eos-unit"), unique("snk")
    kafka_cluster.create_topic(target, 2)

    def deliver(batch: BatchId, values: list[bytes]) -> None:
        task = _sink_task(kafka_cluster.bootstraps, target, name, batch)
        task.put_batch(_sink_rows(values))
        task.flush(batch)
        task.stop()

    first = [f"a{i}".encode() for i in range(20)]
    deliver(BatchId("run1", 0), first)
    deliver(BatchId("run1", 0), first)  # Spark replays batch 0: its marker says delivered
    deliver(BatchId("run1", 1), [b"b"])
    deliver(BatchId("run2", 0), [b"c"])  # a fresh checkpoint (another run): new data
    wait_until(
        lambda: sorted(kafka_cluster.committed_values(target)) == sorted([*first, b"b", b"c"]),
        30,
        "each record once",
    )
    # Without a batch number there is no marker: every batch is delivered (none skipped).
    deliver(BatchId("run1", -1), [b"d"])
    deliver(BatchId("run1", -1), [b"e"])
    wait_until(
        lambda: len(kafka_cluster.committed_values(target)) == 24, 30, "batches without a number"
    )
