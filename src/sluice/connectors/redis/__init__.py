"""Redis connectors: streams (exactly-once) and lists (at-least-once) in, streams, lists, string
keys and hashes out (exactly-once). See docs/redis.md.

Example (library level)::

    runner.start_connector("orders-in", {
        "connector.class": "RedisStreamSourceConnector",
        "redis.url": "redis://127.0.0.1:6379/0", "redis.streams": "orders",
        "connect.topicname": "orders", "value.converter": "ByteArrayConverter"})
    runner.start_connector("orders-out", {
        "connector.class": "RedisSinkConnector", "redis.url": "redis://127.0.0.1:6379/0",
        "connect.topicnames": "orders", "redis.type": "stream",
        "redis.key.format": "${topic}-copy", "value.converter": "ByteArrayConverter"})
"""

from sluice.connectors.redis.sink import RedisSinkConnector, RedisSinkTask
from sluice.connectors.redis.source import (
    RedisListSourceConnector,
    RedisListSourceTask,
    RedisStreamSourceConnector,
    RedisStreamSourceTask,
)

__all__ = [
    "RedisListSourceConnector",
    "RedisListSourceTask",
    "RedisSinkConnector",
    "RedisSinkTask",
    "RedisStreamSourceConnector",
    "RedisStreamSourceTask",
]
