"""`bus=rocketmq`: topics on Apache RocketMQ 4.x, over its remoting protocol.

Worker keys (RocketMQ Connect's names)::

    bus=rocketmq
    namesrvAddr=127.0.0.1:9876            # required; several: a:9876;b:9876
    rmqProducerGroup=sluice-producer      # producer group of topic writes
    rmqConsumerGroup=sluice-reader        # group the reader pulls as (sinks' offsets are
                                          # committed under their own group, connect-<name>)
    operationTimeout=10000                # ms, per request
    maxMessageSize=4194304                # a record value larger than this fails its task
    rocketmq.cluster=DefaultCluster       # where new topics are created (default: the only one)
    bus.outage.timeout.ms=300000          # how long to ride out a broker outage
    aclEnable=false                       # true: sign every request (brokers with aclEnable=true)
    accessKey=…                           # required when aclEnable=true
    secretKey=…                           # required when aclEnable=true (never logged)

Delivery: topic writes are exactly-once per micro-batch (staging, a commit journal and per-queue
ordered batch sends tagged `sluice.writer`, see `sluice.bus._external`); reads are exact offset
ranges. A sink's committed offsets are also committed to its consumer group, so `mqadmin
consumerProgress -g connect-<name>` shows its lag. Retention is the broker's
(`fileReservedTime`).

ACL: with ``aclEnable=true`` every request carries ``accessKey`` and a signature made with
``secretKey`` (RocketMQ 4.x's ``AclClientRPCHook`` scheme, `sluice.clients.rocketmq.sign_ext`).
The account needs ``admin: true`` for sluice to create topics and consumer groups, or the topics
must exist beforehand; otherwise PUB|SUB on its topics and SUB on its groups. A request the
broker's ACL refuses fails with a message naming the key, the topic or group and the access key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sluice.bus._external import ExternalBus
from sluice.bus._worker_keys import ROCKETMQ_KEYS
from sluice.bus.base import outage_seconds
from sluice.bus.rocketmq._log import RocketMQLog
from sluice.clients.rocketmq import Credentials, acl_credentials
from sluice.sdk import ConfigException

__all__ = ["RocketMQBus", "RocketMQLog"]


class RocketMQBus(ExternalBus):
    """Topics on RocketMQ: a :class:`RocketMQLog` plus the shared Spark adapters.

    ``state_dir`` holds staged rows and the commit journal (under the worker's store root).
    """

    kind = "rocketmq"

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        namesrv_addr: str,
        producer_group: str = "sluice-producer",
        consumer_group: str = "sluice-reader",
        cluster: str | None = None,
        default_queues: int = 8,
        timeout_s: float = 10.0,
        max_message_size: int = 4 << 20,
        outage_s: float = 300.0,
        credentials: Credentials | None = None,
    ) -> None:
        self.default_queues = default_queues
        self.log: RocketMQLog = RocketMQLog(
            state_dir,
            namesrv_addr=namesrv_addr,
            producer_group=producer_group,
            consumer_group=consumer_group,
            cluster=cluster,
            timeout_s=timeout_s,
            max_message_size=max_message_size,
            outage_s=outage_s,
            credentials=credentials,
        )

    @classmethod
    def from_config(
        cls, props: Mapping[str, str], state_dir: str | os.PathLike[str], *, default_queues: int = 8
    ) -> RocketMQBus:
        """Build from worker keys (see the module docstring); a bad one raises
        :class:`ConfigException` naming it."""
        values = ROCKETMQ_KEYS.parse({k: v for k, v in props.items() if k in ROCKETMQ_KEYS.keys})
        address = (values["namesrvAddr"] or "").strip()
        if not address:
            raise ConfigException("namesrvAddr", "required key is missing (bus=rocketmq)")
        for part in address.split(";"):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigException("namesrvAddr", f"expected host:port, got {part.strip()!r}")
        credentials = acl_credentials(values, "aclEnable", "accessKey", "secretKey")
        return cls(
            state_dir,
            namesrv_addr=address,
            producer_group=values["rmqProducerGroup"],
            consumer_group=values["rmqConsumerGroup"],
            cluster=values["rocketmq.cluster"] or None,
            default_queues=default_queues,
            timeout_s=values["operationTimeout"] / 1000.0,
            max_message_size=values["maxMessageSize"],
            outage_s=outage_seconds(props),
            credentials=credentials,
        )
