"""Child process of the Redis crash test: a stream and a list through topics until killed.

Usage: python redis_child.py STORE_ROOT REDIS_URL STREAM LIST

- stream STREAM → topic `events` (`RedisStreamSourceConnector`, 1000 entries per micro-batch) →
  stream `STREAM-copy` (`RedisSinkConnector`, two tasks): exactly-once end to end;
- the same topic `events` → list `STREAM-list`, hash `STREAM-hash` (field: the record key) and
  string keys `STREAM-str:<record key>` (`RedisSinkConnector` with `redis.type` list, hash and
  string, one task each);
- list LIST → topic `jobs` (`RedisListSourceConnector`, 500 elements per poll): at-least-once.

Every sink keeps its marks under keys naming STREAM, so the test can remove them.
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, url, stream, queue = sys.argv[1:5]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    raw = {"redis.url": url, "key.converter": "ByteArrayConverter"}
    raw["value.converter"] = "ByteArrayConverter"
    runner.start(
        "events-in",
        {
            **raw,
            "connector.class": "RedisStreamSourceConnector",
            "redis.streams": stream,
            "connect.topicname": "events",
            "read.max.rows": "1000",
        },
    )
    sink = {
        **raw,
        "connector.class": "RedisSinkConnector",
        "connect.topicnames": "events",
        # marks named after the stream: runs beside each other (or left over) never share one
        "redis.offsets.key.format": "sluice:offsets:${connector}:${topic}:${queue}:" + stream,
        "redis.batch.size": "300",  # several transactions per micro-batch and queue
    }
    runner.start("events-out", {**sink, "redis.key.format": f"{stream}-copy", "max.tasks": "2"})
    for kind, key in (("list", "-list"), ("hash", "-hash"), ("string", "-str:${key}")):
        runner.start(
            f"events-{kind}",
            # smaller transactions: writing a micro-batch takes longer, so a kill finds it mid-way
            {
                **sink,
                "redis.batch.size": "50",
                "redis.type": kind,
                "redis.key.format": stream + key,
            },
        )
    runner.start(
        "jobs-in",
        {
            **raw,
            "connector.class": "RedisListSourceConnector",
            "redis.lists": queue,
            "connect.topicname": "jobs",
            "list.poll.max.records": "500",
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
