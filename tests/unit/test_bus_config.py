"""Choosing and configuring the bus from worker keys; errors name the key; an unreachable broker
is a retriable error naming its address (no broker needed for any of these)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from sluice.bus import BusUnavailable, create_bus
from sluice.bus.embedded import EmbeddedBus
from sluice.bus.kafka import KafkaBus
from sluice.bus.rocketmq import RocketMQBus
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException, RetriableException


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_default_bus_is_the_embedded_log_under_the_store_root(tmp_path: Path) -> None:
    conf = WorkerConfig.from_properties({"storePathRootDir": str(tmp_path)})
    bus = conf.create_bus()
    assert isinstance(bus, EmbeddedBus) and bus.root == str(tmp_path / "bus")


def test_kafka_bus_from_worker_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    props = {
        "storePathRootDir": str(tmp_path),
        "bus": "kafka",
        "bus.default.queues": "16",
        "bootstrap.servers": "k1:9092,k2:9092",
        "kafka.client.id": "sluice",
        "kafka.request.timeout.ms": "5000",
        "bus.request.timeout.ms": "8000",
        "bus.outage.timeout.ms": "60000",
    }
    with caplog.at_level(logging.WARNING):
        conf = WorkerConfig.from_properties(props)
    assert "unknown key" not in caplog.text
    bus = conf.create_bus()
    assert isinstance(bus, KafkaBus) and bus.default_queues == 16
    assert bus.log.bootstrap_servers == "k1:9092,k2:9092"
    assert bus.log.client_config == {"client.id": "sluice", "request.timeout.ms": "5000"}
    assert bus.log.state_dir == str(tmp_path / "bus")
    assert (bus.log.timeout_s, bus.log.outage_s) == (8.0, 60.0)


def test_rocketmq_bus_from_worker_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    props = {
        "storePathRootDir": str(tmp_path),
        "bus": "rocketmq",
        "namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876",
        "rmqProducerGroup": "p",
        "rmqConsumerGroup": "c",
        "operationTimeout": "3000",
        "maxMessageSize": "1048576",
        "rocketmq.cluster": "ClusterB",
    }
    with caplog.at_level(logging.WARNING):
        conf = WorkerConfig.from_properties(props)
    assert "unknown key" not in caplog.text
    bus = conf.create_bus()
    assert isinstance(bus, RocketMQBus)
    log = bus.log
    assert (log.namesrv_addr, log.producer_group, log.consumer_group) == (
        "10.0.0.1:9876;10.0.0.2:9876",
        "p",
        "c",
    )
    assert (log.timeout_s, log.max_message_size, log.cluster) == (3.0, 1048576, "ClusterB")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"bus": "kafka"}, "bootstrap.servers: required key is missing (bus=kafka)"),
        (
            {"bus": "kafka", "bootstrap.servers": "k:9092", "kafka.no.such": "1"},
            'kafka.no.such: No such configuration property: "no.such"',
        ),
        (
            {"bus": "kafka", "bootstrap.servers": "k:9092", "kafka.acks": "sometimes"},
            "kafka.acks: Invalid value",
        ),
        (
            {"bus": "kafka", "bootstrap.servers": "k:9092", "bus.request.timeout.ms": "0"},
            "bus.request.timeout.ms: must be at least 1, got 0",
        ),
        (
            {"bus": "kafka", "bootstrap.servers": "k:9092", "bus.outage.timeout.ms": "5m"},
            "bus.outage.timeout.ms: expected an integer, got '5m'",
        ),
        ({"bus": "rocketmq"}, "namesrvAddr: required key is missing (bus=rocketmq)"),
        ({"bus": "rocketmq", "namesrvAddr": "localhost"}, "namesrvAddr: expected host:port"),
        (
            {"bus": "rocketmq", "namesrvAddr": "h:9876", "operationTimeout": "soon"},
            "operationTimeout: expected an integer, got 'soon'",
        ),
        (
            {"bus": "rocketmq", "namesrvAddr": "h:9876", "aclEnable": "true"},
            "accessKey: required key is missing (aclEnable=true)",
        ),
        (
            {"bus": "rocketmq", "namesrvAddr": "h:9876", "aclEnable": "true", "accessKey": "ak"},
            "secretKey: required key is missing (aclEnable=true)",
        ),
        (
            {"bus": "rocketmq", "namesrvAddr": "h:9876", "aclEnable": "maybe"},
            "aclEnable: ",
        ),
    ],
)
def test_bad_bus_config_names_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigException) as info:
        WorkerConfig.from_properties(props)
    assert str(info.value).startswith(message), str(info.value)


def test_rocketmq_bus_acl_keys(tmp_path: Path) -> None:
    props = {
        "storePathRootDir": str(tmp_path),
        "bus": "rocketmq",
        "namesrvAddr": "10.0.0.1:9876",
        "aclEnable": "true",
        "accessKey": "ak",
        "secretKey": "s3cret-value",
    }
    bus = WorkerConfig.from_properties(props).create_bus()
    assert isinstance(bus, RocketMQBus)
    assert bus.log.credentials is not None
    assert (bus.log.credentials.access_key, bus.log.credentials.secret_key) == (
        "ak",
        "s3cret-value",
    )
    assert "s3cret" not in repr(bus.log.credentials)
    # without aclEnable the keys are ignored: requests are not signed
    props["aclEnable"] = "false"
    off = WorkerConfig.from_properties(props).create_bus()
    assert isinstance(off, RocketMQBus)
    assert off.log.credentials is None


def test_unknown_bus_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match=r"^bus: must be one of embedded, rocketmq, kafka"):
        create_bus("pulsar", {}, tmp_path)


def test_unreachable_rocketmq_name_server(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    bus = RocketMQBus(tmp_path, namesrv_addr=address, timeout_s=2)
    with pytest.raises(BusUnavailable, match=rf"^rocketmq namesrvAddr={address}: ") as info:
        bus.check()
    assert isinstance(info.value, RetriableException)
    assert "Connection refused" in str(info.value)
    with pytest.raises(BusUnavailable):
        bus.log.topic_exists("t")
