"""The MQTT connectors' configuration: the connection keys both share (`CONNECTION_KEYS`,
RocketMQ Connect's names in `ALIASES`), the keys of the source (`SOURCE_CONFIG`) and the sink
(`SINK_CONFIG`), topic checks, and the connection `Settings` they are parsed into.

`mqtt.url` is ``tcp://host:port`` (or ``mqtt://``; RocketMQ Connect's `mqttBrokerUrl`);
`mqtt.username` / `mqtt.password` (its `mqttAccessKey` / `mqttSecretKey`) authenticate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sluice.sdk import ConfigDef, ConfigException, ConfigKey

URL = "mqtt.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="tcp://127.0.0.1:1883", doc="tcp://host:port (mqtt:// also)"),
    ConfigKey("mqtt.username", default="", doc="user name"),
    ConfigKey("mqtt.password", type="password", default="", doc="password"),
    ConfigKey("mqtt.client.id", default="", doc="client id (default: sluice-<connector>-<task>)"),
    ConfigKey("mqtt.keepalive.s", type="int", default=30, min=5, doc="keep-alive interval"),
    ConfigKey("mqtt.timeout.ms", type="int", default=10_000, min=1, doc="connect/ack timeout"),
    ConfigKey("mqtt.key.property", default="Sluice-Key", doc="user property of the record key"),
    ConfigKey(
        "mqtt.max.inflight",
        type="int",
        default=20,
        min=1,
        doc="QoS 1/2 publishes awaiting their ack (within the broker's receive maximum)",
    ),
)
#: RocketMQ Connect's MQTT keys (rocketmq-connect-mqtt), renamed by the runtime
ALIASES = {
    "mqttBrokerUrl": URL,
    "mqttAccessKey": "mqtt.username",
    "mqttSecretKey": "mqtt.password",
}
# paho answers a QoS 2 PUBLISH with PUBREC on arrival, manual acknowledgement or not; after that
# the broker resends only the PUBREL, which a restarted process drops: a kill between PUBREC and
# the commit would lose messages, so the source does not offer it (docs/mqtt.md).
_QOS_2 = (
    "a QoS 2 subscription is not at-least-once here (paho acknowledges it with PUBREC on "
    "arrival, before the commit): use 1, which delivers messages published at QoS 2 at QoS 1"
)

SOURCE_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("mqtt.topics", type="list", doc="topic filters (wildcards + and #), , or ; apart"),
    ConfigKey("connect.topicname", doc="topic to write"),
    ConfigKey(
        "mqtt.qos",
        default="1",
        choices=("0", "1", "2"),
        check=lambda qos: _QOS_2 if qos == "2" else None,
        doc="subscription QoS: 0 or 1",
    ),
    ConfigKey(
        "mqtt.session.expiry.s", type="int", default=7 * 24 * 3600, min=1, doc="session expiry"
    ),
    ConfigKey("mqtt.receive.maximum", type="int", default=65535, min=1, doc="unacked in flight"),
    ConfigKey("mqtt.poll.max.records", type="int", default=20_000, min=1, doc="records per poll"),
)

SINK_CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey("mqtt.topic.format", default="${topic}", doc="MQTT topic; ${topic}, ${key} replaced"),
    ConfigKey("mqtt.qos", default="1", choices=("0", "1", "2"), doc="publish QoS"),
    ConfigKey("mqtt.retain", type="bool", default=False, doc="set the retained flag"),
)


def check_filter(key: str, topic_filter: str) -> None:
    """An MQTT topic filter (MQTT 5, 4.7): ``+`` and ``#`` only as whole levels, ``#`` last."""
    problem = _filter_problem(topic_filter)
    if problem:
        raise ConfigException(key, f"{topic_filter!r} is not a valid MQTT topic filter: {problem}")


def _filter_problem(topic_filter: str) -> str:
    if not topic_filter:
        return "it is empty"
    if "\0" in topic_filter or len(topic_filter.encode()) > 65535:
        return "it has a NUL character or is longer than 65535 bytes"
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return "'#' must be a whole level and the last one (as in 'a/b/#')"
        if "+" in level and level != "+":
            return "'+' must be a whole level (as in 'a/+/c')"
    return ""


def check_topic(key: str, topic: str) -> None:
    """A topic to publish to: no wildcards, not empty."""
    if not topic or "+" in topic or "#" in topic or "\0" in topic:
        raise ConfigException(
            key, f"{topic!r} is not a topic to publish to (empty, or with a wildcard + or #)"
        )


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    host: str
    port: int
    username: str | None
    password: str | None
    keepalive: int
    timeout_s: float

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        url = values[URL]
        parts = urlsplit(url)
        if parts.scheme not in ("tcp", "mqtt") or not parts.hostname:
            raise ConfigException(URL, f"expected tcp://host:port, got {url!r}")
        if parts.query or parts.fragment or parts.path.strip("/"):
            # paho takes host and port only: options in the URL would be silently dropped
            raise ConfigException(
                URL,
                f"expected tcp://host:port, got {url!r}: sluice passes no client options "
                "from the URL (the MQTT connectors take none)",
            )
        try:
            port = parts.port or 1883
        except ValueError:
            raise ConfigException(URL, f"invalid port in {url!r}") from None
        return Settings(
            parts.hostname,
            port,
            values["mqtt.username"] or None,
            values["mqtt.password"] or None,
            values["mqtt.keepalive.s"],
            values["mqtt.timeout.ms"] / 1000,
        )

    @property
    def where(self) -> str:
        return f"tcp://{self.host}:{self.port}"
