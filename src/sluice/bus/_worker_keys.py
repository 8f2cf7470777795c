"""The worker-config keys the broker bus backends declare (a leaf: it imports only the SDK), so
that the worker's key check (`sluice.bus.is_bus_key`) and the backend that parses them read one
table."""

from __future__ import annotations

from sluice.sdk import ConfigDef, ConfigKey

#: The worker keys of the RocketMQ bus (`bus=rocketmq`), read by `RocketMQBus.from_config`.
ROCKETMQ_KEYS = ConfigDef(
    ConfigKey("namesrvAddr", default="", doc="name server address(es), host:port;host:port"),
    ConfigKey("rmqProducerGroup", default="sluice-producer", doc="producer group of topic writes"),
    ConfigKey("rmqConsumerGroup", default="sluice-reader", doc="group the topic reader pulls as"),
    ConfigKey("operationTimeout", type="int", default=10_000, min=100, doc="ms per request"),
    ConfigKey("maxMessageSize", type="int", default=4 << 20, min=1, doc="largest record value"),
    ConfigKey("aclEnable", type="bool", default=False, doc="sign requests (broker ACL)"),
    ConfigKey("accessKey", default="", doc="ACL access key (aclEnable=true)"),
    ConfigKey("secretKey", type="password", default="", doc="ACL secret key (aclEnable=true)"),
    ConfigKey("rocketmq.cluster", default="", doc="cluster new topics are created in"),
)
