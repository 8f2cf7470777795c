"""RocketMQ ACL on a real broker: a second name server + broker with ACL on
(`tests.integration.rocketmq_acl`), started for the session next to the ACL-free test broker.

The bus contract works with the right credentials; no credentials, an unknown access key, a
wrong secret and an account without permission on the topic fail with a message naming what is
wrong; the replicator copies a topic from (and to) the ACL broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.bus import BusError
from sluice.bus.rocketmq import RocketMQBus
from sluice.clients.rocketmq import RocketMQClient
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.integration import rocketmq_acl
from tests.integration.bus_helpers import ROCKETMQ_NAMESRV, read_all, topic_frame, unique
from tests.integration.rocketmq_acl import ADMIN, GRANTED_TOPIC, LOW, AclCluster

pytestmark = [pytest.mark.rocketmq]


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    """The ACL-enabled cluster, for this module's tests (stopped after them: its two JVMs, left
    idle for the rest of a session, took ~115 CPU-s of a CI run)."""
    cluster = rocketmq_acl.start(tmp_path_factory.mktemp("rocketmq-acl"))
    try:
        admin = cluster.client(ADMIN)
        admin.create_topic(GRANTED_TOPIC, 1)
        yield cluster
    finally:
        cluster.stop()


def _bus(cluster: AclCluster, state: Path, **keys: str) -> RocketMQBus:
    """A bus built from worker keys, as a worker builds it."""
    return RocketMQBus.from_config({"namesrvAddr": cluster.namesrv, **keys}, state)


def _admin_keys(secret: str = ADMIN.secret_key) -> dict[str, str]:
    return {"aclEnable": "true", "accessKey": ADMIN.access_key, "secretKey": secret}


def _commit(bus: RocketMQBus, frame: object, batch: int = 0) -> None:
    appender = bus.topic_appender(writer_id="w")
    appender.commit([appender.write(iter([frame]), 0)], batch)


def _topic_with_data(cluster: AclCluster, state: Path) -> str:
    bus = _bus(cluster, state, **_admin_keys())
    topic = unique("acl")
    bus.create_topic(topic, 2)
    _commit(bus, topic_frame(topic, [b"a", b"b", b"c"], route=[0, 0, 1]))
    bus.close()
    return topic


def test_bus_contract_with_the_right_credentials(acl_cluster: AclCluster, tmp_path: Path) -> None:
    bus = _bus(acl_cluster, tmp_path, **_admin_keys())
    try:
        bus.log.check()
        topic = unique("acl")
        assert bus.create_topic(topic, 2).queues == 2
        _commit(
            bus, topic_frame(topic, [b"a", b"b", b"c"], keys=[b"k", None, None], route=[0, 0, 1])
        )
        _commit(bus, topic_frame(topic, [b"d"], route=[0]), batch=1)
        assert bus.count(topic) == 4
        rows = read_all(bus, topic, 0, 1, 3)  # a range of queue 0
        assert [r["value"] for r in rows] == [b"b", b"d"]
        assert [r["queue_offset"] for r in rows] == [1, 2]
        assert read_all(bus, topic, 0, 0, 1)[0]["key"] == b"k"
        bus.log.commit_group_offsets("connect-acl", {(topic, 0): 3, (topic, 1): 1})
        assert bus.log.group_offsets("connect-acl", topic) == {0: 3, 1: 1}
    finally:
        bus.close()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {},
            r"the broker requires ACL credentials and none were given .*"
            r"\(set aclEnable=true, accessKey and secretKey\)",
        ),
        (
            {"aclEnable": "true", "accessKey": "nobody", "secretKey": "whatever-1"},
            r"the broker has no account accessKey 'nobody' .*\(check accessKey ",
        ),
        (
            _admin_keys(secret="wrong-secret-9"),
            r"the broker refused the request signature of accessKey 'sluiceAdmin': wrong secret "
            r"key .*\(check secretKey ",
        ),
    ],
    ids=["no-credentials", "unknown-access-key", "wrong-secret"],
)
def test_bad_credentials_are_named(
    acl_cluster: AclCluster, tmp_path: Path, keys: dict[str, str], message: str
) -> None:
    topic = _topic_with_data(acl_cluster, tmp_path / "admin")
    bus = _bus(acl_cluster, tmp_path / "bad", **keys)
    try:
        bus.log.check()  # the name server (no ACL on 4.9.x) answers anyone
        for attempt in (
            lambda: bus.log.offsets(topic),
            lambda: read_all(bus, topic, 0, 0, 2),
            lambda: _commit(bus, topic_frame(topic, [b"x"], route=[0])),
            lambda: bus.create_topic(unique("acl"), 1),
        ):
            with pytest.raises(BusError, match=message) as info:
                attempt()
            text = str(info.value)
            assert text.startswith(f"rocketmq namesrvAddr={acl_cluster.namesrv}: "), text
            assert "wrong-secret-9" not in text and "whatever-1" not in text
    finally:
        bus.close()


def test_an_account_without_permission_on_the_topic(
    acl_cluster: AclCluster, tmp_path: Path
) -> None:
    topic = _topic_with_data(acl_cluster, tmp_path / "admin")
    low = {"aclEnable": "true", "accessKey": LOW.access_key, "secretKey": LOW.secret_key}
    bus = _bus(acl_cluster, tmp_path / "low", **low)
    try:
        with pytest.raises(
            BusError, match=rf"accessKey 'sluiceLow' has no permission on topic '{topic}'"
        ) as info:
            read_all(bus, topic, 0, 0, 2)
        assert "grant it in the topicPerms / groupPerms of sluiceLow" in str(info.value)
        assert LOW.secret_key not in str(info.value)
        with pytest.raises(
            BusError, match=rf"accessKey 'sluiceLow' has no permission on topic '{topic}'"
        ):
            bus.log.commit_group_offsets("connect-low", {(topic, 0): 1})
        with pytest.raises(
            BusError,
            match=r"accessKey 'sluiceLow' is not an admin account, which creating a topic needs",
        ):
            bus.create_topic(unique("acl"), 1)
        # the topic it is granted: readable
        admin = acl_cluster.client(ADMIN)
        (queue,) = admin.queues(GRANTED_TOPIC)
        end = admin.send(GRANTED_TOPIC, queue, [(b"granted", {})])
        wait_until(lambda: admin.offsets(GRANTED_TOPIC, [queue])[queue][1] >= end, 30, "readable")
        assert read_all(bus, GRANTED_TOPIC, 0, end - 1, end)[0]["value"] == b"granted"
    finally:
        bus.close()


def _count(client: RocketMQClient, topic: str) -> int:
    queues = client.queues(topic, fresh=True)
    return sum(hi - lo for lo, hi in client.offsets(topic, queues).values()) if queues else 0


@pytest.mark.spark
def test_replicator_copies_a_topic_on_the_acl_broker(
    acl_cluster: AclCluster, runner: ConnectorRunner
) -> None:
    admin = acl_cluster.client(ADMIN)
    source = unique("aclsrc")
    queues = admin.create_topic(source, 2)
    for q in queues:
        admin.send(
            source, q, [(f"m{q.queue_id}-{i}".encode(), {"KEYS": f"k{i}"}) for i in range(5)]
        )
    acl = {"access.key": ADMIN.access_key, "secret.key": ADMIN.secret_key, "acl.enable": "true"}
    runner.start(
        "acl-in",
        {
            "connector.class": "RocketMQSourceConnector",
            "source.namesrv": acl_cluster.namesrv,
            "source.topics": source,
            "value.converter": "ByteArrayConverter",
            **{f"source.{k}": v for k, v in acl.items()},
        },
    )
    runner.start(
        "acl-out",
        {
            "connector.class": "RocketMQSinkConnector",
            "target.namesrv": acl_cluster.namesrv,
            "connect.topicnames": source,
            "topic.rename.format": "${topic}-copy",
            "value.converter": "ByteArrayConverter",
            **{f"target.{k}": v for k, v in acl.items()},
        },
    )

    def copied() -> bool:
        for running in runner.running.values():
            assert running.query.exception() is None, running.failure()
        return _count(admin, f"{source}-copy") >= 10

    wait_until(copied, 180, f"10 messages in {source}-copy", every=0.5)
    target = admin.queues(f"{source}-copy")
    bodies = sorted(
        m.body
        for q, (lo, hi) in admin.offsets(f"{source}-copy", target).items()
        for m in admin.pull(f"{source}-copy", q, lo, hi)
    )
    assert bodies == sorted(f"m{q}-{i}".encode() for q in range(2) for i in range(5))


def _source(cluster: AclCluster, topic: str, **acl: str) -> dict[str, str]:
    return {
        "connector.class": "RocketMQSourceConnector",
        "source.namesrv": cluster.namesrv,
        "source.topics": topic,
        **acl,
    }


def test_replicator_acl_errors_name_the_key(acl_cluster: AclCluster, tmp_path: Path) -> None:
    from sluice.connectors.rocketmq import RocketMQSinkConnector, RocketMQSourceConnector

    topic = _topic_with_data(acl_cluster, tmp_path)
    cases = [
        (
            _source(acl_cluster, topic),
            r"^source.acl.enable: .*requires ACL credentials and none were given.*"
            r"set source.acl.enable=true, source.access.key and source.secret.key",
        ),
        (
            _source(
                acl_cluster,
                topic,
                **{
                    "source.acl.enable": "true",
                    "source.access.key": ADMIN.access_key,
                    "source.secret.key": "wrong-secret-9",
                },
            ),
            r"^source.secret.key: .*signature of accessKey 'sluiceAdmin': wrong secret key",
        ),
        (
            _source(
                acl_cluster,
                topic,
                **{
                    "source.acl.enable": "true",
                    "source.access.key": LOW.access_key,
                    "source.secret.key": LOW.secret_key,
                },
            ),
            rf"^source.access.key: .*accessKey 'sluiceLow' has no permission on topic '{topic}'",
        ),
    ]
    for config, message in cases:
        with pytest.raises(ConfigException, match=message) as info:
            RocketMQSourceConnector().validate(config)
        assert "wrong-secret-9" not in str(info.value) and LOW.secret_key not in str(info.value)
    sink = {
        "connector.class": "RocketMQSinkConnector",
        "target.namesrv": acl_cluster.namesrv,
        "connect.topicnames": topic,
        "target.acl.enable": "true",
        "target.access.key": "nobody",
        "target.secret.key": "whatever-1",
    }
    with pytest.raises(
        ConfigException, match=r"^target.access.key: .*no account accessKey 'nobody'"
    ):
        RocketMQSinkConnector().validate(sink)


def test_the_main_test_broker_stays_acl_free() -> None:
    """The other RocketMQ tests use the main test broker unsigned: it must not require ACL."""
    client = RocketMQClient(ROCKETMQ_NAMESRV, credentials=None)
    client.check_access()
