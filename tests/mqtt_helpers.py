"""A small MQTT 5 client for tests and benchmarks (paho-mqtt): publish many messages with user
properties and wait for their acknowledgements, collect what a subscription receives, create or
end a persistent session."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

Publish = tuple[str, bytes, dict[str, str] | None]


def client(port: int, client_id: str = "", **login: str) -> mqtt.Client:
    """A connected MQTT 5 client (CONNACK received) whose network loop runs."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    if login:
        c.username_pw_set(login["username"], login["password"])
    c.max_inflight_messages_set(20)  # Mosquitto's receive maximum (see docs/mqtt.md)
    c.max_queued_messages_set(0)
    connected = threading.Event()
    reasons: list = []
    c.on_connect = lambda _c, _u, _f, reason, _p: (reasons.append(reason), connected.set())
    c.connect("127.0.0.1", port)
    c.loop_start()
    if not connected.wait(30) or reasons[-1].is_failure:
        raise RuntimeError(f"127.0.0.1:{port} did not accept the connection: {reasons}")
    return c


def publish(port: int, messages: list[Publish], qos: int = 1, **login: str) -> None:
    """Publish `(topic, payload, user properties)`s and wait for every acknowledgement."""
    c = client(port, **login)
    try:
        # in chunks: paho refuses to queue much more than ~65k messages (ERR_QUEUE_SIZE)
        for first in range(0, len(messages), 20_000):
            infos = []
            for topic, payload, props in messages[first : first + 20_000]:
                p = Properties(PacketTypes.PUBLISH)
                if props:
                    p.UserProperty = list(props.items())
                infos.append(c.publish(topic, payload, qos, properties=p))
            for info in infos:
                info.wait_for_publish(60)
    finally:
        c.disconnect()
        c.loop_stop()


class Collector:
    """Everything a subscription receives: `(topic, payload, user properties, retained)`."""

    def __init__(self, port: int, topic_filter: str, client_id: str = "", **login: str) -> None:
        """With a `client_id`, in a persistent session: paho reconnects after a broker restart
        and the broker sends what arrived meanwhile."""
        self.received: list[tuple[str, bytes, dict[str, str], bool]] = []
        #: how many messages came at each QoS (the lower of the publish's and the subscription's)
        self.qos: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        self.client.reconnect_delay_set(1, 2)
        if login:
            self.client.username_pw_set(login["username"], login["password"])
        subscribed = threading.Event()
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_connect = lambda c, *_: c.subscribe(topic_filter, 1)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600 if client_id else 0
        self.client.connect("127.0.0.1", port, clean_start=not client_id, properties=props)
        self.client.loop_start()
        if not subscribed.wait(30):
            raise RuntimeError(f"no SUBACK for {topic_filter}")

    def _on_message(self, _c: Any, _u: Any, m: Any) -> None:
        props = dict(getattr(m.properties, "UserProperty", None) or [])
        with self._lock:
            self.received.append((m.topic, m.payload, props, bool(m.retain)))
            self.qos[m.qos] += 1

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def session(
    port: int, client_id: str, filters: list[str], *, end: bool = False, **login: str
) -> None:
    """Create the persistent session of `client_id` subscribed to `filters` (so that what is
    published before the connector first runs waits for it), or end it (`end=True`)."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    if login:
        c.username_pw_set(login["username"], login["password"])
    done = threading.Event()
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0 if end else 3600
    on_done: Callable[..., None] = lambda *_: done.set()  # noqa: E731
    if end:
        c.on_connect = on_done
    else:
        c.on_connect = lambda cl, *_: cl.subscribe([(f, 1) for f in filters])
        c.on_subscribe = on_done
    c.connect("127.0.0.1", port, clean_start=end, properties=props)
    c.loop_start()
    try:
        if not done.wait(30):
            raise RuntimeError(f"session {client_id} not ready")
    finally:
        c.disconnect()
        c.loop_stop()
