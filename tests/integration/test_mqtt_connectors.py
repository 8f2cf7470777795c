"""The MQTT connectors on the Mosquitto of `scripts/servers.sh` (started on demand): topic filters
with wildcards copied through a topic to MQTT topics at QoS 1 and 2 (retained), keys, user
properties and non-ASCII payloads intact, acknowledged only after commit; the same at QoS 0 end
to end (source subscribed at 0, messages published at 0, sink publishing at 0), beside them on
the same runner; and the configuration errors."""

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
from tests.e2e.topics import topic_count, topic_rows
from tests.integration.test_redis_connectors import _value
from tests.servers import ensure

pytestmark = pytest.mark.spark

N = 2000
N0 = 300  # the QoS 0 round trip
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
    qos0 = mqtt_helpers.Collector(port, f"out-{TAG}/q0/#")
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
        _start_qos0(runner, raw)
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
            _check_copy(copy.received, f"out-{TAG}/q{qos}/sensors", kept)
        # QoS 2 with the retained flag: a subscriber that comes later gets the last message
        late = mqtt_helpers.Collector(port, f"out-{TAG}/q2/#")
        wait_until(lambda: late.count() == 1, 30, "the retained message")
        assert late.received[0][3] is True
        late.close()

        # messages published while it runs are copied too
        mqtt_helpers.publish(port, [(topics[0], "später".encode(), {"seq": str(N)})])
        wait_until(lambda: copies[1].count() == len(kept) + 1, 60, "the late copy")
        assert copies[1].received[-1][1] == "später".encode()
        _check_qos0(runner, port, qos0, root)
    finally:
        runner.stop("min")  # before its session ends
        runner.stop("min0")
        for c in [*copies.values(), qos0]:
            c.close()
        mqtt_helpers.publish(port, [(f"out-{TAG}/q2/sensors", b"", None)])  # clear retained
        for session in (client_id, f"sluice-min0-{TAG}"):
            mqtt_helpers.session(port, session, [], end=True)


def _check_copy(received: list, topic: str, seqs: list[int]) -> None:
    """Each of `seqs` once at `topic`, each key's in order, payload and properties intact."""
    seen = collections.Counter()
    last: dict[str | None, int] = {}
    for topic_out, payload, props, retained in received:
        i = int(props["seq"])
        seen[i] += 1
        key = props.get("Sluice-Key")
        assert last.get(key, -1) < i  # each key's messages in order
        last[key] = i
        assert (topic_out, payload, retained) == (topic, _value(i), False)
        assert props == _props(i)  # (the source's mqtt.topic note is not published)
    assert sorted(seen) == seqs and set(seen.values()) == {1}


def _start_qos0(runner: ConnectorRunner, raw: dict[str, str]) -> None:
    """MQTT (QoS 0 subscription) → topic `sensors0` → MQTT (QoS 0 publishes)."""
    runner.start(
        "min0",
        {
            **raw,
            "connector.class": "MqttSourceConnector",
            "mqtt.topics": f"in0-{TAG}/#",
            "mqtt.qos": "0",
            "mqtt.client.id": f"sluice-min0-{TAG}",
            "connect.topicname": "sensors0",
        },
    )
    runner.start(
        "mout0",
        {
            **raw,
            "connector.class": "MqttSinkConnector",
            "connect.topicnames": "sensors0",
            "mqtt.topic.format": f"out-{TAG}/q0/${{topic}}",
            "mqtt.qos": "0",
        },
    )


def _check_qos0(runner: ConnectorRunner, port: int, copy: mqtt_helpers.Collector, root: Path):
    """At QoS 0 the broker keeps nothing for a subscriber that is not there: wait until a probe
    message makes it through (the source is subscribed), then copy N0 messages, each once and
    intact, delivered to the copy's subscriber at QoS 0."""
    topic = f"in0-{TAG}/sensor/1"

    def through() -> bool:
        healthy(runner)
        mqtt_helpers.publish(port, [(topic, b"probe", {"seq": "-1"})], qos=0)
        return copy.count() > 0

    wait_until(through, 120, "a QoS 0 message through the QoS 0 copy", every=1)
    mqtt_helpers.publish(port, [(topic, _value(i), _props(i)) for i in range(N0)], qos=0)

    def copied() -> list[tuple[str, bytes, dict[str, str], bool]]:
        healthy(runner)
        return [m for m in copy.received if m[1] != b"probe"]

    wait_until(lambda: len(copied()) >= N0, 120, f"{N0} QoS 0 messages copied", every=0.5)
    _check_copy(copied(), f"out-{TAG}/q0/sensors0", list(range(N0)))
    assert set(copy.qos) == {0}  # the sink published at QoS 0
    values = [r["value"] for r in topic_rows(root, "sensors0")]
    assert sorted(v for v in values if v != b"probe") == sorted(_value(i) for i in range(N0))


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
        (MqttSourceConnector, {**good, "mqtt.qos": "2"}, r"mqtt.qos: a QoS 2 subscription is not"),
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
