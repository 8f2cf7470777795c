"""RocketMQ source and sink: copy topics between RocketMQ clusters (the replicator use case).

Source keys (`RocketMQSourceConnector`): `source.namesrv` (required), `source.topics` or
`source.topics.regex`, `topic.rename.format` (default `${topic}`: the sluice topic a source topic
is copied to; `connect.topicname` sends everything to one topic instead), `source.group`
(consumer group of the pulls, default `sluice-replicator`), `source.timeout.ms` (10000), and for a
cluster with ACL `source.acl.enable=true`, `source.access.key`, `source.secret.key`.

Sink keys (`RocketMQSinkConnector`): `target.namesrv` (required), `connect.topicnames`,
`topic.rename.format` (default `${topic}`: the target topic of a sluice topic), `target.queues`
(8: queues of a target topic the sink creates), `target.producer.group`, `target.timeout.ms`,
and `target.acl.enable`, `target.access.key`, `target.secret.key` (ACL, as on the source side;
RocketMQ Connect's replicator calls them `src.acl.enable` … `dest.secret.key`).

Example: copy `orders` to `orders-dc2` through the sluice topic `orders`::

    runner.start("rmq-in", {
        "connector.class": "RocketMQSourceConnector",
        "source.namesrv": "10.0.0.1:9876", "source.topics": "orders",
        "value.converter": "ByteArrayConverter"})
    runner.start("rmq-out", {
        "connector.class": "RocketMQSinkConnector",
        "target.namesrv": "10.0.1.1:9876", "connect.topicnames": "orders",
        "topic.rename.format": "${topic}-dc2", "value.converter": "ByteArrayConverter"})

Keys, tags (the extension `TAGS`), user properties and timestamps are carried. The source is
exactly-once into the sluice topic; the sink is exactly-once per micro-batch (see `sink`). With
`bus=rocketmq` on the source cluster, rename the sluice topic (`topic.rename.format`) so that the
source does not read what it writes.
"""

from sluice.connectors.rocketmq.sink import RocketMQSinkConnector, RocketMQSinkTask
from sluice.connectors.rocketmq.source import RocketMQSourceConnector, RocketMQSourceTask

__all__ = [
    "RocketMQSinkConnector",
    "RocketMQSinkTask",
    "RocketMQSourceConnector",
    "RocketMQSourceTask",
]
