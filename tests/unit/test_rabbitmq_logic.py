"""Pure logic of the RabbitMQ connectors: connection settings, error mapping, routing keys."""

from __future__ import annotations

import pika
import pytest

from sluice.connectors._messaging import Row
from sluice.connectors.rabbitmq._client import failure, header_text, parameters
from sluice.connectors.rabbitmq._config import CONNECTION_KEYS, Settings
from sluice.connectors.rabbitmq.sink import message_id, routing_key
from sluice.sdk import ConfigDef, ConfigException, ConnectException, RetriableException

KEYS = ConfigDef(*CONNECTION_KEYS)


def settings(**config: str) -> Settings:
    return Settings.of(KEYS.parse(config))


def test_url_or_rocketmq_keys() -> None:
    s = settings(**{"rabbitmq.url": "amqp://u:secret@h:5673/v", "rabbitmq.timeout.ms": "500"})
    assert (s.url, s.key, s.timeout_s, s.username) == (
        "amqp://u:secret@h:5673/v",
        "rabbitmq.url",
        0.5,
        None,
    )
    assert s.where == "amqp://u:********@h:5673/v"  # never the password
    params = parameters(settings(**{"rabbitmq.url": "amqp://u:p@h/v", "rabbitmq.password": "q"}))
    assert (params.credentials.username, params.credentials.password) == ("u", "q")
    s = settings(host="h", port="5674", username="a", password="b", virtualHost="/")
    assert (s.url, s.key, s.username, s.password) == ("amqp://h:5674/%2F", "host", "a", "b")
    with pytest.raises(ConfigException, match=r"rabbitmq.url: required key is missing"):
        settings()
    with pytest.raises(ConfigException, match=r"rabbitmq.url: expected amqp://"):
        settings(**{"rabbitmq.url": "h:5672"})


def test_failures_map_to_config_retriable_or_fatal() -> None:
    s = settings(**{"rabbitmq.url": "amqp://h/%2F"})
    auth = failure(
        s, "connecting", pika.exceptions.ProbableAuthenticationError("x"), at_create=True
    )
    assert isinstance(auth, ConfigException) and auth.key == "rabbitmq.password"
    vhost = failure(s, "connecting", pika.exceptions.ProbableAccessDeniedError("x"), at_create=True)
    assert isinstance(vhost, ConfigException) and vhost.key == "rabbitmq.url"
    definite = failure(s, "connecting", pika.exceptions.AuthenticationError("PLAIN"))
    assert isinstance(definite, ConfigException) and definite.key == "rabbitmq.password"
    # on a running task a connection lost mid-handshake is as likely the server going away
    for probable in (
        pika.exceptions.ProbableAuthenticationError("x"),
        pika.exceptions.ProbableAccessDeniedError("x"),
    ):
        err = failure(s, "connecting", probable)
        assert isinstance(err, RetriableException), err
        assert "rabbitmq.url=amqp://h/%2F" in str(err) and "going away" in str(err)
    lost = failure(s, "consuming", pika.exceptions.StreamLostError("gone"))
    assert isinstance(lost, RetriableException) and "rabbitmq.url=amqp://h/%2F" in str(lost)
    missing = pika.exceptions.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'q'")
    err = failure(s, "declaring", missing, name_key="rabbitmq.queues")
    assert isinstance(err, ConfigException) and err.key == "rabbitmq.queues"
    other = failure(s, "declaring", pika.exceptions.ChannelClosedByBroker(406, "PRECONDITION"))
    assert isinstance(other, ConnectException) and not isinstance(other, RetriableException)


def test_routing_keys_and_message_ids() -> None:
    row = Row("orders", 3, 17, "kä".encode(), b"v", {"region": "zürich"})
    assert message_id(row) == "orders/3/17"
    assert routing_key("${key}", row) == ("kä", "")
    assert routing_key("${topic}.${header.region}.${key}", row) == ("orders.zürich.kä", "")
    assert routing_key("${key}", row._replace(key=None))[0] is None
    key, why = routing_key("x.${header.missing}", row)
    assert key is None and "no header 'missing'" in why
    assert header_text(b"\xc3\xa4") == "ä" and header_text(7) == "7"
