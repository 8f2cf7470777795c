"""Benchmark: RocketMQ → sluice topic (embedded bus) → RocketMQ with the replicator connectors.

Two numbers, on one broker (two topics):
  cold    the source topic already holds N messages; time from creating both connectors until
          the target topic holds N (includes starting two streaming queries);
  steady  both connectors already run; N messages are produced; time until the target holds them.
Each message has a key (997 keys), a tag and two user properties.

Needs a broker: `--namesrv` (default $SLUICE_ROCKETMQ_NAMESRV or 127.0.0.1:9876, e.g.
`scripts/servers.sh up rocketmq`).

Usage: python bench/replicator.py [--messages 100000] [--tasks 2]
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
import zlib
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._wait import until

from sluice.clients.rocketmq import RocketMQClient
from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner


def produce(client: RocketMQClient, topic: str, n: int, first: int = 0) -> None:
    queues = client.create_topic(topic, 8)
    by_queue: dict[int, list] = defaultdict(list)
    for i in range(first, first + n):
        key = f"key-{i % 997}"
        props = {"KEYS": key, "TAGS": f"tag{i % 5}", "seq": str(i), "p": "v"}
        by_queue[zlib.crc32(key.encode()) % 8].append((f"message {i}".encode(), props))
    for q, messages in by_queue.items():
        client.send(topic, queues[q], messages)


def count(client: RocketMQClient, topic: str) -> int:
    queues = client.queues(topic, fresh=True)
    return sum(hi - lo for lo, hi in client.offsets(topic, queues).values()) if queues else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument(
        "--namesrv", default=os.environ.get("SLUICE_ROCKETMQ_NAMESRV", "127.0.0.1:9876")
    )
    args = parser.parse_args()
    n = args.messages
    client = RocketMQClient(args.namesrv)
    source = f"bench-{uuid.uuid4().hex[:8]}"
    produce(client, source, n)
    wait_for_source = time.monotonic() + 60
    while count(client, source) < n and time.monotonic() < wait_for_source:
        time.sleep(0.1)

    spark = build_session({"spark.master": "local[2]"}, log_level="ERROR")
    root = tempfile.mkdtemp(prefix="sluice-bench-replicator-")
    runner = ConnectorRunner(spark, root, trigger_interval_ms=100)
    common = {"value.converter": "ByteArrayConverter", "max.tasks": str(args.tasks)}
    try:
        started = time.monotonic()
        runner.start(
            "in",
            {
                "connector.class": "RocketMQSourceConnector",
                "source.namesrv": args.namesrv,
                "source.topics": source,
                **common,
            },
        )
        runner.start(
            "out",
            {
                "connector.class": "RocketMQSinkConnector",
                "target.namesrv": args.namesrv,
                "connect.topicnames": source,
                "topic.rename.format": "${topic}-copy",
                **common,
            },
        )
        until(lambda: count(client, f"{source}-copy") >= n, runner)
        cold = time.monotonic() - started
        started = time.monotonic()
        produce(client, source, n, first=n)
        until(lambda: count(client, f"{source}-copy") >= 2 * n, runner)
        steady = time.monotonic() - started
    finally:
        runner.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{platform.node()}: {os.cpu_count()} cores, load {load:.1f}, {args.tasks} tasks")
    print(f"cold   {n:,} messages in {cold:6.1f} s = {n / cold:9,.0f} msg/s")
    print(f"steady {n:,} messages in {steady:6.1f} s = {n / steady:9,.0f} msg/s")


if __name__ == "__main__":
    main()
