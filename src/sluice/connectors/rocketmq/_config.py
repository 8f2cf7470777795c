"""The RocketMQ connectors' configuration: the keys of the source (`SOURCE_CONFIG`) and the sink
(`SINK_CONFIG`), each with its cluster's ACL keys (`SOURCE_ACL_KEYS`: ``source.acl.enable``,
``source.access.key``, ``source.secret.key``; `SINK_ACL_KEYS`: the same under ``target.``).

The source's topic keys (``source.topics``, ``source.topics.regex``, ``topic.rename.format``) are
the replicators' shared `sluice.connectors._replication.TOPIC_KEYS`.
"""

from __future__ import annotations

from sluice.clients.rocketmq import AclKeys
from sluice.connectors._replication import TOPIC_KEYS
from sluice.sdk import ConfigDef, ConfigKey

SOURCE_ACL_KEYS = AclKeys.prefixed("source")
SOURCE_CONFIG = ConfigDef(
    ConfigKey("source.namesrv", doc="name server(s) of the source cluster, host:port[;host:port]"),
    *TOPIC_KEYS,
    ConfigKey("source.group", default="sluice-replicator", doc="consumer group of the pulls"),
    ConfigKey("source.timeout.ms", type="int", default=10_000, min=1, doc="request timeout"),
    *SOURCE_ACL_KEYS.config_keys(),
)

SINK_ACL_KEYS = AclKeys.prefixed("target")
SINK_CONFIG = ConfigDef(
    ConfigKey("target.namesrv", doc="name server(s) of the target cluster, host:port[;host:port]"),
    ConfigKey("connect.topicnames", type="list", doc="sluice topics to copy (, or ;)"),
    ConfigKey("topic.rename.format", default="${topic}", doc="target name; ${topic} = old name"),
    ConfigKey("target.queues", type="int", default=8, min=1, doc="queues of a created topic"),
    ConfigKey("target.producer.group", default="sluice-replicator", doc="producer group"),
    ConfigKey("target.timeout.ms", type="int", default=10_000, min=1, doc="request timeout"),
    *SINK_ACL_KEYS.config_keys(),
)
