"""RabbitMQ connectors: stream queues (exactly-once) and classic queues (at-least-once) in, an
exchange with publisher confirms out (at-least-once, ``message_id`` for deduplication). See
docs/rabbitmq.md.

Example (library level)::

    runner.start_connector("orders-in", {
        "connector.class": "RabbitMQStreamSourceConnector",
        "rabbitmq.url": "amqp://guest:guest@127.0.0.1:5672/%2F", "rabbitmq.queues": "orders",
        "connect.topicname": "orders", "value.converter": "ByteArrayConverter"})
    runner.start_connector("orders-out", {
        "connector.class": "RabbitMQSinkConnector",
        "rabbitmq.url": "amqp://guest:guest@127.0.0.1:5672/%2F", "connect.topicnames": "orders",
        "rabbitmq.exchange": "orders-copy", "value.converter": "ByteArrayConverter"})
"""

from sluice.connectors.rabbitmq.sink import RabbitMQSinkConnector, RabbitMQSinkTask
from sluice.connectors.rabbitmq.source import (
    RabbitMQSourceConnector,
    RabbitMQSourceTask,
    RabbitMQStreamSourceConnector,
    RabbitMQStreamSourceTask,
)

__all__ = [
    "RabbitMQSinkConnector",
    "RabbitMQSinkTask",
    "RabbitMQSourceConnector",
    "RabbitMQSourceTask",
    "RabbitMQStreamSourceConnector",
    "RabbitMQStreamSourceTask",
]
