"""MqttSourceConnector: subscribes to MQTT topic filters in a persistent session, at-least-once.

Delivery: at-least-once. The connector's client keeps an MQTT 5 **persistent session**
(``clean_start=false``, session expiry ``mqtt.session.expiry.s``, default a week) and subscribes
with QoS ``mqtt.qos`` (default 1). Messages are taken with paho's *manual acknowledgement*: `poll`
(driver) hands over what arrived, and the ``PUBACK`` of each message is sent only in `commit`,
after the micro-batch that carried it committed. A worker that dies before that leaves the
messages unacknowledged in its session, and the broker sends them again when the connector
reconnects under the same client id: nothing is lost, a message may arrive twice. While the
worker is away the broker queues what arrives for the session; a broker that bounds that queue
drops the excess (Mosquitto's ``max_queued_messages``, 1000 by default: raise it, the servers
script sets 1,000,000). QoS 0 messages (a filter subscribed with ``mqtt.qos=0``, or published at
QoS 0) are not acknowledged nor kept: at-most-once.

The client asks for a receive maximum of ``mqtt.receive.maximum`` (default 65535, MQTT 5's
largest): the broker sends at most that many messages that are not yet acknowledged, and since
acknowledgements wait for a commit, it bounds a micro-batch too.

Topic filters: ``mqtt.topics`` (RocketMQ Connect's `sourceTopic`), separated by ``,`` or ``;``,
with wildcards (``sensors/+/temperature``, ``orders/#``); an invalid filter fails validation
naming the key. Filters are shared out over tasks (`max.tasks`); each task is one client (id
``mqtt.client.id``, default ``sluice-<connector>-<task>``) with its own session. Filters of two
tasks that overlap deliver their common messages twice.

Record mapping: the payload → value (BYTES); user property ``mqtt.key.property`` (default
``Sluice-Key``) → key (BYTES); every other user property → an extension (a name given twice keeps
its last value); the message's topic → extension ``mqtt.topic``; the time it arrived → timestamp.
Partition ``{"client": <client id>}``; offset ``{"mid": <packet id>, "qos": <qos>, "conn": <n>}``
(what the acknowledgement needs, n counting the client's reconnections; not a position to
resume from: the session is).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sluice.connectors._messaging import NamedSourceConnector
from sluice.connectors.mqtt._client import ALIASES, CONNECTION_KEYS, Settings, check_filter
from sluice.sdk import (
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    RetriableException,
    SourceTask,
)

TOPIC_EXTENSION = "mqtt.topic"
CONFIG = ConfigDef(
    *CONNECTION_KEYS,
    ConfigKey("mqtt.topics", type="list", doc="topic filters (wildcards + and #), , or ; apart"),
    ConfigKey("connect.topicname", doc="topic to write"),
    ConfigKey("mqtt.qos", default="1", choices=("0", "1", "2"), doc="subscription QoS"),
    ConfigKey(
        "mqtt.session.expiry.s", type="int", default=7 * 24 * 3600, min=1, doc="session expiry"
    ),
    ConfigKey("mqtt.receive.maximum", type="int", default=65535, min=1, doc="unacked in flight"),
    ConfigKey("mqtt.poll.max.records", type="int", default=20_000, min=1, doc="records per poll"),
)


def _client_id(values: Mapping[str, Any], connector: str, task: int) -> str:
    if values["mqtt.client.id"]:  # one client id per task: a second client would take it over
        return values["mqtt.client.id"] + (f"-{task}" if task else "")
    return f"sluice-{connector}-{task}"


class MqttSourceTask(SourceTask):
    """Buffers what its client receives; `poll` hands it over, `commit` acknowledges it."""

    def start(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.filters: list[str] = values["mqtt.topics"]
        self.topic: str = values["connect.topicname"]
        self.qos = int(values["mqtt.qos"])
        self.key_property: str = values["mqtt.key.property"]
        self.max_records: int = values["mqtt.poll.max.records"]
        self.client_id = _client_id(values, self.context.connector_name, self.context.task_id)
        self._arrived: deque[tuple[Any, float, int]] = deque()
        self._lock = threading.Lock()
        # which connection a message came on: a QoS 1 message is acknowledged on that one only
        self._connection = 0
        self._client = self.settings.connect(
            self.client_id,
            session_expiry_s=values["mqtt.session.expiry.s"],
            receive_maximum=values["mqtt.receive.maximum"],
            on_connect=self._connected,
            on_message=self._arrive,
        )
        self._client.on_disconnect = self._disconnected

    def _connected(self, client: Any, session_present: bool) -> None:
        if session_present:
            # The broker resends, under the same packet ids, the QoS 1 messages of the session
            # it saw no PUBACK for (MQTT 5, 4.4): those still buffered would come twice.
            with self._lock:
                self._arrived = deque(
                    a for a in self._arrived if a[0].qos != 1 or a[2] == self._connection
                )
        # also when the broker kept the session: subscribing again is harmless, and a filter
        # added to the config takes effect
        client.subscribe([(f, self.qos) for f in self.filters])

    def _disconnected(self, *_: Any) -> None:
        with self._lock:
            self._connection += 1

    def _arrive(self, message: Any) -> None:
        with self._lock:
            self._arrived.append((message, time.time(), self._connection))

    def poll(self) -> list[ConnectRecord]:
        # Disconnected: nothing more is handed over until paho reconnected (raising lets the
        # runtime back off and the task's status say so). What is still buffered could not be
        # acknowledged on this connection anyway; QoS 1 messages will come again.
        if not self._client.is_connected():
            raise RetriableException(
                f"mqtt.url={self.settings.where}: client {self.client_id} is not connected "
                "(paho is reconnecting)"
            )
        with self._lock:
            taken = [
                self._arrived.popleft() for _ in range(min(self.max_records, len(self._arrived)))
            ]
        return [self._record(*arrived) for arrived in taken]

    def _record(self, message: Any, at: float, connection: int) -> ConnectRecord:
        extensions = dict(getattr(message.properties, "UserProperty", None) or [])
        key = extensions.pop(self.key_property, None)
        extensions[TOPIC_EXTENSION] = message.topic
        return ConnectRecord(
            value=message.payload,
            key=key.encode() if key is not None else None,
            partition={"client": self.client_id},
            offset={"mid": message.mid, "qos": message.qos, "conn": connection},
            timestamp=datetime.fromtimestamp(at, tz=UTC),
            extensions=extensions,
            topic=self.topic,
        )

    def commit(self, records: list[ConnectRecord]) -> None:
        # In the order they arrived, as MQTT wants acknowledgements. A QoS 1 message of an
        # earlier connection is not acknowledged: the broker sent it again on this one (same
        # packet id), and that copy is acknowledged once its own batch committed; acknowledging
        # both could acknowledge a later message the broker gave the freed packet id to.
        # (QoS 2: the broker resends only the PUBREL, which the PUBCOMP answers.)
        with self._lock:
            connection = self._connection
        for record in records:
            offset = record.offset or {}
            qos = offset.get("qos")
            if qos == 2 or (qos == 1 and offset.get("conn") == connection):
                self._client.ack(offset["mid"], qos)

    def stop(self) -> None:
        # a plain DISCONNECT keeps the session (and its unacknowledged messages) for the next run
        self._client.disconnect()
        self._client.loop_stop()


class MqttSourceConnector(NamedSourceConnector):
    """Subscribes to MQTT topic filters in a persistent session and acknowledges each message
    after its micro-batch committed: at-least-once."""

    names_key = "mqtt.topics"
    config_def = CONFIG
    task_class = MqttSourceTask
    key_aliases = {**ALIASES, "sourceTopic": "mqtt.topics"}

    def validate(self, config: Mapping[str, str]) -> None:
        values = CONFIG.parse(config)
        if not values["mqtt.topics"]:
            check_filter("mqtt.topics", "")
        for topic_filter in values["mqtt.topics"]:
            check_filter("mqtt.topics", topic_filter)
        Settings.of(values).probe(_client_id(values, "validate", 0))


__all__ = ["MqttSourceConnector", "MqttSourceTask"]
