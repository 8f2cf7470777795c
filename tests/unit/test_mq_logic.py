"""Pure logic of the NATS and MQTT connectors: settings, topic filters, where a row goes, errors,
how a sequence range is cut."""

from __future__ import annotations

import re

import nats
import pytest

from sluice.connectors._messaging import Row, addressed
from sluice.connectors.mqtt._config import CONNECTION_KEYS as MQTT_KEYS
from sluice.connectors.mqtt._config import Settings as MqttSettings
from sluice.connectors.mqtt._config import check_filter, check_topic
from sluice.connectors.nats._client import failure as nats_failure
from sluice.connectors.nats._config import CONNECTION_KEYS as NATS_KEYS
from sluice.connectors.nats._config import Settings as NatsSettings
from sluice.connectors.nats.source import NatsSourceTask, _check_still_there
from sluice.sdk import ConfigDef, ConfigException, ConnectException, RetriableException


def test_mqtt_filters_and_topics() -> None:
    for good in ("a", "a/b", "+", "#", "a/+/c", "a/#", "+/+/#", "$share/g/a/+", "ä/ü"):
        check_filter("mqtt.topics", good)
    for bad, why in [
        ("", "empty"),
        ("a/#/c", "'#' must be a whole level and the last"),
        ("a#", "'#' must be"),
        ("a/b+", "'+' must be a whole level"),
        ("a\0b", "NUL"),
    ]:
        with pytest.raises(ConfigException, match=f"mqtt.topics: .*{re.escape(why)}"):
            check_filter("mqtt.topics", bad)
    check_topic("k", "out/x")
    for bad in ("", "out/+", "out/#"):
        with pytest.raises(ConfigException, match=r"k: .* is not a topic to publish to"):
            check_topic("k", bad)


def test_mqtt_settings() -> None:
    keys = ConfigDef(*MQTT_KEYS)
    s = MqttSettings.of(keys.parse({"mqtt.url": "tcp://h:1884", "mqtt.timeout.ms": "500"}))
    assert (s.host, s.port, s.timeout_s, s.where) == ("h", 1884, 0.5, "tcp://h:1884")
    assert MqttSettings.of(keys.parse({"mqtt.url": "mqtt://h"})).port == 1883
    with pytest.raises(ConfigException, match=r"mqtt.url: expected tcp://host:port"):
        MqttSettings.of(keys.parse({"mqtt.url": "h:1883"}))
    with pytest.raises(ConfigException, match=r"mqtt.url: invalid port"):
        MqttSettings.of(keys.parse({"mqtt.url": "tcp://h:x"}))


def test_nats_settings_and_failures() -> None:
    keys = ConfigDef(*NATS_KEYS)
    s = NatsSettings.of(keys.parse({"nats.url": "nats://a:1, nats://b:2", "nats.token": "t"}))
    assert (s.servers, s.token, s.where) == (
        ("nats://a:1", "nats://b:2"),
        "t",
        "nats://a:1,nats://b:2",
    )
    with pytest.raises(ConfigException, match=r"nats.url: expected nats://"):
        NatsSettings.of(keys.parse({"nats.url": "http://a"}))
    gone = nats_failure(s, "reading", nats.errors.NoServersError())
    assert isinstance(gone, RetriableException) and "nats.url=nats://a:1" in str(gone)
    auth = nats_failure(s, "reading", nats.errors.AuthorizationError())
    assert isinstance(auth, ConfigException) and auth.key == "nats.password"
    other = nats_failure(s, "STREAM.INFO X", ValueError("boom"))
    assert type(other) is ConnectException and "STREAM.INFO X: boom" in str(other)


def test_where_a_row_goes() -> None:
    row = Row("orders", 3, 17, "schlüssel".encode(), b"v", {"h": "ü", "nats.subject": "in.x"})
    subject, headers = addressed(row, "out.${topic}.${key}", "f", "Sluice-Key", "nats.subject")
    assert subject == "out.orders.schlüssel"
    assert headers == {"h": "ü", "Sluice-Key": "schlüssel"}
    with pytest.raises(ConnectException, match=r"offset=17}: null key, which f='x.\$\{key\}'"):
        addressed(row._replace(key=None), "x.${key}", "f", "K", "")
    with pytest.raises(ConnectException, match="its key is not UTF-8 text"):
        addressed(row._replace(key=b"\xff"), "x", "f", "K", "")


def test_nats_ranges() -> None:
    task = NatsSourceTask()
    assert task.split({"stream": "S"}, {"seq": 10}, {"seq": 20}, 2) == [{"seq": 15}]
    assert task.split({"stream": "S"}, None, {"seq": 3}, 8) == [{"seq": 1}, {"seq": 2}]
    _check_still_there("S", committed=5, first=6, last=9)  # nothing missing
    _check_still_there("S", committed=9, first=20, last=9)  # purged after everything was read
    with pytest.raises(ConnectException, match=r"messages 6..7 of stream 'S' were removed"):
        _check_still_there("S", committed=5, first=8, last=9)
    with pytest.raises(ConnectException, match="ends at sequence 3, before the committed"):
        _check_still_there("S", committed=5, first=1, last=3)


def test_rocketmq_connect_keys_are_renamed() -> None:
    from sluice.connectors.mqtt import MqttSinkConnector, MqttSourceConnector
    from sluice.engine.settings import canonical_keys

    rocketmq = {"mqttBrokerUrl": "tcp://h:1", "mqttAccessKey": "u", "mqttSecretKey": "p"}
    source, errors = canonical_keys(
        {**rocketmq, "sourceTopic": "a/#"}, MqttSourceConnector.key_aliases
    )
    assert not errors
    assert source == {
        "mqtt.url": "tcp://h:1",
        "mqtt.username": "u",
        "mqtt.password": "p",
        "mqtt.topics": "a/#",
    }
    sink, _ = canonical_keys({"sinkTopic": "out/x"}, MqttSinkConnector.key_aliases)
    assert sink == {"mqtt.topic.format": "out/x"}
