"""Benchmark: the new connectors against their system's own client doing the same work.

Redis: N stream entries of ~200 bytes (a key, a value, one header field) copied
  baseline  redis-py alone: XRANGE pages of 10,000 → pipelined XADDs into a copy (one process);
  sluice    RedisStreamSourceConnector → topic (embedded bus) → RedisSinkConnector (stream), both
            running in one worker (local[2]); timed from creating the connectors until the copy
            holds N (so it includes starting two streaming queries: `--steady` also times a second
            batch of N added while they run).

RabbitMQ (`--system rabbitmq`): N messages of ~200 bytes (a routing key, a body, one header) in a
stream queue, copied to a classic queue bound to a fanout exchange
  baseline  pika alone: consume the stream (prefetch 2000, acks as credit) → `basic_publish` of
            each message on a confirming blocking channel (pika's way: each publish waits for its
            confirm), one process;
  sluice    RabbitMQStreamSourceConnector → topic → RabbitMQSinkConnector (publisher confirms,
            pipelined), timed from creating the connectors until the copy queue holds N.

Needs the servers of `scripts/servers.sh up redis|rabbitmq` (or `--redis-url` / `--amqp-url`).

Usage: python bench/connectors.py [--system redis|rabbitmq] [--records 200000] [--tasks 2]
                                  [--steady]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid

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


def amqp_baseline(url: str, stream: str, n: int) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    reader, writer = connection.channel(), connection.channel()
    copy = f"{stream}-plain"
    writer.queue_declare(copy, durable=True)
    writer.confirm_delivery()
    reader.basic_qos(prefetch_count=2000)
    started = time.perf_counter()
    messages = reader.consume(stream, arguments={"x-stream-offset": "first"})
    for done, (method, props, body) in enumerate(messages, 1):
        writer.basic_publish("", copy, body, props, mandatory=True)
        if done % 1000 == 0 or done == n:
            reader.basic_ack(method.delivery_tag, multiple=True)
        if done == n:
            break
    elapsed = time.perf_counter() - started
    reader.cancel()
    assert writer.queue_declare(copy, passive=True).method.message_count == n
    writer.queue_delete(copy)
    connection.close()
    return n / elapsed


def wait_for(count: object, n: int, runner: ConnectorRunner) -> None:
    while count() < n:
        for running in runner.running.values():
            failure = running.failure()
            if failure is not None:
                raise SystemExit(f"connector failed: {failure[0]}")
        time.sleep(0.05)


def rabbitmq(args: argparse.Namespace, runner: ConnectorRunner) -> None:
    n, url = args.records, args.amqp_url
    tag = uuid.uuid4().hex[:8]
    stream, exchange, copy = f"bench-{tag}", f"bench-{tag}-x", f"bench-{tag}-copy"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.exchange_declare(exchange, "fanout", durable=True)
    channel.queue_declare(copy, durable=True)
    channel.queue_bind(copy, exchange)
    amqp_fill(channel, stream, 0, n)
    try:
        plain = amqp_baseline(url, stream, n)
        print(f"pika stream consume → confirmed publish:   {plain:>10,.0f} records/s")
        raw = {"rabbitmq.url": url, "key.converter": "ByteArrayConverter"}
        raw["value.converter"] = "ByteArrayConverter"
        started = time.perf_counter()
        runner.start(
            "in",
            {
                **raw,
                "connector.class": "RabbitMQStreamSourceConnector",
                "rabbitmq.queues": stream,
                "connect.topicname": "bench",
            },
        )
        runner.start(
            "out",
            {
                **raw,
                "connector.class": "RabbitMQSinkConnector",
                "connect.topicnames": "bench",
                "rabbitmq.exchange": exchange,
                "max.tasks": str(args.tasks),
            },
        )
        wait_for(lambda: amqp_count(url, copy), n, runner)
        cold = n / (time.perf_counter() - started)
        print(
            f"sluice stream → topic → exchange (cold):   {cold:>10,.0f} records/s "
            f"({cold / plain:.2f}x)"
        )
        if args.steady:
            started = time.perf_counter()
            amqp_fill(channel, stream, n, n)
            wait_for(lambda: amqp_count(url, copy), 2 * n, runner)
            steady = n / (time.perf_counter() - started)
            print(
                f"sluice, running (steady, incl. the fill):  {steady:>10,.0f} records/s "
                f"({steady / plain:.2f}x)"
            )
    finally:
        runner.close()
        for queue in (stream, copy):
            channel.queue_delete(queue)
        channel.exchange_delete(exchange)
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=("redis", "rabbitmq"), default="redis")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--steady", action="store_true")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    args = parser.parse_args()
    if args.system == "rabbitmq":
        print(
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load {os.getloadavg()[0]:.1f}; {args.records} messages of ~200 bytes"
        )
        root = tempfile.mkdtemp(prefix="sluice-bench-")
        spark = build_session(
            {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
        )
        try:
            rabbitmq(args, ConnectorRunner(spark, root, trigger_interval_ms=0))
        finally:
            spark.stop()
            shutil.rmtree(root, ignore_errors=True)
        return
    redis_main(args)


def redis_main(args: argparse.Namespace) -> None:
    n = args.records
    client = redis.Redis.from_url(args.redis_url)
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    fill(client, stream, 0, n)
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; {n} entries of ~200 bytes"
    )
    plain = baseline(client, stream, n)
    print(f"redis-py XRANGE → pipelined XADD:          {plain:>10,.0f} records/s")

    root = tempfile.mkdtemp(prefix="sluice-bench-")
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    raw = {
        "redis.url": args.redis_url,
        "key.converter": "ByteArrayConverter",
        "value.converter": "ByteArrayConverter",
    }
    try:
        started = time.perf_counter()
        runner.start(
            "in",
            {
                **raw,
                "connector.class": "RedisStreamSourceConnector",
                "redis.streams": stream,
                "connect.topicname": "bench",
            },
        )
        runner.start(
            "out",
            {
                **raw,
                "connector.class": "RedisSinkConnector",
                "connect.topicnames": "bench",
                "redis.key.format": f"{stream}-copy",
                "max.tasks": str(args.tasks),
            },
        )
        wait_for(lambda: client.xlen(f"{stream}-copy"), n, runner)
        cold = n / (time.perf_counter() - started)
        print(
            f"sluice stream → topic → stream (cold):     {cold:>10,.0f} records/s "
            f"({cold / plain:.2f}x)"
        )
        if args.steady:
            started = time.perf_counter()
            fill(client, stream, n, n)
            wait_for(lambda: client.xlen(f"{stream}-copy"), 2 * n, runner)
            steady = n / (time.perf_counter() - started)
            print(
                f"sluice, running (steady, incl. the XADDs): {steady:>10,.0f} records/s "
                f"({steady / plain:.2f}x)"
            )
    finally:
        runner.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        client.delete(stream, f"{stream}-copy")


if __name__ == "__main__":
    main()
