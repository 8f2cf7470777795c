"""MQTT connectors (MQTT 5, paho-mqtt): topic filters in through a persistent session,
acknowledged after commit (at-least-once); topics out with QoS 0/1/2 and the retained flag
(at-least-once with QoS 1/2). See docs/mqtt.md.

Example (library level)::

    runner.start("sensors-in", {
        "connector.class": "MqttSourceConnector", "mqtt.url": "tcp://127.0.0.1:1883",
        "mqtt.topics": "sensors/+/temperature", "connect.topicname": "sensors",
        "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
    runner.start("sensors-out", {
        "connector.class": "MqttSinkConnector", "mqtt.url": "tcp://127.0.0.1:1883",
        "connect.topicnames": "sensors", "mqtt.topic.format": "copy/${topic}", "mqtt.qos": "1",
        "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"})
"""

from sluice.connectors.mqtt.sink import MqttSinkConnector, MqttSinkTask
from sluice.connectors.mqtt.source import MqttSourceConnector, MqttSourceTask

__all__ = ["MqttSinkConnector", "MqttSinkTask", "MqttSourceConnector", "MqttSourceTask"]
