"""`bus=kafka`: topics on a Kafka cluster, through confluent-kafka.

Worker keys::

    bus=kafka
    bootstrap.servers=broker1:9092,broker2:9092     # required
    kafka.security.protocol=SASL_SSL                 # kafka.<librdkafka property>: passed on
    kafka.request.timeout.ms=30000
    bus.outage.timeout.ms=300000                     # how long to ride out a broker outage

Delivery: topic writes are exactly-once per micro-batch (see `sluice.bus._external`: staging, a
commit journal, an idempotent gapless producer, and a `sluice.writer` header per message); reads
are exact offset ranges (assign + position, `auto.offset.reset=error`). A sink's committed offsets
are also committed under its consumer group (`connect-<connector>`), so Kafka's tools show its lag.
Topics are created with `bus.default.queues` partitions through the admin API; a cluster without
it (librdkafka's mock cluster) creates them on first use with its default partition count.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sluice.bus._external import ExternalBus
from sluice.bus.base import outage_seconds
from sluice.bus.kafka._log import KafkaLog
from sluice.sdk import ConfigException

__all__ = ["KafkaBus", "KafkaLog"]

_PREFIX = "kafka."


class KafkaBus(ExternalBus):
    """Topics on Kafka: a :class:`KafkaLog` plus the shared Spark adapters.

    ``state_dir`` holds staged rows and the commit journal (under the worker's store root).
    """

    kind = "kafka"

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        default_queues: int = 8,
        timeout_s: float = 30.0,
        outage_s: float = 300.0,
    ) -> None:
        self.default_queues = default_queues
        self.log: KafkaLog = KafkaLog(
            state_dir,
            bootstrap_servers=bootstrap_servers,
            client_config=client_config,
            timeout_s=timeout_s,
            outage_s=outage_s,
        )

    @classmethod
    def from_config(
        cls, props: Mapping[str, str], state_dir: str | os.PathLike[str], *, default_queues: int = 8
    ) -> KafkaBus:
        """Build from worker keys: ``bootstrap.servers`` and ``kafka.*`` (passed through).

        Raises :class:`ConfigException` naming the key when one is missing or unknown to
        librdkafka.
        """
        servers = (props.get("bootstrap.servers") or "").strip()
        if not servers:
            raise ConfigException("bootstrap.servers", "required key is missing (bus=kafka)")
        client = {k[len(_PREFIX) :]: v for k, v in props.items() if k.startswith(_PREFIX)}
        for key in ("bootstrap.servers", "logger", "on_delivery", "error_cb"):
            if key in client:
                raise ConfigException(_PREFIX + key, "cannot be set here")
        _validate(servers, client)
        return cls(
            state_dir,
            bootstrap_servers=servers,
            client_config=client,
            default_queues=default_queues,
            outage_s=outage_seconds(props),
        )


def _validate(servers: str, client: dict[str, str]) -> None:
    """Let librdkafka check every pass-through property (no connection is made)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    for key, value in client.items():
        try:
            AdminClient({"bootstrap.servers": servers, key: value})
        except KafkaException as exc:
            raise ConfigException(_PREFIX + key, exc.args[0].str()) from None
