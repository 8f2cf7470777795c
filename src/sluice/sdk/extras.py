"""Client libraries a plugin needs beyond sluice's core install, and the one way to ask for them.

sluice's core install carries Spark, the REST stack and what the file and JDBC connectors use;
each other family's client library is an extra (``pip install 'sluice[redis]'``). A plugin
states what it needs as `Requirement`s:

* a connector or converter class lists them in its ``requires`` class attribute; the runtime
  checks them with `problem` when a config is created or validated (driver, no import: the
  library is only looked up), so a missing one is a 400 naming ``connector.class`` (or
  ``value.converter``) and the install line, and the plugin list never imports it;
* the code that uses the library imports it with `require` (driver or executor, where the client
  is built), which raises the same message as a `ConfigException` if it is missing after all
  (a config stored before the library was uninstalled).

A third-party plugin declares its own: ``Requirement("boto3", "the AWS SDK", "pip install
boto3")``. The table below is sluice's own extras, one per family (see README, "Dependencies").
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from sluice.sdk._errors import ConfigException


@dataclass(frozen=True)
class Requirement:
    """A Python module a plugin imports that the core install may lack, and how to install it.

    `module` is the import name (``"paho.mqtt.client"``); `library` how a user knows it (``"the
    MQTT client (paho-mqtt)"``); `install` the command that brings it (``"pip install
    'sluice[mqtt]'"``).
    """

    module: str
    library: str
    install: str

    def available(self) -> bool:
        """Whether `module` can be found, without importing it (its parent packages are)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):  # a parent package is missing or broken
            return False

    def message(self, who: str) -> str:
        """``"<who> needs <library>: <install>"``: the text of every error about it."""
        return f"{who} needs {self.library}: {self.install}"


def extra(name: str, module: str, library: str) -> Requirement:
    """A requirement installed by sluice's extra `name` (``pip install 'sluice[name]'``)."""
    return Requirement(module, library, f"pip install 'sluice[{name}]'")


def problem(requirements: Iterable[Requirement], who: str) -> str | None:
    """The message for the first of `requirements` that is not installed, None if all are."""
    for requirement in requirements:
        if not requirement.available():
            return requirement.message(who)
    return None


def require(requirement: Requirement, who: str, key: str = "connector.class") -> ModuleType:
    """Import `requirement.module` and return it; when it (or a module it needs) is missing,
    a `ConfigException` naming `key` with ``"<who> needs <library>: <install>"``."""
    try:
        return importlib.import_module(requirement.module)
    except ImportError as exc:
        message = requirement.message(who)
        missing = exc.name or ""
        if missing and not (requirement.module + ".").startswith(missing + "."):
            message += f" (importing {requirement.module} failed: {exc})"
        raise ConfigException(key, message) from exc


# sluice's extras (pyproject.toml's [project.optional-dependencies]); the core install needs none
KAFKA = extra("kafka", "confluent_kafka", "the Kafka client (confluent-kafka)")
REDIS = extra("redis", "redis", "the redis client (redis-py)")
RABBITMQ = extra("rabbitmq", "pika", "the RabbitMQ client (pika)")
MQTT = extra("mqtt", "paho.mqtt.client", "the MQTT client (paho-mqtt)")
NATS = extra("nats", "nats", "the NATS client (nats-py)")
MYSQL_BINLOG = extra("cdc", "pymysqlreplication", "the MySQL binlog reader (mysql-replication)")
DELTA = extra("lake", "deltalake", "the Delta Lake library (deltalake)")
ICEBERG = extra("lake", "pyiceberg", "the Iceberg library (pyiceberg)")
HTTP = extra("http", "aiohttp", "the HTTP client (aiohttp)")
AVRO = extra("avro", "fastavro", "the Avro library (fastavro)")

__all__ = [
    "AVRO",
    "DELTA",
    "HTTP",
    "ICEBERG",
    "KAFKA",
    "MQTT",
    "MYSQL_BINLOG",
    "NATS",
    "RABBITMQ",
    "REDIS",
    "Requirement",
    "extra",
    "problem",
    "require",
]
