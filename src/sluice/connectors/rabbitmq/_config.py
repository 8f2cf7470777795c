"""The RabbitMQ connectors' configuration: the connection keys every one shares
(`CONNECTION_KEYS`), the keys of the stream source (`STREAM_CONFIG`), the queue source
(`QUEUE_CONFIG`) and the sink (`SINK_CONFIG`), and the connection `Settings` they are parsed into.

`rabbitmq.url` (``amqp://user:password@host:port/vhost``, ``amqps://`` for TLS; the vhost ``/`` is
written ``%2F``) is the one address; RocketMQ Connect's ``host`` / ``port`` / ``username`` /
``password`` / ``virtualHost`` keys are accepted instead of it.

The URL's query parameters go to pika's `URLParameters` (``amqps://h?ssl_options={'cafile':
'/etc/ca.pem'}``) under the worker's client policy (`sluice.sdk.RABBITMQ_CLIENT`); each entry
of ``ssl_options`` is judged as ``ssl_options.<name>`` (its certificate and key files inside
`file.allowed.dirs`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from sluice.sdk import (
    RABBITMQ_CLIENT,
    ClientOption,
    ConfigDef,
    ConfigException,
    ConfigKey,
    redact_url,
    refuse_unsafe,
    url_options,
)

URL = "rabbitmq.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="", doc="amqp://user:password@host:port/vhost (amqps:// for TLS)"),
    ConfigKey("rabbitmq.username", default="", doc="user (overrides the URL's)"),
    ConfigKey(
        "rabbitmq.password", type="password", default="", doc="password (overrides the URL's)"
    ),
    ConfigKey("rabbitmq.timeout.ms", type="int", default=5000, min=1, doc="connect/socket timeout"),
    ConfigKey(
        "rabbitmq.heartbeat.s",
        type="int",
        default=300,
        min=0,
        doc="AMQP heartbeat (0: off); above the longest micro-batch, or unacked messages return",
    ),
    # RocketMQ Connect's names, used when rabbitmq.url is not set
    ConfigKey("host", default="", doc="host (RocketMQ Connect name; rabbitmq.url is preferred)"),
    ConfigKey("port", type="int", default=5672, min=1, doc="port (RocketMQ Connect name)"),
    ConfigKey("username", default="guest", doc="user (RocketMQ Connect name)"),
    ConfigKey("password", type="password", default="guest", doc="password (RocketMQ Connect name)"),
    ConfigKey("virtualHost", default="/", doc="virtual host (RocketMQ Connect name)"),
)
_COMMON = (
    *CONNECTION_KEYS,
    ConfigKey("connect.topicname", default="", doc="topic to write (default: the queue's name)"),
    ConfigKey(
        "rabbitmq.key.header", default="", doc="header read as the key (default: routing key)"
    ),
)
STREAM_CONFIG = ConfigDef(
    *_COMMON,
    ConfigKey("rabbitmq.queues", type="list", doc="stream queues, separated by , or ;"),
    ConfigKey("rabbitmq.prefetch.count", type="int", default=2000, min=1, doc="consumer credit"),
    ConfigKey(
        "rabbitmq.stream.wait.ms",
        type="int",
        default=500,
        min=1,
        doc="how long the driver waits for the last chunk of a stream (empty streams)",
    ),
)
QUEUE_CONFIG = ConfigDef(
    *_COMMON,
    ConfigKey("rabbitmq.queues", type="list", default="", doc="queues, separated by , or ;"),
    ConfigKey(
        "rabbitmq.prefetch.count",
        type="int",
        default=5000,
        min=2,
        doc="most unacknowledged messages held per queue (basic.qos)",
    ),
    # RocketMQ Connect's name for the queue
    ConfigKey("destinationName", default="", doc="queue (RocketMQ Connect name)"),
    ConfigKey("destinationType", default="queue", choices=("queue",), doc="RocketMQ Connect name"),
)
SINK_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey("rabbitmq.exchange", default="", doc="exchange to publish to ('' is the default)"),
    ConfigKey(
        "rabbitmq.routing.key.format",
        default="${key}",
        doc="routing key: ${key}, ${topic}, ${header.NAME} replaced",
    ),
    ConfigKey("rabbitmq.mandatory", type="bool", default=True, doc="unroutable → given up"),
    ConfigKey("rabbitmq.persistent", type="bool", default=True, doc="delivery_mode 2"),
    ConfigKey(
        "rabbitmq.publish.window",
        type="int",
        default=2000,
        min=1,
        doc="messages published before waiting for their confirms",
    ),
)


def client_options(config: Mapping[str, str]) -> list[ClientOption]:
    """What `rabbitmq.url` hands to pika besides its address: its query parameters, with each
    entry of ``ssl_options`` (a Python dict literal, as pika reads it) as ``ssl_options.<name>``
    (`Connector.client_options`)."""
    url = config.get(URL, "").strip()
    if not url:
        return []  # host/port/virtualHost make a URL without parameters
    try:
        params = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigException(URL, f"cannot parse {redact_url(url)!r}: {exc}") from None
    found = []
    for name, value in params:
        if name != "ssl_options":
            found.append((name, value))
            continue
        try:
            ssl = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            ssl = value  # not a literal: refused below
        if ssl is not None and not isinstance(ssl, dict):
            raise ConfigException(
                URL,
                "URL parameter 'ssl_options' must be a dict literal such as "
                "{'cafile': '/etc/ssl/ca.pem'} (or None)",
            )
        found += [(f"ssl_options.{k}", str(v)) for k, v in (ssl or {}).items()]
    return url_options(RABBITMQ_CLIENT, URL, found)


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    url: str
    key: str  # the config key that named the address, for error messages
    username: str | None
    password: str | None
    timeout_s: float
    heartbeat_s: int

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        user, password = values["rabbitmq.username"], values["rabbitmq.password"]
        if values[URL]:
            url, key = values[URL], URL
            if not url.startswith(("amqp://", "amqps://")):
                raise ConfigException(URL, f"expected amqp://host:port/vhost, got {url!r}")
            refuse_unsafe(client_options({URL: url}))
        elif values["host"]:
            vhost = quote(values["virtualHost"], safe="")
            url, key = f"amqp://{values['host']}:{values['port']}/{vhost}", "host"
            user, password = user or values["username"], password or values["password"]
        else:
            raise ConfigException(URL, "required key is missing (or set host/port)")
        timeout_s = values["rabbitmq.timeout.ms"] / 1000
        return Settings(
            url, key, user or None, password or None, timeout_s, values["rabbitmq.heartbeat.s"]
        )

    @property
    def where(self) -> str:
        return redact_url(self.url)
