"""MqttSinkConnector: publishes records to MQTT topics with QoS 0, 1 or 2 and the retained flag.

Delivery: at-least-once with ``mqtt.qos`` 1 or 2, which is the default (1). Each task publishes
its share of a micro-batch and waits until the broker acknowledged every message (``PUBACK`` for
QoS 1, ``PUBCOMP`` for QoS 2) before the batch may commit; a lost connection or a missing
acknowledgement is retried (``errors.retry.*``) by publishing the share again, and a replayed
micro-batch publishes again too. MQTT has no message id a broker deduplicates on across
publishes (QoS 2 is exactly-once for one publish only), so a subscriber may see a message twice.
With QoS 0 nothing is acknowledged: messages the broker never got are lost (at-most-once).

``mqtt.retain=true`` sets the retained flag: the broker keeps the last message of each topic for
subscribers that come later (one record per key with ``mqtt.topic.format=…/${key}`` makes the
topic a table of the latest value per key).

Unit of parallelism: one task per group of queues (`max.tasks`), each its own client.

Record mapping: value → payload (BYTES as they are, text as UTF-8, anything else as JSON; null →
an empty payload, which with ``mqtt.retain=true`` deletes the retained message); key → user
property ``mqtt.key.property`` (default ``Sluice-Key``; UTF-8 text); each extension → a user
property, except ``mqtt.topic`` (what `MqttSourceConnector` records of the message it read).
``mqtt.topic.format`` (RocketMQ Connect's `sinkTopic`) names the MQTT topic: ``${topic}`` and
``${key}`` are replaced (default ``${topic}``); it may not hold a wildcard.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Mapping
from typing import Any

from sluice.connectors._messaging import Row, RowSinkTask, addressed
from sluice.connectors.mqtt._client import connect, paho, probe
from sluice.connectors.mqtt._config import ALIASES, SINK_CONFIG, Settings, check_topic
from sluice.connectors.mqtt.source import TOPIC_EXTENSION
from sluice.sdk import (
    ConnectException,
    RetriableException,
    SinkConnector,
)
from sluice.sdk.extras import MQTT

_MADE_MAX = 10_000  # distinct user-property sets kept for reuse


class MqttSinkTask(RowSinkTask):
    """Publishes its share of each micro-batch and waits for every acknowledgement."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.topic_format: str = values["mqtt.topic.format"]
        self.qos = int(values["mqtt.qos"])
        self.retain: bool = values["mqtt.retain"]
        self.key_property: str = values["mqtt.key.property"]
        self.max_inflight: int = values["mqtt.max.inflight"]
        base = values["mqtt.client.id"] or f"sluice-{self.context.connector_name}"
        # Spark may run two partitions of one task id at once, and a second client with the same
        # id would take the first one's connection over: a sink needs no session, so make it unique
        self.client_id = f"{base}-{self.context.task_id}-{uuid.uuid4().hex[:8]}"
        self._client: Any = None
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self._empty = Properties(PacketTypes.PUBLISH)
        self._made: dict[tuple[tuple[str, str], ...], Any] = {}

    def _connected(self) -> Any:
        if self._client is None:
            self._client = connect(self.settings, self.client_id, max_inflight=self.max_inflight)
            self._client.on_publish = self._acknowledged
            self._refusals: dict[int, Any] = {}
        if not self._client.is_connected():
            raise RetriableException(
                f"mqtt.url={self.settings.where}: client {self.client_id} is not connected "
                "(paho is reconnecting)"
            )
        return self._client

    def _properties(self, headers: dict[str, str]) -> Any:
        """The PUBLISH properties carrying `headers` as user properties. paho's `Properties()`
        costs ~100 µs (it builds its tables each time: a third of the sink's time for small
        messages), so each distinct set is made once, from a copy of an empty one, and shared:
        paho only reads them when it packs a message."""
        items = tuple(headers.items())
        props = self._made.get(items)
        if props is None:
            props = copy.copy(self._empty)
            if items:
                props.UserProperty = list(items)
            if len(self._made) >= _MADE_MAX:
                self._made.clear()
            self._made[items] = props
        return props

    def write_rows(self, rows: list[Row]) -> None:
        client = self._connected()
        sent = []
        for row in rows:
            topic, headers = addressed(
                row, self.topic_format, "mqtt.topic.format", self.key_property, TOPIC_EXTENSION
            )
            if "+" in topic or "#" in topic or not topic:
                raise ConnectException(f"record {row.where}: cannot publish to topic {topic!r}")
            payload = row.value if row.value is not None else b""
            props = self._properties(headers)
            info = client.publish(topic, payload, self.qos, self.retain, properties=props)
            sent.append((info, row))
        mqtt = paho()
        for info, row in sent:
            if info.rc == mqtt.MQTT_ERR_SUCCESS:
                # if the connection went away, is_published() says it was not acknowledged
                with contextlib.suppress(RuntimeError, ValueError):
                    info.wait_for_publish(self.settings.timeout_s)
            if not info.is_published():
                raise RetriableException(
                    f"mqtt.url={self.settings.where}: record {row.where} was not acknowledged "
                    f"({mqtt.error_string(info.rc)}); the share is published again"
                )
            refused = self._refusals.pop(info.mid, None)
            if refused is not None:
                raise ConnectException(
                    f"mqtt.url={self.settings.where}: the broker refused record {row.where}: "
                    f"{refused}"
                )

    def _acknowledged(self, _c: Any, _u: Any, mid: int, reason: Any, _props: Any) -> None:
        # paho counts a PUBACK/PUBCOMP that refuses the message (not authorized, quota
        # exceeded…) as published: keep the refusals to fail the batch with
        if reason is not None and reason.is_failure:
            self._refusals[mid] = reason

    def stop(self) -> None:
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None


class MqttSinkConnector(SinkConnector):
    """Publishes records to MQTT topics (QoS 0/1/2, retained flag): at-least-once with QoS 1
    or 2."""

    config_def = SINK_CONFIG
    task_class = MqttSinkTask
    requires = (MQTT,)
    key_aliases = {**ALIASES, "sinkTopic": "mqtt.topic.format"}

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        fmt = values["mqtt.topic.format"]
        check_topic("mqtt.topic.format", fmt.replace("${topic}", "t").replace("${key}", "k"))
        settings = Settings.of(values)
        probe(settings, values["mqtt.client.id"] or "sluice-sink", values["mqtt.max.inflight"])

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


__all__ = ["MqttSinkConnector", "MqttSinkTask"]
