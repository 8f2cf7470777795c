"""Benchmark: the new connectors against their system's own client doing the same work.

Redis: N stream entries of ~200 bytes (a key, a value, one header field) copied
  baseline  redis-py alone: XRANGE pages of 10,000 → pipelined XADDs into a copy (one process);
  sluice    RedisStreamSourceConnector → topic (embedded bus) → RedisSinkConnector (stream), both
            running in one worker (local[2]); timed from creating the connectors until the copy
            holds N (so it includes starting two streaming queries: `--steady` also times a second
            batch of N added while they run).

Needs the Redis of `scripts/servers.sh up redis` (or `--redis-url`).

Usage: python bench/connectors.py [--records 200000] [--tasks 2] [--steady]
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


def wait(client: redis.Redis, key: str, n: int, runner: ConnectorRunner) -> None:
    while client.xlen(key) < n:
        for running in runner.running.values():
            failure = running.failure()
            if failure is not None:
                raise SystemExit(f"connector failed: {failure[0]}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--steady", action="store_true")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
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
        wait(client, f"{stream}-copy", n, runner)
        cold = n / (time.perf_counter() - started)
        print(
            f"sluice stream → topic → stream (cold):     {cold:>10,.0f} records/s "
            f"({cold / plain:.2f}x)"
        )
        if args.steady:
            started = time.perf_counter()
            fill(client, stream, n, n)
            wait(client, f"{stream}-copy", 2 * n, runner)
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
