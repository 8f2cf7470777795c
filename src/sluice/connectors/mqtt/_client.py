"""The MQTT client both MQTT connectors use: a connected paho client made from `Settings`, and
the errors a connection raises.

sluice speaks **MQTT 5** (paho-mqtt 2.x): its user properties carry a record's headers and key,
its session expiry interval keeps the source's session while the worker is away, and its receive
maximum lets the broker send more than a handful of unacknowledged messages. A broker that only
speaks 3.1.1 refuses the connection (the error says so).

paho runs its network loop in a thread of its own and reconnects by itself, with backoff
(``reconnect_delay_set``); while it is disconnected the connectors raise `RetriableException`, so
the runtime backs off too and the connector's error counters show the retries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sluice.connectors.mqtt._config import URL, Settings
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk.extras import MQTT, require

# CONNACK reason codes that mean "these credentials will never do" (MQTT 5, 3.2.2.2)
_REFUSED_CREDENTIALS = {134, 135}

#: The longest wait between paho's reconnection attempts (it doubles from 1 s): a broker back
#: from an outage is met within it.
RECONNECT_MAX_S = 10


def paho() -> Any:
    """paho-mqtt's client module (the ``mqtt`` extra), or an error naming the install line."""
    return require(MQTT, "the MQTT connectors")


def connect(
    settings: Settings,
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
    if settings.username:
        client.username_pw_set(settings.username, settings.password)
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
            settings.host,
            settings.port,
            settings.keepalive,
            clean_start=session_expiry_s == 0,
            properties=props,
        )
    except OSError as exc:
        raise RetriableException(f"{URL}={settings.where}: connecting: {exc}") from None
    client.loop_start()
    if not answered.wait(settings.timeout_s) or result[-1].is_failure:
        client.loop_stop()
        client.disconnect()
        _refused(settings, result[-1] if result else None)
    if allowed[-1] < max_inflight:
        client.disconnect()
        client.loop_stop()
        raise ConfigException(
            "mqtt.max.inflight",
            f"{max_inflight} is more than the {allowed[-1]} unacknowledged publishes "
            f"{settings.where} accepts (its receive maximum)",
            suggestion=f"set mqtt.max.inflight to {allowed[-1]} or less",
        )
    return client


def _refused(settings: Settings, reason: Any) -> None:
    if reason is None:
        raise RetriableException(f"{URL}={settings.where}: no CONNACK in {settings.timeout_s} s")
    if reason.value in _REFUSED_CREDENTIALS:
        raise ConfigException(
            "mqtt.password",
            f"{settings.where} refused the connection: {reason}",
            suggestion="check mqtt.username / mqtt.password",
        )
    raise ConnectException(f"{URL}={settings.where}: the broker refused the connection: {reason}")


def probe(settings: Settings, client_id: str, max_inflight: int = 20) -> None:
    """Connect once and leave (driver, in `validate`) with a client id of its own (a clean
    start under the source's id would end the source's session); unreachable →
    ConfigException."""
    try:
        client = connect(settings, f"{client_id}-probe", max_inflight=max_inflight)
    except RetriableException as exc:
        raise ConfigException(URL, f"cannot reach the MQTT broker: {exc}") from None
    client.disconnect()
    client.loop_stop()
