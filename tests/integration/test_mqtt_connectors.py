"""The MQTT connectors on the Mosquitto of `scripts/servers.sh` (started on demand): topic filters
with wildcards copied through a topic to MQTT topics at QoS 1 and 2 (retained), keys, user
properties and non-ASCII payloads intact, acknowledged only after commit; and the configuration
errors."""

from __future__ import annotations

import collections
import socket
import uuid
from pathlib import Path

import pytest

from sluice.connectors.mqtt import MqttSinkConnector, MqttSourceConnector
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests import mqtt_helpers
from tests.conftest import wait_until
from tests.e2e.outage import healthy
from tests.e2e.topics import topic_count
from tests.integration.test_redis_connectors import _value
from tests.servers import ensure

pytestmark = pytest.mark.spark

N = 2000
TAG = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def port() -> int:
    return int(ensure("mosquitto").rsplit(":", 1)[1])


def _props(i: int) -> dict[str, str]:
    props = {"region": f"zürich {i % 5}", "seq": str(i)}
    if i % 3:
        props["Sluice-Key"] = f"k-{i % 50} ключ"
    return props


def test_filters_through_a_topic_to_mqtt(runner: ConnectorRunner, port: int, tmp_path: Path):
    client_id = f"sluice-min-{TAG}"
    filters = [f"in-{TAG}/+/eu", f"in-{TAG}/us/#"]
    # the session exists before anything is published (as it does once the connector ran)
    mqtt_helpers.session(port, client_id, filters)
    topics = [f"in-{TAG}/orders/eu", f"in-{TAG}/us/east/1", f"in-{TAG}/orders/asia"]
    mqtt_helpers.publish(port, [(topics[i % 3], _value(i), _props(i)) for i in range(N)])
    kept = [i for i in range(N) if i % 3 != 2]  # asia matches no filter
    copies = {q: mqtt_helpers.Collector(port, f"out-{TAG}/q{q}/#") for q in (1, 2)}
    raw = {"mqtt.url": f"tcp://127.0.0.1:{port}", "key.converter": "ByteArrayConverter"}
    raw["value.converter"] = "ByteArrayConverter"
    try:
        runner.start(
            "min",
            {
                **raw,
                "connector.class": "org.apache.rocketmq.connect.mqtt.connector.MqttSourceConnector",
                "mqtt.topics": ";".join(filters),
                "mqtt.client.id": client_id,
                "connect.topicname": "sensors",
                "mqtt.poll.max.records": "500",
            },
        )
        for qos in (1, 2):
            runner.start(
                f"mout{qos}",
                {
                    **raw,
                    "connector.class": "MqttSinkConnector",
                    "connect.topicnames": "sensors",
                    "mqtt.topic.format": f"out-{TAG}/q{qos}/${{topic}}",
                    "mqtt.qos": str(qos),
                    "mqtt.retain": "true" if qos == 2 else "false",
                    "max.tasks": "2",
                },
            )

        def done() -> bool:
            healthy(runner)
            return all(c.count() >= len(kept) for c in copies.values())

        root = tmp_path / "store"
        try:
            wait_until(done, 240, f"{len(kept)} messages in both copies", every=0.5)
        except AssertionError as exc:
            counts = [c.count() for c in copies.values()]
            topic = topic_count(root, "sensors")
            raise AssertionError(f"{exc}: {topic} in the topic, {counts}") from None
        assert topic_count(root, "sensors") == len(kept)  # nothing taken twice without a crash
        for qos, copy in copies.items():
            seqs = collections.Counter()
            last: dict[str | None, int] = {}
            for topic, payload, props, retained in copy.received:
                i = int(props["seq"])
                seqs[i] += 1
                key = props.get("Sluice-Key")
                assert last.get(key, -1) < i  # each key's messages in order
                last[key] = i
                assert (topic, payload, retained) == (f"out-{TAG}/q{qos}/sensors", _value(i), False)
                assert props == _props(i)  # (the source's mqtt.topic note is not published)
            assert sorted(seqs) == kept and set(seqs.values()) == {1}
        # QoS 2 with the retained flag: a subscriber that comes later gets the last message
        late = mqtt_helpers.Collector(port, f"out-{TAG}/q2/#")
        wait_until(lambda: late.count() == 1, 30, "the retained message")
        assert late.received[0][3] is True
        late.close()

        # messages published while it runs are copied too
        mqtt_helpers.publish(port, [(topics[0], "später".encode(), {"seq": str(N)})])
        wait_until(lambda: copies[1].count() == len(kept) + 1, 60, "the late copy")
        assert copies[1].received[-1][1] == "später".encode()
    finally:
        runner.stop("min")  # before its session ends
        for c in copies.values():
            c.close()
        mqtt_helpers.publish(port, [(f"out-{TAG}/q2/sensors", b"", None)])  # clear retained
        mqtt_helpers.session(port, client_id, [], end=True)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_configuration_errors_name_the_key(port: int) -> None:
    url = f"tcp://127.0.0.1:{port}"
    good = {"mqtt.url": url, "mqtt.topics": "a/+/c", "connect.topicname": "t"}
    MqttSourceConnector().validate(good)
    MqttSinkConnector().validate({"mqtt.url": url, "connect.topicnames": "t"})
    cases = [
        (
            MqttSourceConnector,
            {**good, "mqtt.url": f"tcp://127.0.0.1:{_closed_port()}"},
            r"mqtt.url: cannot reach the MQTT broker",
        ),
        (MqttSourceConnector, {**good, "mqtt.url": "http://x"}, r"mqtt.url: expected tcp://"),
        (
            MqttSourceConnector,
            {**good, "mqtt.topics": "a/#/c"},
            r"mqtt.topics: 'a/#/c' is not a valid MQTT topic filter: '#' must be .* the last",
        ),
        (
            MqttSourceConnector,
            {**good, "mqtt.topics": "a/b+"},
            r"mqtt.topics: 'a/b\+' is not a valid MQTT topic filter: '\+' must be a whole level",
        ),
        (MqttSourceConnector, {**good, "mqtt.qos": "3"}, r"mqtt.qos: must be one of 0, 1, 2"),
        (MqttSourceConnector, {"mqtt.topics": "a"}, r"connect.topicname: required"),
        (
            MqttSinkConnector,
            {"mqtt.url": url, "connect.topicnames": "t", "mqtt.topic.format": "out/+"},
            r"mqtt.topic.format: 'out/\+' is not a topic to publish to",
        ),
        (
            MqttSinkConnector,
            {"mqtt.url": url, "connect.topicnames": "t", "mqtt.max.inflight": "1000"},
            r"mqtt.max.inflight: 1000 is more than the 20 unacknowledged publishes",
        ),
    ]
    for cls, config, message in cases:
        with pytest.raises(ConfigException, match=message):
            cls().validate(config)
