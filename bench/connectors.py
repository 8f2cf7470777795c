"""Benchmark: the new connectors against their system's own client doing the same work.

Redis: N stream entries of ~200 bytes (a key, a value, one header field) copied
  baseline  redis-py alone: XRANGE pages of 10,000 → pipelined XADDs into a copy (one process);
  sluice    RedisStreamSourceConnector → topic (embedded bus) → RedisSinkConnector (stream), both
            running in one worker (local[2]); timed from creating the connectors until the copy
            holds N (so it includes starting two streaming queries: `--steady` also times a second
            batch of N added while they run).

RabbitMQ: N messages of ~200 bytes (a body, one header) copied to a classic queue bound to a
fanout exchange, first from a stream queue, then from a classic queue
  baseline  pika alone, pipelined as the sink is (`AmqpCopy`): consume (prefetch 2000; a stream
            from its first offset) → `basic_publish` on a confirming channel of pika's
            asynchronous `SelectConnection`, 2000 confirms outstanding at most, each consumed
            message acked once its copy is confirmed; one process, one connection. Its copy (a
            classic queue of N) is the next measurement's input;
  sluice    RabbitMQStreamSourceConnector, then RabbitMQSourceConnector (acks after commit) →
            topic → RabbitMQSinkConnector (publisher confirms, 2000 in flight), timed from
            creating the connectors until the copy queue holds N. Every queue of the run is
            deleted at its end, whatever happened.

NATS JetStream: N messages of ~200 bytes (a key header, a payload) copied stream → stream
  baseline  nats-py alone: one ephemeral pull consumer fetching pages of 5000 → `publish_async`
            of each into a copy stream, every ack awaited (one process, one connection);
  sluice    NatsSourceConnector → topic → NatsSinkConnector (`Nats-Msg-Id`s), as above.

MQTT: N messages of ~200 bytes (a key user property, a payload) waiting in a persistent session
  baseline  paho alone: a client takes them from its session (QoS 1) and publishes each at QoS 1
            to a copy topic, acknowledging each once its copy's PUBACK came back;
  sluice    MqttSourceConnector (manual acks after commit) → topic → MqttSinkConnector (QoS 1),
            timed until a subscriber of the copy topic received N.

Needs the servers of `scripts/servers.sh up redis rabbitmq nats mosquitto` (or `--redis-url`,
`--amqp-url`).

`--systems mqtt-task` times the MQTT source task alone (no Spark): poll, the Arrow frame the
driver stages, and the acknowledgements of `commit`, against paho alone taking the same messages
from its session with a manual acknowledgement each.

Usage: python bench/connectors.py [--systems redis,rabbitmq,nats,mqtt | mqtt-task]
       [--records 200000] [--tasks 2] [--steady]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pika
import redis

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

VALUE = b"x" * 150


def fill(client: redis.Redis, stream: str, first: int, n: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(first, first + n):
        pipe.xadd(stream, {"key": f"key-{i % 997}", "value": VALUE + b"%08d" % i, "h": "v"})
        if len(pipe) >= 10_000:
            pipe.execute()
    pipe.execute()


def baseline(client: redis.Redis, stream: str, n: int) -> float:
    started = time.perf_counter()
    copy, lower = f"{stream}-plain", "-"
    pipe = client.pipeline(transaction=False)
    while True:
        page = client.xrange(stream, lower, "+", count=10_000)
        for _, fields in page:
            pipe.xadd(copy, fields)
        pipe.execute()
        if len(page) < 10_000:
            break
        lower = "(" + page[-1][0].decode()
    elapsed = time.perf_counter() - started
    assert client.xlen(copy) == n
    client.delete(copy)
    return n / elapsed


def amqp_fill(channel: object, stream: str, first: int, n: int) -> None:
    for i in range(first, first + n):
        props = pika.BasicProperties(headers={"h": "v"})
        channel.basic_publish("", stream, VALUE + b"%08d" % i, props, mandatory=False)


def amqp_count(url: str, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


class AmqpCopy:
    """pika alone, pipelined as the sink is: consume `queue` (prefetch `in_flight`; a stream queue
    from its first offset) and publish each message to a copy queue on a confirming channel
    without waiting (pika's asynchronous `SelectConnection`); a consumed message is acked once
    its copy is confirmed, so at most `in_flight` publishes await their confirm at any time."""

    def __init__(self, url: str, queue: str, n: int, *, stream: bool, in_flight: int = 2000):
        self.url, self.queue, self.n, self.in_flight = url, queue, n, in_flight
        self.copy = f"{queue}-plain"
        self.arguments = {"x-stream-offset": "first"} if stream else None
        self.confirmed, self.out_of_order = 0, set[int]()
        self.started = self.elapsed = 0.0
        self.failure: str | None = None

    def run(self) -> float:
        """Records/s from the first consume until the last confirm."""
        self.conn = pika.SelectConnection(
            pika.URLParameters(self.url),
            on_open_callback=lambda c: c.channel(on_open_callback=self._writer),
            on_open_error_callback=lambda _c, e: self._fail(f"cannot connect: {e}"),
            on_close_callback=lambda c, _e: c.ioloop.stop(),
        )
        self.conn.ioloop.start()
        if self.failure:
            raise SystemExit(f"pika baseline: {self.failure}")
        assert amqp_count(self.url, self.copy) == self.n
        return self.n / self.elapsed

    def _writer(self, writer: object) -> None:
        self.writer = writer
        declared = lambda _f: writer.confirm_delivery(self._confirm, callback=opened)  # noqa: E731
        opened = lambda _f: self.conn.channel(on_open_callback=self._reader)  # noqa: E731
        writer.queue_declare(self.copy, durable=True, callback=declared)

    def _reader(self, reader: object) -> None:
        self.reader = reader
        self.started = time.perf_counter()
        consume = lambda _f: reader.basic_consume(  # noqa: E731
            self.queue, self._message, arguments=self.arguments
        )
        reader.basic_qos(prefetch_count=self.in_flight, callback=consume)

    def _message(self, _ch: object, _method: object, props: object, body: bytes) -> None:
        # published in delivery order: publish sequence number k is consumed delivery tag k
        self.writer.basic_publish("", self.copy, body, props, mandatory=True)

    def _confirm(self, frame: object) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            return self._fail(f"publish {method.delivery_tag} nacked")
        if method.multiple:
            self.confirmed = max(self.confirmed, method.delivery_tag)
        else:
            self.out_of_order.add(method.delivery_tag)
        while self.confirmed + 1 in self.out_of_order:
            self.out_of_order.discard(self.confirmed + 1)
            self.confirmed += 1
        self.reader.basic_ack(self.confirmed, multiple=True)
        if self.confirmed >= self.n:
            self.elapsed = time.perf_counter() - self.started
            self.conn.close()  # the copy stays: the next measurement reads it

    def _fail(self, why: str) -> None:
        self.failure = why
        self.conn.ioloop.stop()


def wait(done: Callable[[], bool], runner: ConnectorRunner) -> None:
    while not done():
        for running in runner.running.values():
            failure = running.failure()
            if failure is not None:
                raise SystemExit(f"connector failed: {failure[0]}")
        time.sleep(0.05)


def timed(
    runner: ConnectorRunner, connectors: dict[str, dict[str, str]], done: Callable[[], bool]
) -> float:
    """Seconds from creating `connectors` until `done()`."""
    started = time.perf_counter()
    for name, config in connectors.items():
        runner.start(name, config)
    wait(done, runner)
    elapsed = time.perf_counter() - started
    for name in connectors:
        runner.stop(name)
    return elapsed


def report(name: str, plain: float, n: int, elapsed: float) -> None:
    rate = n / elapsed
    print(f"{name:<44} {rate:>10,.0f} records/s ({rate / plain:.2f}x)")


def bench_redis(args: argparse.Namespace, runner: ConnectorRunner, raw: dict[str, str]) -> None:
    n = args.records
    client = redis.Redis.from_url(args.redis_url)
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    fill(client, stream, 0, n)
    plain = baseline(client, stream, n)
    print(f"{'redis-py XRANGE → pipelined XADD:':<44} {plain:>10,.0f} records/s")
    copy = f"{stream}-copy"
    try:
        connectors = {
            "in": {
                **raw,
                "redis.url": args.redis_url,
                "connector.class": "RedisStreamSourceConnector",
                "redis.streams": stream,
                "connect.topicname": "bench",
            },
            "out": {
                **raw,
                "redis.url": args.redis_url,
                "connector.class": "RedisSinkConnector",
                "connect.topicnames": "bench",
                "redis.key.format": copy,
                "max.tasks": str(args.tasks),
            },
        }
        if not args.steady:
            elapsed = timed(runner, connectors, lambda: client.xlen(copy) >= n)
            report("sluice stream → topic → stream (cold):", plain, n, elapsed)
            return
        for name, config in connectors.items():
            runner.start(name, config)
        wait(lambda: client.xlen(copy) >= n, runner)
        started = time.perf_counter()
        fill(client, stream, n, n)
        wait(lambda: client.xlen(copy) >= 2 * n, runner)
        report(
            "sluice, running (steady, incl. the XADDs):", plain, n, time.perf_counter() - started
        )
        for name in connectors:
            runner.stop(name)
    finally:
        client.delete(stream, copy)


def bench_rabbitmq(args: argparse.Namespace, runner: ConnectorRunner, raw: dict[str, str]) -> None:
    """A stream queue → exchange, then a classic queue → exchange, each against pika alone doing
    the same copy pipelined (`AmqpCopy`); each baseline's copy is the next measurement's input."""
    n, url = args.records, args.amqp_url
    tag = uuid.uuid4().hex[:8]
    stream, exchange, copy = f"bench-{tag}", f"bench-{tag}-x", f"bench-{tag}-copy"
    out = {
        **raw,
        "rabbitmq.url": url,
        "connector.class": "RabbitMQSinkConnector",
        "connect.topicnames": "bench",
        "rabbitmq.exchange": exchange,
        "max.tasks": str(args.tasks),
    }
    source = {**raw, "rabbitmq.url": url, "connect.topicname": "bench"}
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        channel.exchange_declare(exchange, "fanout", durable=True)
        channel.queue_declare(copy, durable=True)
        channel.queue_bind(copy, exchange)
        amqp_fill(channel, stream, 0, n)
        connection.close()  # idle through the run, the broker could drop it (missed heartbeats)
        plain = AmqpCopy(url, stream, n, stream=True).run()
        print(f"{'pika stream → pipelined confirmed publish:':<44} {plain:>10,.0f} records/s")
        stream_in = {**source, "connector.class": "RabbitMQStreamSourceConnector"}
        connectors = {"in": {**stream_in, "rabbitmq.queues": stream}, "out": out}
        elapsed = timed(runner, connectors, lambda: amqp_count(url, copy) >= n)
        report("sluice stream → topic → exchange (cold):", plain, n, elapsed)
        if args.steady:
            amqp_steady(runner, connectors, url, stream, copy, plain)
        queue = f"{stream}-plain"  # the first baseline's copy: n messages in a classic queue
        plain = AmqpCopy(url, queue, n, stream=False).run()
        print(f"{'pika queue → pipelined confirmed publish:':<44} {plain:>10,.0f} records/s")
        amqp_purge(url, copy)
        queue_in = {**source, "connector.class": "RabbitMQSourceConnector"}
        connectors = {"in-q": {**queue_in, "rabbitmq.queues": f"{queue}-plain"}, "out-q": out}
        elapsed = timed(runner, connectors, lambda: amqp_count(url, copy) >= n)
        report("sluice queue → topic → exchange (cold):", plain, n, elapsed)
    finally:
        amqp_clean(url, exchange)


def amqp_steady(
    runner: ConnectorRunner,
    connectors: dict[str, dict[str, str]],
    url: str,
    stream: str,
    copy: str,
    plain: float,
) -> None:
    """N more messages while the connectors run (the time includes the bench's publishes)."""
    n = amqp_count(url, copy)
    for name, config in connectors.items():
        runner.start(name, config)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    started = time.perf_counter()
    amqp_fill(connection.channel(), stream, n, n)
    connection.close()
    wait(lambda: amqp_count(url, copy) >= 2 * n, runner)
    report("sluice, running (steady, incl. the fill):", plain, n, time.perf_counter() - started)
    for name in connectors:
        runner.stop(name)


def amqp_purge(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_purge(queue)
    connection.close()


def amqp_clean(url: str, exchange: str) -> None:
    """Delete every queue of this run and its exchange (on a fresh connection: one idle through
    the run may have been dropped), whether or not the run got as far as declaring them."""
    prefix = exchange.removesuffix("-x")
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for suffix in ("", "-copy", "-plain", "-plain-plain"):
        channel.queue_delete(prefix + suffix)  # an absent queue is no error
    channel.exchange_delete(exchange)
    connection.close()


def bench_nats(args: argparse.Namespace, runner: ConnectorRunner, raw: dict[str, str]) -> None:
    from tests.nats_helpers import Nats

    n, tag = args.records, uuid.uuid4().hex[:8].upper()
    nats = Nats(args.nats_url)
    streams = {f"B{tag}": f"b{tag}.>", f"BP{tag}": f"bp{tag}.>", f"BS{tag}": f"bs{tag}.>"}
    for name, subject in streams.items():
        nats.add_stream(name, [subject])
    try:
        nats.publish(
            [(f"b{tag}.x", VALUE + b"%08d" % i, {"Sluice-Key": f"key-{i % 997}"}) for i in range(n)]
        )
        plain = n / nats_copy(args.nats_url, f"B{tag}", f"bp{tag}.copy", n)
        print(f"{'nats-py pull fetch → publish_async:':<44} {plain:>10,.0f} records/s")
        wire = n / nats_copy(args.nats_url, f"B{tag}", f"bp{tag}.wire", n, wire=True)
        print(f"{'nats-py, protocol-level pull → publish:':<44} {wire:>10,.0f} records/s")
        connectors = {
            "nin": {
                **raw,
                "nats.url": args.nats_url,
                "connector.class": "NatsSourceConnector",
                "nats.streams": f"B{tag}",
                "connect.topicname": "nbench",
                "max.tasks": str(args.tasks),
            },
            "nout": {
                **raw,
                "nats.url": args.nats_url,
                "connector.class": "NatsSinkConnector",
                "connect.topicnames": "nbench",
                "nats.subject.format": f"bs{tag}.${{topic}}",
                "max.tasks": str(args.tasks),
            },
        }
        elapsed = timed(runner, connectors, lambda: nats.count(f"BS{tag}") >= n)
        report("sluice stream → topic → stream (cold):", plain, n, elapsed)
        print(f"{'':<44} {'':>10} vs protocol-level: {n / elapsed / wire:.2f}x")
    finally:
        for name in streams:
            nats.delete_stream(name)


def nats_copy(url: str, stream: str, subject: str, n: int, wire: bool = False) -> float:
    """Seconds nats-py alone takes to copy `stream` to `subject`, every ack awaited: with its
    `fetch` and `publish_async`, or (`wire`) with the connectors' protocol-level requests."""
    import asyncio

    import nats as nats_py
    from nats.js import api

    from sluice.connectors.nats._jetstream import publish, pull

    async def main() -> float:
        nc = await nats_py.connect(url)
        js = nc.jetstream(timeout=30)
        started = time.perf_counter()
        # an ephemeral consumer idle for 5 s (nats-py's default) is removed: under load a page's
        # publishes can take longer
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=600
        )
        info = await js.add_consumer(stream, config=config)
        sub = await js.pull_subscribe_bind(consumer=info.name, stream=stream)
        left = n
        while left:
            if wire:
                msgs = await pull(nc, stream, info.name, min(left, 5000), 30)
                await publish(nc, [(subject, m.data, m.headers) for m in msgs], 5000, 30)
            else:
                msgs = await sub.fetch(min(left, 5000), timeout=30)
                futures = [await js.publish_async(subject, m.data, headers=m.headers) for m in msgs]
                await asyncio.gather(*futures)
            left -= len(msgs)
        elapsed = time.perf_counter() - started
        await nc.close()
        return elapsed

    return asyncio.run(main())


def bench_mqtt(args: argparse.Namespace, runner: ConnectorRunner, raw: dict[str, str]) -> None:
    from tests import mqtt_helpers

    n, tag, port = args.records, uuid.uuid4().hex[:8], args.mqtt_port
    plain_id, sluice_id = f"bench-plain-{tag}", f"bench-sluice-{tag}"
    for client_id in (plain_id, sluice_id):
        mqtt_helpers.session(port, client_id, [f"bench-{tag}/in"])
    copy = mqtt_helpers.Collector(port, f"bench-{tag}/sluice")
    try:
        messages = [
            (f"bench-{tag}/in", VALUE + b"%08d" % i, {"Sluice-Key": f"key-{i % 997}"})
            for i in range(n)
        ]
        mqtt_helpers.publish(port, messages)
        plain = n / mqtt_copy(port, plain_id, f"bench-{tag}/plain", n)
        print(f"{'paho subscribe (QoS 1) → publish (QoS 1):':<44} {plain:>10,.0f} records/s")
        url = f"tcp://127.0.0.1:{port}"
        connectors = {
            "min": {
                **raw,
                "mqtt.url": url,
                "connector.class": "MqttSourceConnector",
                "mqtt.topics": f"bench-{tag}/in",
                "mqtt.client.id": sluice_id,
                "connect.topicname": "mbench",
            },
            "mout": {
                **raw,
                "mqtt.url": url,
                "connector.class": "MqttSinkConnector",
                "connect.topicnames": "mbench",
                "mqtt.topic.format": f"bench-{tag}/sluice",
                "max.tasks": str(args.tasks),
            },
        }
        elapsed = timed(runner, connectors, lambda: copy.count() >= n)
        report("sluice MQTT → topic → MQTT (cold):", plain, n, elapsed)
    finally:
        copy.close()
        for client_id in (plain_id, sluice_id):
            mqtt_helpers.session(port, client_id, [], end=True)


def mqtt_copy(port: int, client_id: str, topic: str, n: int) -> float:
    """Seconds paho alone takes to take `n` queued messages from its session and publish each
    (QoS 1) to `topic`, acknowledging each message once its copy's PUBACK came back (sluice's
    guarantee). At most 20,000 copies are in flight, the rest wait their turn: past 65,535 paho
    runs out of packet ids (`ERR_QUEUE_SIZE`), and Mosquitto sends the whole session at once."""
    import collections
    import threading

    import paho.mqtt.client as mqtt

    copied, done = [0], threading.Event()
    incoming: dict[int, int] = {}  # a copy's packet id → its original's
    waiting: collections.deque = collections.deque()

    def copy(c: mqtt.Client, m: mqtt.MQTTMessage) -> None:
        incoming[c.publish(topic, m.payload, 1, properties=m.properties).mid] = m.mid

    def on_message(c: mqtt.Client, _u: object, m: mqtt.MQTTMessage) -> None:
        if len(incoming) < 20_000:
            copy(c, m)
        else:
            waiting.append(m)

    def on_publish(c: mqtt.Client, _u: object, mid: int, _reason: object, _p: object) -> None:
        c.ack(incoming.pop(mid), 1)
        copied[0] += 1
        if waiting:
            copy(c, waiting.popleft())
        if copied[0] >= n:
            done.set()

    c, started = paho_resume(port, client_id, on_message, manual_ack=True, on_publish=on_publish)
    done.wait(3600)
    elapsed = time.perf_counter() - started
    c.disconnect()
    c.loop_stop()
    return elapsed


def bench_mqtt_task(args: argparse.Namespace) -> None:
    """The MQTT source task alone (no Spark): N messages waiting in its session, polled, staged
    as the engine frames them (Arrow) and acknowledged as after a commit; against paho alone
    taking them from its session with a manual acknowledgement each."""
    from tests import mqtt_helpers

    n, tag, port = args.records, uuid.uuid4().hex[:8], args.mqtt_port
    ids = {side: f"bench-{side}-{tag}" for side in ("paho", "task")}
    for client_id in ids.values():
        mqtt_helpers.session(port, client_id, [f"bench-{tag}/in"])
    try:
        messages = [
            (f"bench-{tag}/in", VALUE + b"%08d" % i, {"Sluice-Key": f"key-{i % 997}"})
            for i in range(n)
        ]
        mqtt_helpers.publish(port, messages)
        plain = n / paho_take(port, ids["paho"], n)
        print(f"{'paho alone: take, ack each:':<44} {plain:>10,.0f} msgs/s")
        report("MqttSourceTask: poll → frame → commit:", plain, n, task_take(port, ids["task"], n))
    finally:
        for client_id in ids.values():
            mqtt_helpers.session(port, client_id, [], end=True)


def paho_resume(
    port: int,
    client_id: str,
    on_message: Callable[..., None],
    *,
    manual_ack: bool = False,
    on_publish: Callable[..., None] | None = None,
) -> tuple[Any, float]:
    """A paho client resuming the persistent session of `client_id` (its messages start to
    flow to `on_message`), and when it began connecting."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5,
        manual_ack=manual_ack,
    )
    c.max_inflight_messages_set(1000)
    c.max_queued_messages_set(0)
    c.on_message = on_message
    c.on_publish = on_publish
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval, props.ReceiveMaximum = 3600, 65535
    started = time.perf_counter()
    c.connect("127.0.0.1", port, clean_start=False, properties=props)
    c.loop_start()
    return c, started


def paho_take(port: int, client_id: str, n: int) -> float:
    """Seconds paho alone takes to receive `n` messages waiting in its session, acking each."""
    import threading

    import paho.mqtt.client as mqtt

    taken, done = [0], threading.Event()

    def on_message(c: mqtt.Client, _u: object, m: mqtt.MQTTMessage) -> None:
        c.ack(m.mid, m.qos)
        taken[0] += 1
        if taken[0] >= n:
            done.set()

    c, started = paho_resume(port, client_id, on_message, manual_ack=True)
    done.wait(3600)
    elapsed = time.perf_counter() - started
    c.disconnect()
    c.loop_stop()
    return elapsed


def task_take(port: int, client_id: str, n: int) -> float:
    """Seconds the source task takes to hand over `n` messages waiting in its session, as the
    driver does: poll, frame (what is staged), commit (the acknowledgements)."""
    from sluice.connectors.mqtt import MqttSourceTask
    from sluice.engine.source import Shape, SourcePlan, _Frame
    from sluice.sdk import ReadLimit, Schema, SourceTaskContext

    plan = SourcePlan(
        name="bench",
        run="bench",
        task_class=MqttSourceTask,
        task_configs=({},),
        key_schema=Schema.bytes_(),
        shapes=(Shape(Schema.bytes_()),),
        topic="mbench",
        limit=ReadLimit(),
        staging_dir="",
    )
    frame = _Frame(plan)
    task = MqttSourceTask()
    task.context = SourceTaskContext(connector_name="bench", task_id=0, offset_storage_reader=None)
    started = time.perf_counter()
    task.start(
        {
            "mqtt.url": f"tcp://127.0.0.1:{port}",
            "mqtt.topics": "#",
            "mqtt.client.id": client_id,
            "connect.topicname": "mbench",
        }
    )
    taken = 0
    while taken < n:
        polled = task.poll()
        if not len(polled):
            time.sleep(0.01)  # what arrives meanwhile is the next poll's
            continue
        is_batch = not isinstance(polled, list)
        taken += (
            frame.complete(polled, {"task": 0}) if is_batch else frame.from_records(polled)
        ).num_rows
        task.commit(polled)
    elapsed = time.perf_counter() - started
    task.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--systems", default="redis,nats,mqtt", help="of redis,rabbitmq,nats,mqtt,mqtt-task"
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument(
        "--steady", action="store_true", help="Redis, RabbitMQ: also time a second batch"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--mqtt-port", type=int, default=1883)
    args = parser.parse_args()
    # a SIGTERM (a timeout, a kill) unwinds like Ctrl-C, so every `finally` deletes what it made
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; {args.records} records of ~200 bytes"
    )
    if args.systems == "mqtt-task":  # no Spark
        bench_mqtt_task(args)
        return
    root = tempfile.mkdtemp(prefix="sluice-bench-")
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    raw = {"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}
    systems = {
        "redis": bench_redis,
        "rabbitmq": bench_rabbitmq,
        "nats": bench_nats,
        "mqtt": bench_mqtt,
    }
    try:
        for system in args.systems.split(","):
            systems[system](args, runner, raw)
    finally:
        runner.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
