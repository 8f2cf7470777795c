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
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.connectors._messaging import NamedSourceConnector
from sluice.connectors.mqtt._client import RECONNECT_MAX_S, connect, probe
from sluice.connectors.mqtt._config import ALIASES, SOURCE_CONFIG, Settings, check_filter
from sluice.sdk import (
    HEADERS_TYPE,
    TIMESTAMP_TYPE,
    RetriableException,
    SourceTask,
)
from sluice.sdk.extras import MQTT
from sluice.sdk.retry import LoopReport, current_watcher

TOPIC_EXTENSION = "mqtt.topic"
# the columns of a polled batch that `commit` reads (the engine stages the frame's columns only)
MID, QOS, CONNECTION = "mqtt_mid", "mqtt_qos", "mqtt_connection"


def _client_id(values: Mapping[str, Any], connector: str, task: int) -> str:
    if values["mqtt.client.id"]:  # one client id per task: a second client would take it over
        return values["mqtt.client.id"] + (f"-{task}" if task else "")
    return f"sluice-{connector}-{task}"


class MqttSourceTask(SourceTask):
    """Buffers what its client receives; `poll` hands it over, `commit` acknowledges it."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
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
        # paho's own reconnection loop (in its thread) is this task's retry loop while the
        # broker is away: it reports to the task's status as it goes, even when the driver does
        # not call `poll` (every core busy with sinks that retry their writes). Set before
        # `connect`: paho calls `_connected` from its thread during it.
        self._outage: LoopReport | None = None
        self._client = connect(
            self.settings,
            self.client_id,
            session_expiry_s=values["mqtt.session.expiry.s"],
            receive_maximum=values["mqtt.receive.maximum"],
            on_connect=self._connected,
            on_message=self._arrive,
        )
        self._client.on_disconnect = self._disconnected
        self._client.on_connect_fail = self._reconnect_failed

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
        if self._outage is not None:
            self._outage.settled()

    def _disconnected(self, *_: Any) -> None:
        with self._lock:
            self._connection += 1
        self._reconnect_failed()

    def _reconnect_failed(self, *_: Any) -> None:
        if self._outage is not None:
            self._outage.retrying(self._not_connected(), RECONNECT_MAX_S)

    def _not_connected(self) -> RetriableException:
        return RetriableException(
            f"mqtt.url={self.settings.where}: client {self.client_id} is not connected "
            "(paho is reconnecting)"
        )

    def _arrive(self, message: Any) -> None:
        with self._lock:
            self._arrived.append((message, time.time(), self._connection))

    def poll(self) -> pa.RecordBatch:
        # Disconnected: nothing more is handed over until paho reconnected (raising lets the
        # runtime back off and the task's status say so). What is still buffered could not be
        # acknowledged on this connection anyway; QoS 1 messages will come again.
        if self._outage is None:  # the first poll runs where the task's status watcher is set
            self._outage = LoopReport(current_watcher())
        if not self._client.is_connected():
            raise self._not_connected()
        with self._lock:
            taken = [
                self._arrived.popleft() for _ in range(min(self.max_records, len(self._arrived)))
            ]
        return self._batch(taken)

    def _batch(self, taken: list[tuple[Any, float, int]]) -> pa.RecordBatch:
        """The messages as one Arrow batch: the frame's columns, built column by column (a
        `ConnectRecord` per message cost more than paho's own decoding), and what `commit`
        needs to acknowledge them (packet id, QoS, connection: not staged)."""
        keys: list[bytes | None] = []
        names: list[str] = []
        texts: list[str] = []
        ends = [0]
        for message, _, _ in taken:
            properties = dict(getattr(message.properties, "UserProperty", None) or ())
            key = properties.pop(self.key_property, None)
            keys.append(key.encode() if key is not None else None)
            properties[TOPIC_EXTENSION] = message.topic
            names += properties
            texts += properties.values()
            ends.append(len(names))
        n = len(taken)
        ends_array = pa.array(ends, pa.int32())
        names_array, texts_array = pa.array(names, pa.string()), pa.array(texts, pa.string())
        stamps = np.fromiter((at for _, at, _ in taken), np.float64, n) * 1e6
        columns = {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([m.payload for m, _, _ in taken], pa.binary()),
            "timestamp": pa.array(stamps.astype(np.int64), TIMESTAMP_TYPE),
            "headers": pa.MapArray.from_arrays(ends_array, names_array, texts_array, HEADERS_TYPE),
            MID: pa.array([m.mid for m, _, _ in taken], pa.int32()),
            QOS: pa.array([m.qos for m, _, _ in taken], pa.int8()),
            CONNECTION: pa.array([c for _, _, c in taken], pa.int64()),
        }
        return pa.RecordBatch.from_pydict(columns)

    def commit(self, records: pa.RecordBatch) -> None:
        # In the order they arrived, as MQTT wants acknowledgements. A QoS 1 message of an
        # earlier connection is not acknowledged: the broker sent it again on this one (same
        # packet id), and that copy is acknowledged once its own batch committed; acknowledging
        # both could acknowledge a later message the broker gave the freed packet id to.
        # (QoS 2: the broker resends only the PUBREL, which the PUBCOMP answers.)
        with self._lock:
            connection = self._connection
        mids = records.column(MID).to_pylist()
        levels = records.column(QOS).to_pylist()
        connections = records.column(CONNECTION).to_pylist()
        for mid, qos, conn in zip(mids, levels, connections, strict=True):
            if qos == 2 or (qos == 1 and conn == connection):
                self._client.ack(mid, qos)

    def stop(self) -> None:
        # a plain DISCONNECT keeps the session (and its unacknowledged messages) for the next run
        self._client.disconnect()
        self._client.loop_stop()


class MqttSourceConnector(NamedSourceConnector):
    """Subscribes to MQTT topic filters in a persistent session and acknowledges each message
    after its micro-batch committed: at-least-once."""

    names_key = "mqtt.topics"
    config_def = SOURCE_CONFIG
    task_class = MqttSourceTask
    requires = (MQTT,)
    key_aliases = {**ALIASES, "sourceTopic": "mqtt.topics"}

    def validate(self, config: Mapping[str, str]) -> None:
        super().validate(config)  # the keys' own checks (mqtt.qos), for direct callers too
        values = SOURCE_CONFIG.parse(config)
        if not values["mqtt.topics"]:
            check_filter("mqtt.topics", "")
        for topic_filter in values["mqtt.topics"]:
            check_filter("mqtt.topics", topic_filter)
        probe(Settings.of(values), _client_id(values, "validate", 0))


__all__ = ["MqttSourceConnector", "MqttSourceTask"]
