"""NATS JetStream connectors: streams in by sequence (exactly-once), subjects out with
``Nats-Msg-Id``s (exactly-once within the stream's duplicate window). See docs/nats.md.

Example (library level)::

    runner.start("orders-in", {
        "connector.class": "NatsSourceConnector", "nats.url": "nats://127.0.0.1:4222",
        "nats.streams": "ORDERS", "connect.topicname": "orders",
        "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
    runner.start("orders-out", {
        "connector.class": "NatsSinkConnector", "nats.url": "nats://127.0.0.1:4222",
        "connect.topicnames": "orders", "nats.subject.format": "copy.${topic}",
        "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
"""

from sluice.connectors.nats.sink import NatsSinkConnector, NatsSinkTask
from sluice.connectors.nats.source import NatsSourceConnector, NatsSourceTask

__all__ = ["NatsSinkConnector", "NatsSinkTask", "NatsSourceConnector", "NatsSourceTask"]
