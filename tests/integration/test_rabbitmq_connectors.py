"""The RabbitMQ connectors on the real server of `scripts/servers.sh` (started on demand): messages
published to a fanout exchange reach a stream queue and a classic queue; both sources copy them
into topics, and the sink publishes one topic to a queue again — keys (routing keys), headers and
non-ASCII bodies intact, unroutable records given up, a transform on the way; and the
configuration errors, each naming its key."""

from __future__ import annotations

import collections
import json
import socket
import uuid
from pathlib import Path

import pytest

from sluice.connectors.rabbitmq import (
    RabbitMQSinkConnector,
    RabbitMQSourceConnector,
    RabbitMQStreamSourceConnector,
)
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.e2e.outage import healthy
from tests.e2e.topics import topic_count, topic_rows
from tests.servers import ensure

pytestmark = pytest.mark.spark

N = 1000
ROCKETMQ_CLASS = "org.apache.rocketmq.connect.rabbitmq.connector.RabbitmqSourceConnector"
TAG = uuid.uuid4().hex[:8]  # in every name this module declares, so that it can remove them


@pytest.fixture(scope="module")
def url() -> str:
    return f"amqp://guest:guest@{ensure('rabbitmq')}/%2F"


@pytest.fixture(scope="module")
def channel(url: str):
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    ch = connection.channel()
    made: list[tuple[str, str]] = []
    ch.made = made  # type: ignore[attr-defined]
    yield ch
    for kind, name in made:  # the server is shared: leave it clean
        if kind == "queue":
            ch.queue_delete(name)
        else:
            ch.exchange_delete(name)
    connection.close()


def _declare(channel, name: str, *, kind: str = "classic", exchange: str = "") -> str:
    name = f"{name}-{TAG}"
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind})
    channel.made.append(("queue", name))
    if exchange:
        channel.queue_bind(name, exchange)
    return name


def _exchange(channel, name: str, kind: str = "fanout") -> str:
    name = f"{name}-{TAG}"
    channel.exchange_declare(name, kind, durable=True)
    channel.made.append(("exchange", name))
    return name


def _body(i: int) -> bytes:
    return f"wert {i} - ünïcødé 日本".encode() + bytes([0, 255, i % 256])


def _drain(channel, queue: str) -> list[tuple]:
    out = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method.routing_key, props.headers, props.message_id, body))


def test_stream_and_queue_in_exchange_out(
    runner: ConnectorRunner, channel, url: str, tmp_path: Path
) -> None:
    import pika

    fan = _exchange(channel, "in")
    stream = _declare(channel, "events", kind="stream", exchange=fan)
    jobs = _declare(channel, "jobs", exchange=fan)
    for i in range(N):
        headers = {"region": f"zürich {i % 5}", "seq": str(i)}
        props = pika.BasicProperties(headers=headers, timestamp=1_700_000_000 + i)
        channel.basic_publish(fan, f"k-{i % 50}-ä", _body(i), props)
    raw = {"rabbitmq.url": url, "value.converter": "ByteArrayConverter"}
    raw["key.converter"] = "ByteArrayConverter"
    runner.start(
        "sin",
        {
            **raw,
            "connector.class": "RabbitMQStreamSourceConnector",
            "rabbitmq.queues": stream,
            "connect.topicname": "events",
            "read.max.rows": "600",  # a few micro-batches
            "transforms": "mark",
            "transforms.mark.type": "InsertHeader",
            "transforms.mark.header": "via",
            "transforms.mark.value.literal": "sluice ✓",
        },
    )
    runner.start(
        "qin",
        {
            **raw,
            "connector.class": ROCKETMQ_CLASS,
            "destinationName": jobs,
            "connect.topicname": "jobs",
            "rabbitmq.prefetch.count": "1000",  # 500 a poll: a few micro-batches
        },
    )
    direct = _exchange(channel, "out", "direct")
    copy = _declare(channel, "copy")
    for k in range(50):
        if k != 7:  # records of key k-7 have no queue: unroutable
            channel.queue_bind(copy, direct, routing_key=f"k-{k}-ä")
    runner.start(
        "out",
        {
            **raw,
            "connector.class": "RabbitMQSinkConnector",
            "connect.topicnames": "events",
            "rabbitmq.exchange": direct,
            "rabbitmq.publish.window": "250",
            "max.tasks": "2",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "unroutable",
        },
    )
    root = tmp_path / "store"
    copied: list[tuple] = []

    def done() -> bool:
        healthy(runner)
        copied.extend(_drain(channel, copy))
        return len(copied) >= N - N // 50 and topic_count(root, "jobs") >= N

    wait_until(done, 240, "the copies", every=0.5)
    wait_until(lambda: topic_count(root, "unroutable") == N // 50, 60, "the dead letters")
    healthy(runner)

    # the stream: each message once in the topic, in offset order, mapped
    rows = [{**r, "headers": json.loads(r["headers"] or "{}")} for r in topic_rows(root, "events")]
    assert topic_count(root, "events") == N
    by_seq = {int(r["headers"]["seq"]): r for r in rows}
    assert sorted(by_seq) == list(range(N))
    for i, row in by_seq.items():
        assert row["key"] == f"k-{i % 50}-ä".encode() and row["value"] == _body(i)
        assert row["headers"] == {"region": f"zürich {i % 5}", "seq": str(i), "via": "sluice ✓"}
        assert row["timestamp"].timestamp() == 1_700_000_000 + i
    # the classic queue: every message, acknowledged
    jobs_rows = [
        {**r, "headers": json.loads(r["headers"] or "{}")} for r in topic_rows(root, "jobs")
    ]
    assert sorted(int(r["headers"]["seq"]) for r in jobs_rows) == list(range(N))
    assert all(r["value"] == _body(int(r["headers"]["seq"])) for r in jobs_rows)
    # the sink: routing key from the record key, headers carried, message_id the position
    assert len(copied) == N - N // 50
    ids = collections.Counter(m for _, _, m, _ in copied)
    assert max(ids.values()) == 1 and all(m.startswith("events/") for m in ids)
    for key, headers, _, body in copied:
        i = int(headers["seq"])
        assert key == f"k-{i % 50}-ä" and body == _body(i) and i % 50 != 7
        assert headers == {"region": f"zürich {i % 5}", "seq": str(i), "via": "sluice ✓"}

    # without errors.tolerance an unroutable record fails the sink, named
    runner.start(
        "strict",
        {
            **raw,
            "connector.class": "RabbitMQSinkConnector",
            "connect.topicnames": "events",
            "rabbitmq.exchange": direct,
            "rabbitmq.routing.key.format": "${header.region}",
        },
    )
    wait_until(lambda: runner.running["strict"].failure() is not None, 120, "the failure")
    cause, trace = runner.running["strict"].failure()
    assert "{topic='events', queue=" in cause and "unroutable: exchange" in cause
    assert "routing key 'zürich " in trace
    runner.stop("strict")

    # acknowledged after the commit: once one more message went through, the queue holds none
    channel.basic_publish(fan, "late", "später".encode())
    wait_until(lambda: topic_count(root, "jobs") == N + 1, 60, "the late message")
    wait_until(lambda: topic_count(root, "events") == N + 1, 60, "the late entry")
    runner.stop("qin")  # what is still unacknowledged goes back to the queue
    left = channel.queue_declare(jobs, passive=True).method.message_count
    assert left <= 1, f"{left} messages were not acknowledged"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_configuration_errors_name_the_key(channel, url: str) -> None:
    queue = _declare(channel, "cfg")
    good = {"rabbitmq.url": url, "rabbitmq.queues": queue}
    RabbitMQSourceConnector().validate(good)
    sink = {"rabbitmq.url": url, "connect.topicnames": "t"}
    cases = [
        (
            RabbitMQSourceConnector,
            {**good, "rabbitmq.url": f"amqp://127.0.0.1:{_closed_port()}/%2F"},
            r"rabbitmq.url: cannot reach RabbitMQ at amqp://127.0.0.1:\d+",
        ),
        (RabbitMQSourceConnector, {**good, "rabbitmq.url": "http://x"}, r"rabbitmq.url: expected"),
        (RabbitMQSourceConnector, {"rabbitmq.queues": queue}, r"rabbitmq.url: required key"),
        (
            RabbitMQStreamSourceConnector,
            {**good, "rabbitmq.password": "wrong"},
            r"rabbitmq.password: .* refused the credentials",
        ),
        (
            RabbitMQStreamSourceConnector,
            {**good, "rabbitmq.queues": f"{queue}-none"},
            r"rabbitmq.queues: queue '.*-none' does not exist",
        ),
        (
            RabbitMQSourceConnector,
            {
                "host": "127.0.0.1",
                "port": url.rsplit(":", 1)[1].split("/")[0],
                "destinationName": "no",
            },
            r"destinationName: queue 'no' does not exist",
        ),
        (
            RabbitMQSinkConnector,
            {**sink, "rabbitmq.exchange": f"x-{TAG}-none"},
            r"rabbitmq.exchange: exchange 'x-.*-none' does not exist",
        ),
        (
            RabbitMQSinkConnector,
            {**sink, "rabbitmq.routing.key.format": "${value}"},
            r"rabbitmq.routing.key.format: .* unknown placeholder",
        ),
        (
            RabbitMQSinkConnector,
            {**sink, "host": "127.0.0.1", "port": str(_closed_port()), "rabbitmq.url": ""},
            r"host: cannot reach RabbitMQ",
        ),
    ]
    for cls, config, message in cases:
        with pytest.raises(ConfigException, match=message):
            cls().validate(config)
