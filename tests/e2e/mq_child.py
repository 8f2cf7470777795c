"""Child process of the NATS/MQTT crash test: both systems through topics until killed.

Usage: python mq_child.py ROOT NATS_URL STREAM SUBJECT_PREFIX MQTT_PORT CLIENT_ID FILTER OUT

- JetStream stream STREAM → topic `events` (`NatsSourceConnector`, 500 sequence numbers per
  micro-batch) → subjects `SUBJECT_PREFIX.events` (`NatsSinkConnector`, two tasks): exactly-once;
- MQTT filter FILTER (session CLIENT_ID) → topic `sensors` (`MqttSourceConnector`, 300 messages
  per poll) → MQTT topic OUT (`MqttSinkConnector`, QoS 1): at-least-once.
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, nats_url, stream, prefix, mqtt_port, client_id, topic_filter, out = sys.argv[1:9]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    raw = {"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}
    nats = {**raw, "nats.url": nats_url}
    mqtt = {**raw, "mqtt.url": f"tcp://127.0.0.1:{mqtt_port}"}
    runner.start(
        "events-in",
        {
            **nats,
            "connector.class": "NatsSourceConnector",
            "nats.streams": stream,
            "connect.topicname": "events",
            "read.max.rows": "500",
        },
    )
    runner.start(
        "events-out",
        {
            **nats,
            "connector.class": "NatsSinkConnector",
            "connect.topicnames": "events",
            "nats.subject.format": f"{prefix}.${{topic}}",
            "max.tasks": "2",
        },
    )
    runner.start(
        "sensors-in",
        {
            **mqtt,
            "connector.class": "MqttSourceConnector",
            "mqtt.topics": topic_filter,
            "mqtt.client.id": client_id,
            "connect.topicname": "sensors",
            "mqtt.poll.max.records": "300",
        },
    )
    runner.start(
        "sensors-out",
        {
            **mqtt,
            "connector.class": "MqttSinkConnector",
            "connect.topicnames": "sensors",
            "mqtt.topic.format": out,
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
