"""Child process of the RabbitMQ crash test: a stream queue and a classic queue through topics
until killed.

Usage: python rabbitmq_child.py STORE_ROOT AMQP_URL STREAM QUEUE EXCHANGE

- stream queue STREAM → topic `events` (`RabbitMQStreamSourceConnector`, 1000 messages per
  micro-batch, exactly-once) → exchange EXCHANGE (`RabbitMQSinkConnector`, two tasks,
  at-least-once with message ids);
- classic queue QUEUE → topic `jobs` (`RabbitMQSourceConnector`, prefetch 500): at-least-once.
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, url, stream, queue, exchange = sys.argv[1:6]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    raw = {"rabbitmq.url": url, "key.converter": "ByteArrayConverter"}
    raw["value.converter"] = "ByteArrayConverter"
    runner.start(
        "events-in",
        {
            **raw,
            "connector.class": "RabbitMQStreamSourceConnector",
            "rabbitmq.queues": stream,
            "connect.topicname": "events",
            "read.max.rows": "1000",
        },
    )
    runner.start(
        "events-out",
        {
            **raw,
            "connector.class": "RabbitMQSinkConnector",
            "connect.topicnames": "events",
            "rabbitmq.exchange": exchange,
            "rabbitmq.publish.window": "300",  # several windows per micro-batch and task
            "max.tasks": "2",
        },
    )
    runner.start(
        "jobs-in",
        {
            **raw,
            "connector.class": "RabbitMQSourceConnector",
            "rabbitmq.queues": queue,
            "connect.topicname": "jobs",
            "rabbitmq.prefetch.count": "500",
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
