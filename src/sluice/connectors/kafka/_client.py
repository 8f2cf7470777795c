"""confluent-kafka clients for the Kafka connectors: imported lazily, one per process and
configuration, errors translated to the SDK's with the config key named.

Client options pass through as ``source.kafka.<option>`` / ``target.kafka.<option>`` under the
worker's client policy (`sluice.sdk.KAFKA_CLIENT`: librdkafka options known to be safe; never
one that loads a library, an OpenSSL engine or provider, or runs a command).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from sluice.sdk import (
    ClientFamily,
    ClientOption,
    ConfigException,
    RetriableException,
    prefixed_options,
    refuse_unsafe,
)
from sluice.sdk.extras import KAFKA, require

log = logging.getLogger("sluice.connectors.kafka")
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def kafka() -> Any:
    """The confluent_kafka module (the ``kafka`` extra), or an error naming the install line."""
    return require(KAFKA, "the Kafka connectors")


def client_options(
    family: ClientFamily, config: Mapping[str, str], prefix: str
) -> list[ClientOption]:
    """The librdkafka options given as ``<prefix><option>`` keys (e.g. ``source.kafka.``)."""
    return prefixed_options(family, config, prefix)


def pass_through(config: Mapping[str, str], prefix: str, family: ClientFamily) -> dict[str, str]:
    """The client options given as ``<prefix><librdkafka option>``, refused if one loads code
    or runs a command (`refuse_unsafe`: whatever the worker's policy, and wherever the client
    is built, so a config stored before the policy existed is refused too)."""
    options = client_options(family, config, prefix)
    refuse_unsafe(options)
    return {o.name: o.value for o in options}


def _make(kind: str, config: Mapping[str, Any], key: str) -> Any:
    k = kafka()
    try:
        return (k.Consumer if kind == "consumer" else k.Producer)({**config, "logger": log})
    except (k.KafkaException, ValueError, TypeError) as exc:
        raise ConfigException(key, f"invalid client configuration: {exc}") from None


def client(kind: str, config: Mapping[str, Any], key: str) -> Any:
    """This process's ``Consumer`` or ``Producer`` for ``config`` (created on first use); an
    option librdkafka refuses is a `ConfigException` naming ``key``."""
    cache_key = (os.getpid(), kind, tuple(sorted((n, str(v)) for n, v in config.items())))
    with _LOCK:
        found = _CLIENTS.get(cache_key)
        if found is None:
            found = _CLIENTS[cache_key] = _make(kind, config, key)
    return found


@contextlib.contextmanager
def probe(config: Mapping[str, Any], key: str) -> Iterator[Any]:
    """A short-lived consumer for validation (closed afterwards, so an unreachable cluster
    does not leave a client reconnecting in the background)."""
    consumer = _make("consumer", {**config, "group.id": "sluice-probe"}, key)
    try:
        yield consumer
    finally:
        consumer.close()


def unavailable(key: str, servers: str, what: str, exc: object) -> RetriableException:
    return RetriableException(
        f"{key}={servers}: {what}: {exc}", suggestion="is the Kafka cluster up and reachable?"
    )
