"""`bus=kafka`: topics on a Kafka cluster, through confluent-kafka.

Worker keys::

    bus=kafka
    bootstrap.servers=broker1:9092,broker2:9092     # required
    kafka.security.protocol=SASL_SSL                 # kafka.<librdkafka property>: passed on
    kafka.request.timeout.ms=30000
    bus.outage.timeout.ms=300000                     # how long to ride out a broker outage
    bus.replication.factor=3                         # copies of a new topic (default: broker's)

Delivery: topic writes are exactly-once per micro-batch: each is one Kafka transaction of a
producer whose ``transactional.id`` is derived from the connector and its run, so a restarted
writer fences the old one (see `sluice.bus.kafka._log` for the argument); reads are exact offset
ranges (assign + position, `auto.offset.reset=error`) with ``isolation.level=read_committed``.
A sink's committed offsets are also committed under its consumer group (`connect-<connector>`),
so Kafka's tools show its lag. Topics are created through the admin API with
`bus.default.queues` partitions and `bus.replication.factor` copies; a cluster without the admin
API (librdkafka's mock cluster) creates them on first use with its default partition count.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sluice.bus._external import ExternalBus
from sluice.bus.base import outage_seconds, request_seconds
from sluice.bus.kafka._log import KafkaLog
from sluice.sdk import ConfigException

__all__ = ["KafkaBus", "KafkaLog"]

_PREFIX = "kafka."
RF_KEY = "bus.replication.factor"


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
        replication_factor: int = -1,
    ) -> None:
        self.default_queues = default_queues
        self.log: KafkaLog = KafkaLog(
            state_dir,
            bootstrap_servers=bootstrap_servers,
            client_config=client_config,
            timeout_s=timeout_s,
            outage_s=outage_s,
            replication_factor=replication_factor,
        )

    @classmethod
    def from_config(
        cls, props: Mapping[str, str], state_dir: str | os.PathLike[str], *, default_queues: int = 8
    ) -> KafkaBus:
        """Build from worker keys: ``bootstrap.servers``, ``bus.replication.factor``,
        ``bus.request.timeout.ms``, ``bus.outage.timeout.ms`` and ``kafka.*`` (passed through).

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
            timeout_s=request_seconds(props),
            outage_s=outage_seconds(props),
            replication_factor=replication_factor(props),
        )


def replication_factor(props: Mapping[str, str]) -> int:
    """The worker key ``bus.replication.factor``: copies of each topic the bus creates, a
    positive integer, or -1 (the default) for the broker's ``default.replication.factor``."""
    raw = str(props.get(RF_KEY, "-1")).strip()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigException(RF_KEY, f"expected an integer, got {raw!r}") from None
    if value == 0 or value < -1 or value > 32767:
        raise ConfigException(RF_KEY, f"must be -1 (the broker's default) or 1..32767, got {value}")
    return value


def _validate(servers: str, client: dict[str, str]) -> None:
    """Let librdkafka check every pass-through property (no connection is made)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    for key, value in client.items():
        try:
            AdminClient({"bootstrap.servers": servers, key: value})
        except KafkaException as exc:
            raise ConfigException(_PREFIX + key, exc.args[0].str()) from None
