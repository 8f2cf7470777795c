"""Kafka source and sink: copy topics from or to a Kafka cluster (confluent-kafka).

Source keys (`KafkaSourceConnector`): `source.bootstrap.servers` (required), `source.topics` or
`source.topics.regex`, `topic.rename.format` (default `${topic}`; `connect.topicname` sends
everything to one topic instead), `source.timeout.ms` (30000), and librdkafka options as
`source.kafka.<option>` (e.g. `source.kafka.security.protocol`) under the worker's client policy
(`sluice.sdk.KAFKA_CLIENT`: never one that loads a library or runs a command).

Sink keys (`KafkaSinkConnector`): `target.bootstrap.servers` (required), `connect.topicnames`,
`topic.rename.format` (default `${topic}`), `target.timeout.ms` (30000), and
`target.kafka.<option>`.

Example: Kafka topic `clicks` → sluice topic `clicks` → RocketMQ topic `clicks`::

    runner.start("kafka-in", {
        "connector.class": "KafkaSourceConnector",
        "source.bootstrap.servers": "10.0.0.5:9092", "source.topics": "clicks",
        "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
    runner.start("rmq-out", {
        "connector.class": "RocketMQSinkConnector",
        "target.namesrv": "10.0.1.1:9876", "connect.topicnames": "clicks",
        "value.converter": "ByteArrayConverter"})

Keys, headers and timestamps are carried; partition *p* of the source reaches sluice queue
`hash(partition) mod n`, and sluice queue *q* reaches target partition (or RocketMQ queue)
*q mod n*. The source is exactly-once into the sluice topic; the sink is at-least-once.
"""

from sluice.connectors.kafka.sink import KafkaSinkConnector, KafkaSinkTask
from sluice.connectors.kafka.source import KafkaSourceConnector, KafkaSourceTask

__all__ = ["KafkaSinkConnector", "KafkaSinkTask", "KafkaSourceConnector", "KafkaSourceTask"]
