"""The NATS JetStream connectors on the real server of `scripts/servers.sh` (started on demand): a
stream copied through a topic into another stream with keys, headers and non-ASCII values intact,
a subject filter, and the configuration errors."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from sluice.connectors.nats import NatsSinkConnector, NatsSourceConnector
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException, ConnectException
from tests.conftest import wait_until
from tests.e2e.outage import healthy
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.topics import topic_count
from tests.integration.test_redis_connectors import _value
from tests.nats_helpers import Nats
from tests.servers import ensure

pytestmark = pytest.mark.spark

N = 2000
TAG = uuid.uuid4().hex[:8].upper()  # in every stream this module makes, so that it can remove them


@pytest.fixture(scope="module")
def url() -> str:
    return f"nats://{ensure('nats')}"


@pytest.fixture(scope="module")
def client(url: str):
    c = Nats(url)
    yield c
    for name in (f"IN{TAG}", f"OUT{TAG}", f"CFG{TAG}", f"REQ{TAG}"):
        c.delete_stream(name)  # the server is shared: leave it clean


def _headers(i: int) -> dict[str, str]:
    headers = {"region": f"zürich {i % 5}", "seq": str(i)}
    if i % 3:
        headers["Sluice-Key"] = f"k-{i % 50} ключ"
    return headers


def test_stream_through_a_topic_to_a_stream(
    runner: ConnectorRunner, client: Nats, url: str, tmp_path: Path
) -> None:
    source, target = f"IN{TAG}", f"OUT{TAG}"
    client.add_stream(source, [f"in{TAG}.>"])
    client.add_stream(target, [f"out{TAG}.>"])
    # every third message goes to a subject the filter leaves out
    client.publish(
        [
            (f"in{TAG}.{'skip' if i % 3 == 2 else 'orders'}.eu", _value(i), _headers(i))
            for i in range(N)
        ]
    )
    raw = {"nats.url": url, "key.converter": "ByteArrayConverter"}
    raw["value.converter"] = "ByteArrayConverter"
    runner.start(
        "nin",
        {
            **raw,
            "connector.class": "NatsSourceConnector",
            "nats.streams": source,
            "nats.subject": f"in{TAG}.orders.*",
            "connect.topicname": "orders",
            "read.max.rows": "700",  # several micro-batches
            "max.tasks": "2",  # and each range read in two halves
        },
    )
    runner.start(
        "nout",
        {
            **raw,
            "connector.class": "NatsSinkConnector",
            "connect.topicnames": "orders",
            "nats.subject.format": f"out{TAG}.${{topic}}",
            "max.tasks": "2",
        },
    )
    kept = [i for i in range(N) if i % 3 != 2]

    def done() -> bool:
        healthy(runner)
        return client.count(target) >= len(kept)

    wait_until(done, 240, f"{len(kept)} messages in the copy", every=0.5)
    copy = client.read(target)
    assert len(copy) == len(kept)
    seen = {}
    last: dict[str | None, int] = {}
    for m in copy:
        i = int(m.headers["seq"])
        key = m.headers.get("Sluice-Key")
        assert i not in seen and last.get(key, -1) < i  # once, each key's messages in order
        seen[i], last[key] = m, i
        assert m.subject == f"out{TAG}.orders"
        assert m.data == _value(i)
        assert m.headers.pop("Nats-Msg-Id").startswith("nout:")
        assert m.headers == _headers(i)
    assert sorted(seen) == kept
    assert topic_count(tmp_path / "store", "orders") == len(kept)  # once in the topic too

    # messages published while it runs are copied too
    client.publish([(f"in{TAG}.orders.us", "später".encode(), {"Sluice-Key": "late"})])
    wait_until(lambda: client.count(target) == len(kept) + 1, 60, "the late one", every=0.5)
    late = client.read(target)[-1]
    assert (late.data, late.headers["Sluice-Key"]) == ("später".encode(), "late")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_configuration_errors_name_the_key(client: Nats, url: str) -> None:
    client.add_stream(f"CFG{TAG}", [f"cfg{TAG}.>"])
    good = {"nats.url": url, "nats.streams": f"CFG{TAG}"}
    NatsSourceConnector().validate(good)
    NatsSinkConnector().validate(
        {"nats.url": url, "connect.topicnames": "a", "nats.subject.format": f"cfg{TAG}.${{topic}}"}
    )
    cases = [
        (
            NatsSourceConnector,
            {**good, "nats.url": f"nats://127.0.0.1:{_closed_port()}"},
            r"nats.url: cannot reach NATS at nats://127.0.0.1:\d+",
        ),
        (NatsSourceConnector, {**good, "nats.url": "http://x"}, r"nats.url: expected nats://"),
        (NatsSourceConnector, {"nats.url": url}, r"nats.streams: required"),
        (
            NatsSourceConnector,
            {**good, "nats.streams": f"NONE{TAG}"},
            rf"nats.streams: stream 'NONE{TAG}' does not exist",
        ),
        (
            NatsSinkConnector,
            {"nats.url": url, "connect.topicnames": "orders", "nats.subject.format": "nowhere.x"},
            r"nats.subject.format: no JetStream stream takes subject 'nowhere.x'",
        ),
    ]
    for cls, config, message in cases:
        with pytest.raises(ConfigException, match=message):
            cls().validate(config)


def test_pull_and_publish_requests(client: Nats, url: str) -> None:
    """`_jetstream`'s protocol-level pull and publish: positions as nats-py reads them, refusals
    mapped to the message they belong to, a status other than "no more" an error naming the
    stream; the reply subject's second layout (with a domain) read too."""
    import asyncio

    import nats

    from sluice.connectors.nats._jetstream import positions, publish, pull

    stream = f"REQ{TAG}"
    client.add_stream(stream, [f"req{TAG}.>"], max_msg_size=1000)

    async def work() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            messages = [
                (f"req{TAG}.{i}", b"v%d" % i, {"Nats-Msg-Id": f"id{i % 3}"}) for i in range(5)
            ]
            messages[1] = ("nowhere.at.all", b"x", {})
            messages[2] = (f"req{TAG}.big", b"x" * 2000, {})
            refused = await publish(nc, messages, 2, 10)
            assert sorted(refused) == [1, 2]
            assert isinstance(refused[1], nats.js.errors.NoStreamResponseError)
            assert "message size exceeds maximum" in str(refused[2])
            # ids 0 and 3 are one (id0): a duplicate is acknowledged, not refused, not stored
            # a pull from a push consumer: the server answers 409
            config = nats.js.api.ConsumerConfig(deliver_subject=nc.new_inbox())
            consumer = (await js.add_consumer(stream, config=config)).name
            with pytest.raises(ConnectException, match=rf"stream '{stream}': .* 409"):
                await pull(nc, stream, consumer, 5, 10)
            consumer = (await js.add_consumer(stream, nats.js.api.ConsumerConfig())).name
            msgs = await pull(nc, stream, consumer, 5, 10)  # fewer there: ends at "404"
            assert [m.data for m in msgs] == [b"v0", b"v4"]
            seqs, stamps = positions(msgs)
            assert seqs.to_pylist() == [m.metadata.sequence.stream for m in msgs]
            # nats-py goes through a float: a microsecond apart at most
            for stamp, m in zip(stamps.to_pylist(), msgs, strict=True):
                assert abs((stamp - m.metadata.timestamp).total_seconds()) <= 2e-6
        finally:
            await nc.close()

    asyncio.run(work())

    class Msg:  # a reply subject of a server with a JetStream domain (12 tokens)
        reply = "$JS.ACK.hub.ACCHASH.S.C.1.42.7.1700000000123456789.0.rnd"

    seqs, stamps = positions([Msg()])
    assert seqs.to_pylist() == [42]
    assert stamps.cast("int64").to_pylist() == [1_700_000_000_123_456]


@pytest.mark.parametrize("request_kind", ["pull", "publish"])
def test_a_request_whose_connection_is_lost_ends_at_once(
    client: Nats, url: str, request_kind: str
) -> None:
    """A pull (or a window of publishes) whose answer is on its way when the connection is lost
    ends with nats-py's `ConnectionClosedError`, which sluice retries: nats-py leaves the
    subscription's wait pending on a closed connection, and before the wait watched the
    connection the request ran out its whole timeout (here 300 s: `asyncio.TimeoutError`)."""
    import asyncio

    import nats

    from sluice.connectors.nats._jetstream import publish, pull

    stream = f"REQ{TAG}"
    client.add_stream(stream, [f"req{TAG}.>"], max_msg_size=1000)
    client.publish([(f"req{TAG}.lost", b"v", None)])
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))

    async def work() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{proxy.port}", allow_reconnect=False)
        try:
            js = nc.jetstream()
            consumer = (await js.add_consumer(stream, nats.js.api.ConsumerConfig())).name
            proxy.hold_replies()
            if request_kind == "pull":
                request = pull(nc, stream, consumer, 1, 300)
            else:
                request = publish(nc, [(f"req{TAG}.lost", b"w", {})], 1, 300)
            waiting = asyncio.ensure_future(request)
            held = await asyncio.to_thread(proxy.held.wait, 60)
            assert held, "the server's answer never reached the proxy"
            proxy.cut()
            with pytest.raises(nats.errors.ConnectionClosedError) as lost:
                await waiting
            cause: BaseException | None = lost.value
            while cause is not None:  # not the timeout, reported late as the lost connection
                assert not isinstance(cause, asyncio.TimeoutError)
                cause = cause.__context__
        finally:
            await nc.close()

    try:
        asyncio.run(work())
    finally:
        proxy.cut()
