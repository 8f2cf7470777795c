"""The NATS connectors' configuration: the connection keys both share (`CONNECTION_KEYS`), the
keys of the source (`SOURCE_CONFIG`) and the sink (`SINK_CONFIG`), and the connection `Settings`
they are parsed into.

`nats.url` (``nats://host:port``, several separated by ``,``) is the address; `nats.username` /
`nats.password` or `nats.token` authenticate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.sdk import ConfigDef, ConfigException, ConfigKey

URL = "nats.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="nats://127.0.0.1:4222", doc="nats://host:port[,nats://host:port…]"),
    ConfigKey("nats.username", default="", doc="user name"),
    ConfigKey("nats.password", type="password", default="", doc="password"),
    ConfigKey("nats.token", type="password", default="", doc="authentication token"),
    ConfigKey("nats.timeout.ms", type="int", default=5000, min=1, doc="connect/request timeout"),
)

SOURCE_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("nats.streams", type="list", doc="JetStream streams to read, separated by , or ;"),
    ConfigKey("nats.subject", default="", doc="subject filter (wildcards allowed); default: all"),
    ConfigKey("connect.topicname", default="", doc="topic to write (default: the stream's name)"),
    ConfigKey("nats.key.header", default="Sluice-Key", doc="header read as the record key"),
    ConfigKey("nats.fetch.size", type="int", default=2000, min=1, doc="messages per pull request"),
)

SINK_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey("nats.subject.format", default="${topic}", doc="subject; ${topic}, ${key} replaced"),
    ConfigKey("nats.key.header", default="Sluice-Key", doc="header that carries the record key"),
)


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    servers: tuple[str, ...]
    username: str | None
    password: str | None
    token: str | None
    timeout_s: float

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        servers = tuple(s.strip() for s in values[URL].split(",") if s.strip())
        if not servers:
            raise ConfigException(URL, "required key is empty")
        for server in servers:
            if not server.startswith(("nats://", "tls://")):
                raise ConfigException(URL, f"expected nats://host:port, got {server!r}")
            if any(c in server for c in "?#"):
                # nats-py takes the address only: options in the URL would be silently dropped
                raise ConfigException(
                    URL,
                    f"expected nats://host:port, got {server!r}: sluice passes no client "
                    "options from the URL (the NATS connectors take none)",
                )
        return Settings(
            servers,
            values["nats.username"] or None,
            values["nats.password"] or None,
            values["nats.token"] or None,
            values["nats.timeout.ms"] / 1000,
        )

    @property
    def where(self) -> str:
        return ",".join(self.servers)
