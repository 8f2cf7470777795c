"""The bus: topics between source and sink queries, with embedded, Kafka and RocketMQ backends.

`sluice.bus.base` declares the interface of a backend (`TopicLog`, the shared types and errors);
`sluice.bus.spark` builds the topic writer and reader on it; `sluice.bus.facade` joins the two in
`Bus`, what the runtime holds; each backend is a subpackage
(`embedded`, `kafka`, `rocketmq`) whose client library is imported only when it is used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sluice.bus._worker_keys import ROCKETMQ_KEYS
from sluice.bus.base import (
    OUTAGE_KEY,
    REQUEST_KEY,
    STORED_SCHEMA,
    BusError,
    BusUnavailable,
    OffsetOutOfRange,
    QueueRange,
    StagedSegment,
    TopicInfo,
    TopicLog,
    UnknownTopic,
)
from sluice.bus.facade import Bus

__all__ = [
    "BUS_KINDS",
    "ROCKETMQ_KEYS",
    "STORED_SCHEMA",
    "Bus",
    "BusError",
    "BusUnavailable",
    "OffsetOutOfRange",
    "QueueRange",
    "StagedSegment",
    "TopicInfo",
    "TopicLog",
    "UnknownTopic",
    "create_bus",
    "is_bus_key",
]

BUS_KINDS = ("embedded", "rocketmq", "kafka")

# Worker keys each backend reads (besides bus.* and kafka.* / rocketmq.* prefixes).
_KAFKA_KEYS = frozenset({"bootstrap.servers", "bus.replication.factor", REQUEST_KEY})
_ROCKETMQ_KEYS = frozenset(ROCKETMQ_KEYS.keys)


def is_bus_key(key: str) -> bool:
    """Whether a worker config key configures a bus backend."""
    return (
        key in _KAFKA_KEYS
        or key in _ROCKETMQ_KEYS
        or key == OUTAGE_KEY
        or key.startswith(("kafka.", "rocketmq."))
    )


def create_bus(
    kind: str,
    props: Mapping[str, str],
    state_dir: str | os.PathLike[str],
    *,
    default_queues: int = 8,
) -> Bus:
    """The bus backend ``kind`` (the worker's ``bus=``), configured from worker keys ``props``.

    Nothing is connected or created on disk yet; a missing or bad key raises
    ``ConfigException`` naming it. ``state_dir`` is where the backend keeps local state: the
    embedded log itself, or a broker backend's staged rows and commit journal.
    """
    from sluice.sdk import ConfigException
    from sluice.sdk.extras import KAFKA, require

    if kind == "embedded":
        from sluice.bus.embedded import EmbeddedBus

        return EmbeddedBus(state_dir, default_queues=default_queues)
    if kind == "kafka":
        require(KAFKA, "bus=kafka", key="bus")  # before anything imports it
        from sluice.bus.kafka import KafkaBus

        return KafkaBus.from_config(props, state_dir, default_queues=default_queues)
    if kind == "rocketmq":
        from sluice.bus.rocketmq import RocketMQBus

        return RocketMQBus.from_config(props, state_dir, default_queues=default_queues)
    raise ConfigException("bus", f"must be one of {', '.join(BUS_KINDS)}, got {kind!r}")
