"""RabbitMQ unreachable for 20 s in the middle of a stream → topic → exchange copy and a queue
drain: the connectors stay up, back off, resume, and lose nothing.

The server is shared by other tests, so it is not stopped: the connectors reach it through a TCP
proxy (`tcp_proxy.TcpProxy`) that is cut for 20 s — every open connection reset, new ones refused,
which is what a stopped server looks like from the client. While it is cut, the stream source's
`latest` and the queue source's `poll` raise `RetriableException` and the driver retries them with
backoff (`errors.retry.*`), the sink retries its publishes the same way, and the stream source's
`read` waits for the server on the executor. After it: the topic holds each stream message once,
the copy every record (a repeat under the same `message_id`), the queue's topic every message.
The connectors are created through a herder over the test's runner, so that both REST faces show
the sources' tasks RUNNING and `retrying` during the cut, and no note after it.
"""

from __future__ import annotations

import collections
import json
import time
import uuid

import pytest
from fastapi.testclient import TestClient

from sluice.rest.app import create_app
from tests.conftest import wait_until
from tests.e2e.outage import (
    await_no_retrying,
    await_retrying,
    healthy,
    ride_out,
    status_herder,
)
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.topics import topic_count, topic_rows
from tests.servers import ensure

# as its siblings (test_mq_outage): under CI's load (10+) the 300 s default cut the wait for the
# copy after the outage at 258 s, once (slow or stuck: not known; the wait now names its counts)
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

OUTAGE_S = 20.0
FIRST, MORE = 2000, 500


def test_server_away_for_20_s(paced_runner, tmp_path) -> None:
    import pika

    # 100 messages a second at most from each source: FIRST take 20 s, the cut comes mid-copy
    runner = paced_runner

    host, port = ensure("rabbitmq").split(":")
    direct = f"amqp://guest:guest@{host}:{port}/%2F"
    proxy = TcpProxy((host, int(port)))
    connection = pika.BlockingConnection(pika.URLParameters(direct))
    ch = connection.channel()
    tag = uuid.uuid4().hex[:8]
    stream, queue, exchange, copy = (f"{n}-{tag}" for n in ("away", "jobs", "out", "copy"))
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare(queue, durable=True)
    ch.exchange_declare(exchange, "fanout", durable=True)
    ch.queue_declare(copy, durable=True)
    ch.queue_bind(copy, exchange)

    def publish(first: int, n: int) -> None:
        for i in range(first, first + n):
            props = pika.BasicProperties(headers={"seq": str(i)}, delivery_mode=2)
            ch.basic_publish("", stream, f"é {i}".encode(), props)
            ch.basic_publish("", queue, f"job {i}".encode(), props)

    def count(name: str) -> int:
        return ch.queue_declare(name, passive=True).method.message_count

    publish(0, FIRST)
    root = tmp_path / "store"
    herder = status_herder(runner, tmp_path)
    rest = TestClient(create_app(herder))
    retry = {"errors.retry.timeout": "-1", "errors.retry.delay.max.ms": "1000"}
    raw = {"rabbitmq.url": f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"}
    raw |= {"rabbitmq.timeout.ms": "1000", "value.converter": "ByteArrayConverter", **retry}
    try:
        herder.put_connector(
            "in",
            {
                **raw,
                "connector.class": "RabbitMQStreamSourceConnector",
                "rabbitmq.queues": stream,
                "connect.topicname": "events",
                "read.max.rows": "100",
            },
        )
        herder.put_connector(
            "out",
            {
                **raw,
                "connector.class": "RabbitMQSinkConnector",
                "connect.topicnames": "events",
                "rabbitmq.exchange": exchange,
            },
        )
        herder.put_connector(
            "jobs",
            {
                **raw,
                "connector.class": "RabbitMQSourceConnector",
                "rabbitmq.queues": queue,
                "connect.topicname": "jobs",
                "rabbitmq.prefetch.count": "400",
                "read.max.rows": "100",
            },
        )
        wait_until(lambda: count(copy) > 0, 180, "the copy to start", every=0.2)
        # paced: both copies are still running
        assert count(copy) < FIRST
        assert topic_count(root, "jobs") < FIRST
        proxy.cut()
        away = time.monotonic()
        # the queue source's note too, although its next micro-batch may wait for a core while
        # the sink and the stream source's read each hold one retrying (its poll-ahead polls)
        notes = await_retrying(rest, ["in", "jobs"], 3 * OUTAGE_S)
        assert all("rabbitmq.url=" in n["error"] for n in notes.values()), notes
        ride_out(runner, OUTAGE_S - (time.monotonic() - away), proxy.restore)
        publish(FIRST, MORE)
        total = FIRST + MORE

        last: dict[str, int] = {}

        def done() -> bool:
            healthy(runner)
            jobs = {r["value"] for r in topic_rows(root, "jobs")}
            last.update(events=topic_count(root, "events"), copy=count(copy), jobs=len(jobs))
            return min(last.values()) >= total

        try:
            wait_until(done, 300, "everything after the outage", every=0.5)
        except AssertionError as exc:  # which of the three stopped short, and where
            # the queue as the broker sees it (ready messages, consumers) and the jobs source's
            # status: a stall with messages ready and no consumer is not one with a consumer
            held = ch.queue_declare(queue, passive=True).method
            status = rest.get("/v1/connectors/jobs/status").json()
            raise AssertionError(
                f"{exc}; of {total}: {last}; {queue}: {held.message_count} ready, "
                f"{held.consumer_count} consumer(s); jobs: {status}"
            ) from None
        await_no_retrying(rest, ["in", "out", "jobs"])
        events = topic_rows(root, "events")
        seqs = sorted(int(json.loads(r["headers"])["seq"]) for r in events)
        assert seqs == list(range(total)), "lost or doubled in the topic"
        ids: dict[str, set[bytes]] = collections.defaultdict(set)
        for method, props, body in ch.consume(copy, auto_ack=True, inactivity_timeout=1):
            if method is None:
                break
            ids[props.message_id].add(body)
        ch.cancel()
        assert len(ids) == total and all(len(v) == 1 for v in ids.values())
        jobs = collections.Counter(r["value"] for r in topic_rows(root, "jobs"))
        assert sorted(jobs) == sorted(f"job {i}".encode() for i in range(total)), "jobs lost"
    finally:
        herder.progress.detach(runner.spark)
        runner.close()
        proxy.cut()
        for name in (stream, queue, copy):
            ch.queue_delete(name)
        ch.exchange_delete(exchange)
        connection.close()
