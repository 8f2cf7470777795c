"""The Redis connectors' configuration: the connection keys every Redis connector shares, the
keys of the stream source (`STREAM_CONFIG`), the list source (`LIST_CONFIG`) and the sink
(`CONFIG`), and the connection `Settings` they are parsed into.

`redis.url` (``redis://[user:password@]host:port/db``, ``rediss://`` for TLS) is the one address;
RocketMQ Connect's ``redisAddr`` / ``redisPort`` / ``redisPassword`` / ``timeout`` keys are
accepted instead of it.

The URL's query parameters go to redis-py's connection (``rediss://h?ssl_ca_certs=/etc/ca.pem``)
under the worker's client policy (`sluice.sdk.REDIS_CLIENT`), and so does a ``unix://`` socket
path (a local file: inside `file.allowed.dirs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.sdk import (
    REDIS_CLIENT,
    ClientOption,
    ConfigDef,
    ConfigException,
    ConfigKey,
    redact_url,
    refuse_unsafe,
    url_options,
)

URL = "redis.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="", doc="redis://[user:password@]host:port/db (rediss:// for TLS)"),
    ConfigKey("redis.username", default="", doc="ACL user (overrides the URL's)"),
    ConfigKey("redis.password", type="password", default="", doc="password (overrides the URL's)"),
    ConfigKey("redis.timeout.ms", type="int", default=3000, min=1, doc="socket timeout"),
    # RocketMQ Connect's names, used when redis.url is not set
    ConfigKey("redisAddr", default="", doc="host (RocketMQ Connect name; redis.url is preferred)"),
    ConfigKey("redisPort", type="int", default=6379, min=1, doc="port (RocketMQ Connect name)"),
    ConfigKey("redisPassword", type="password", default="", doc="password (RocketMQ Connect name)"),
    ConfigKey("timeout", type="int", default=0, min=0, doc="timeout ms (RocketMQ Connect name)"),
)

STREAM_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("redis.streams", type="list", doc="stream keys to read, separated by , or ;"),
    ConfigKey("connect.topicname", default="", doc="topic to write (default: the stream's key)"),
    ConfigKey("stream.key.field", default="key", doc="entry field read as the record key"),
    ConfigKey("stream.value.field", default="value", doc="entry field read as the record value"),
)

LIST_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("redis.lists", type="list", doc="list keys to take from, separated by , or ;"),
    ConfigKey("connect.topicname", default="", doc="topic to write (default: the list's key)"),
    ConfigKey(
        "list.processing.key.format",
        default="${list}:sluice-processing:${connector}",
        doc="where taken elements wait for their commit (${list}, ${connector})",
    ),
    ConfigKey("list.poll.max.records", type="int", default=10_000, min=1, doc="per list, per poll"),
)

TYPES = ("stream", "list", "string", "hash")
SINK_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey(
        "redis.type", default="stream", choices=TYPES, doc="what to write: " + "|".join(TYPES)
    ),
    ConfigKey("redis.key.format", default="", doc="the Redis key; ${topic} and ${key} replaced"),
    ConfigKey("stream.key.field", default="key", doc="entry field that holds the record key"),
    ConfigKey("stream.value.field", default="value", doc="entry field that holds the value"),
    ConfigKey("stream.maxlen", type="int", default=0, min=0, doc="XADD MAXLEN ~ n (0: no trim)"),
    ConfigKey(
        "redis.offsets.key.format",
        default="sluice:offsets:${connector}:${topic}:${queue}",
        doc="where the next offset of each topic queue is kept (exactly-once)",
    ),
    ConfigKey("redis.batch.size", type="int", default=5000, min=1, doc="records per transaction"),
)


def client_options(config: Mapping[str, str]) -> list[ClientOption]:
    """What `redis.url` hands to redis-py besides its address: its query parameters, and the
    socket path of a ``unix://`` URL (`Connector.client_options`)."""
    url = config.get(URL, "").strip()
    if not url:
        return []  # redisAddr/redisPort make a URL without parameters
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigException(URL, f"cannot parse {redact_url(url)!r}: {exc}") from None
    params = parse_qsl(parts.query, keep_blank_values=True)
    if parts.scheme == "unix" and parts.path:
        params.append(("path", unquote(parts.path)))
    return url_options(REDIS_CLIENT, URL, params)


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    url: str
    key: str  # the config key that named the address, for error messages
    username: str | None
    password: str | None
    timeout_s: float

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        if values[URL]:
            url, key = values[URL], URL
            if not url.startswith(("redis://", "rediss://", "unix://")):
                raise ConfigException(URL, f"expected redis://host:port[/db], got {url!r}")
            refuse_unsafe(client_options({URL: url}))
        elif values["redisAddr"]:
            url, key = f"redis://{values['redisAddr']}:{values['redisPort']}/0", "redisAddr"
        else:
            raise ConfigException(URL, "required key is missing (or set redisAddr/redisPort)")
        password = values["redis.password"] or values["redisPassword"] or None
        timeout_ms = values["timeout"] or values["redis.timeout.ms"]
        return Settings(url, key, values["redis.username"] or None, password, timeout_ms / 1000)

    @property
    def where(self) -> str:
        return redact_url(self.url)
