"""The Kafka connectors' configuration: the keys of the source (`SOURCE_CONFIG`) and the sink
(`SINK_CONFIG`), the key naming each side's cluster (`SOURCE_KEY`, `SINK_KEY`), and the prefix of
the librdkafka options each passes through (`SOURCE_PREFIX`, `SINK_PREFIX`:
``source.kafka.<option>`` / ``target.kafka.<option>``, under the worker's client policy,
`sluice.sdk.KAFKA_CLIENT`).

The source's topic keys (``source.topics``, ``source.topics.regex``, ``topic.rename.format``) are
the replicators' shared `sluice.connectors._replication.TOPIC_KEYS`.
"""

from __future__ import annotations

from sluice.connectors._replication import TOPIC_KEYS
from sluice.sdk import ConfigDef, ConfigKey

SOURCE_KEY = "source.bootstrap.servers"
SOURCE_PREFIX = "source.kafka."
SOURCE_CONFIG = ConfigDef(
    ConfigKey(SOURCE_KEY, doc="bootstrap servers of the source cluster, host:port[,host:port]"),
    *TOPIC_KEYS,
    ConfigKey("source.timeout.ms", type="int", default=30_000, min=1, doc="request timeout"),
)

SINK_KEY = "target.bootstrap.servers"
SINK_PREFIX = "target.kafka."
SINK_CONFIG = ConfigDef(
    ConfigKey(SINK_KEY, doc="bootstrap servers of the target cluster, host:port[,host:port]"),
    ConfigKey("connect.topicnames", type="list", doc="sluice topics to copy (, or ;)"),
    ConfigKey("topic.rename.format", default="${topic}", doc="target name; ${topic} = old name"),
    ConfigKey("target.timeout.ms", type="int", default=30_000, min=1, doc="request timeout"),
)
