"""The MQTT connection settings both MQTT connectors share, topic checks, and the errors they raise.

sluice speaks **MQTT 5** (paho-mqtt 2.x): its user properties carry a record's headers and key,
its session expiry interval keeps the source's session while the worker is away, and its receive
maximum lets the broker send more than a handful of unacknowledged messages. A broker that only
speaks 3.1.1 refuses the connection (the error says so).

`mqtt.url` is ``tcp://host:port`` (or ``mqtt://``; RocketMQ Connect's `mqttBrokerUrl`);
`mqtt.username` / `mqtt.password` (its `mqttAccessKey` / `mqttSecretKey`) authenticate.
paho runs its network loop in a thread of its own and reconnects by itself, with backoff
(``reconnect_delay_set``); while it is disconnected the connectors raise `RetriableException`, so
the runtime backs off too and the connector's error counters show the retries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sluice.sdk import ConfigException, ConfigKey, ConnectException, RetriableException
from sluice.sdk.extras import MQTT, require

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
# CONNACK reason codes that mean "these credentials will never do" (MQTT 5, 3.2.2.2)
_REFUSED_CREDENTIALS = {134, 135}

#: The longest wait between paho's reconnection attempts (it doubles from 1 s): a broker back
#: from an outage is met within it.
RECONNECT_MAX_S = 10


def paho() -> Any:
    """paho-mqtt's client module (the ``mqtt`` extra), or an error naming the install line."""
    return require(MQTT, "the MQTT connectors")


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

    def connect(
        self,
        client_id: str,
        *,
        session_expiry_s: int = 0,
        receive_maximum: int = 65535,
        max_inflight: int = 20,
        on_connect: Callable[[Any, bool], None] | None = None,
        on_message: Callable[[Any], None] | None = None,
    ) -> Any:
        """A connected client whose network loop runs (a thread of paho's); a persistent session
        when `session_expiry_s` > 0 (MQTT 5 ``clean_start=false``). Refused credentials →
        ConfigException; unreachable → RetriableException.

        `on_connect(client, session_present)` runs after every (re)connection; session_present:
        the broker kept the session (and resends what it had sent but saw no acknowledgement
        of)."""
        mqtt = paho()
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=on_message is not None,
        )
        if self.username:
            client.username_pw_set(self.username, self.password)
        # paho does not follow the receive maximum the broker states in its CONNACK, and past it
        # Mosquitto refuses QoS 2 publishes in a PUBREC whose reason paho ignores: the message
        # is lost though paho reports it published. So `max_inflight` must stay within it.
        client.max_inflight_messages_set(max_inflight)
        client.max_queued_messages_set(0)
        client.reconnect_delay_set(1, RECONNECT_MAX_S)
        answered = threading.Event()
        result: list[Any] = []
        allowed: list[int] = []

        def connected(c: Any, _u: Any, flags: Any, reason: Any, props: Any) -> None:
            if not reason.is_failure and on_connect is not None:
                on_connect(c, bool(flags.session_present))
            result.append(reason)
            allowed.append(getattr(props, "ReceiveMaximum", 65535))
            answered.set()

        client.on_connect = connected
        if on_message is not None:
            client.on_message = lambda _c, _u, message: on_message(message)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = session_expiry_s
        props.ReceiveMaximum = receive_maximum
        try:
            client.connect(
                self.host,
                self.port,
                self.keepalive,
                clean_start=session_expiry_s == 0,
                properties=props,
            )
        except OSError as exc:
            raise RetriableException(f"{URL}={self.where}: connecting: {exc}") from None
        client.loop_start()
        if not answered.wait(self.timeout_s) or result[-1].is_failure:
            client.loop_stop()
            client.disconnect()
            self._refused(result[-1] if result else None)
        if allowed[-1] < max_inflight:
            client.disconnect()
            client.loop_stop()
            raise ConfigException(
                "mqtt.max.inflight",
                f"{max_inflight} is more than the {allowed[-1]} unacknowledged publishes "
                f"{self.where} accepts (its receive maximum)",
                suggestion=f"set mqtt.max.inflight to {allowed[-1]} or less",
            )
        return client

    def _refused(self, reason: Any) -> None:
        if reason is None:
            raise RetriableException(f"{URL}={self.where}: no CONNACK in {self.timeout_s} s")
        if reason.value in _REFUSED_CREDENTIALS:
            raise ConfigException(
                "mqtt.password",
                f"{self.where} refused the connection: {reason}",
                suggestion="check mqtt.username / mqtt.password",
            )
        raise ConnectException(f"{URL}={self.where}: the broker refused the connection: {reason}")

    def probe(self, client_id: str, max_inflight: int = 20) -> None:
        """Connect once and leave (driver, in `validate`) with a client id of its own (a clean
        start under the source's id would end the source's session); unreachable →
        ConfigException."""
        try:
            client = self.connect(f"{client_id}-probe", max_inflight=max_inflight)
        except RetriableException as exc:
            raise ConfigException(URL, f"cannot reach the MQTT broker: {exc}") from None
        client.disconnect()
        client.loop_stop()
