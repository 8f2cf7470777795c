"""The Redis connectors on the real server of `scripts/servers.sh` (started on demand): a stream
copied through a topic into a stream, a list, string keys and a hash, keys, headers and
non-ASCII values intact; a list drained as a queue; and the configuration errors."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from sluice.bus.embedded import EmbeddedLog
from sluice.connectors.redis import RedisSinkConnector, RedisStreamSourceConnector
from sluice.connectors.redis.source import RedisListSourceConnector
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.e2e.crash_helpers import topic_count
from tests.servers import ensure

pytestmark = pytest.mark.spark

N = 2000


@pytest.fixture(scope="module")
def url() -> str:
    address = ensure("redis")
    return f"redis://{address}/0"


TAG = uuid.uuid4().hex[:8]  # in every key this module makes, so that it can remove them


@pytest.fixture(scope="module")
def client(url: str):
    import redis

    c = redis.Redis.from_url(url)
    yield c
    for key in c.scan_iter(f"*{TAG}*", count=1000):  # the server is shared: leave it clean
        c.delete(key)
    c.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{TAG}{uuid.uuid4().hex[:4]}"


def _healthy(runner: ConnectorRunner) -> None:
    for running in runner.running.values():
        assert running.failure() is None, running.failure()


def _value(i: int) -> bytes:
    return f"wert {i} - ünïcødé 日本".encode() + bytes([0, 255, i % 256])


def test_stream_to_stream_list_strings_and_hash(
    runner: ConnectorRunner, client, url: str, tmp_path: Path
) -> None:
    stream = _name("orders")
    for i in range(N):
        fields = {"value": _value(i), "region": f"zürich {i % 5}", "seq": str(i)}
        if i % 3:
            fields["key"] = f"k-{i % 50}"
        client.xadd(stream, fields)
    source_ids = [e[0] for e in client.xrange(stream)]
    base = {"redis.url": url, "value.converter": "ByteArrayConverter"}
    runner.start(
        "rin",
        {
            **base,
            "connector.class": "org.apache.rocketmq.connect.redis.connector.RedisSourceConnector",
            "redis.streams": stream,
            "connect.topicname": stream,
            "key.converter": "ByteArrayConverter",
        },
    )
    sinks = {"stream": "${topic}-copy", "list": "${topic}-list", "hash": "${topic}-hash"}
    for kind, fmt in sinks.items():
        runner.start(
            f"rout-{kind}",
            {
                **base,
                "connector.class": "RedisSinkConnector",
                "connect.topicnames": stream,
                "redis.type": kind,
                "redis.key.format": fmt,
                "key.converter": "ByteArrayConverter",
                "max.tasks": "2",
                # the hash needs a key: records without one are dead-lettered
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{stream}-{kind}-dlq",
            },
        )
    runner.start(
        "rout-string",
        {
            **base,
            "connector.class": "org.apache.rocketmq.connect.redis.connector.RedisSinkConnector",
            "redis.url": "",
            "redisAddr": url.split("//")[1].split(":")[0],
            "redisPort": url.rsplit(":", 1)[1].split("/")[0],
            "connect.topicnames": stream,
            "redis.type": "string",
            "redis.key.format": "str:${topic}:${key}",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": f"{stream}-string-dlq",
            "key.converter": "ByteArrayConverter",
        },
    )
    # without errors.tolerance, a record the sink cannot write fails it, named
    runner.start(
        "rout-strict",
        {
            **base,
            "connector.class": "RedisSinkConnector",
            "connect.topicnames": stream,
            "redis.type": "hash",
            "redis.key.format": "${topic}-strict",
            "key.converter": "ByteArrayConverter",
        },
    )
    wait_until(lambda: runner.running["rout-strict"].failure() is not None, 120, "the failure")
    assert "null key, which redis.type=hash needs" in runner.running["rout-strict"].failure()[0]
    runner.stop("rout-strict")
    # a key of another type is refused before anything is written
    runner.start(
        "rout-wrongtype",
        {
            **base,
            "connector.class": "RedisSinkConnector",
            "connect.topicnames": stream,
            "redis.type": "list",
        },
    )
    wait_until(lambda: runner.running["rout-wrongtype"].failure() is not None, 120, "the failure")
    assert "is a stream, not a list" in runner.running["rout-wrongtype"].failure()[0]
    runner.stop("rout-wrongtype")
    assert client.xlen(stream) == N

    def done() -> bool:
        _healthy(runner)
        return client.xlen(f"{stream}-copy") >= N and client.llen(f"{stream}-list") >= N

    wait_until(done, 240, f"{N} entries in the copies", every=0.5)
    wait_until(lambda: client.hlen(f"{stream}-hash") == 50, 60, "the hash", every=0.5)
    _healthy(runner)

    # stream: every entry once, fields intact (the key only where there was one), each key's
    # entries in order (records are spread over the topic's queues by key)
    copy = client.xrange(f"{stream}-copy")
    assert len(copy) == N
    seen: dict[int, dict] = {}
    last_seq: dict[bytes | None, int] = {}
    for _, fields in copy:
        i = int(fields[b"seq"])
        assert i not in seen and last_seq.get(fields.get(b"key"), -1) < i
        seen[i] = fields
        last_seq[fields.get(b"key")] = i
    for i in range(N):
        want = {b"value": _value(i), b"region": f"zürich {i % 5}".encode(), b"seq": b"%d" % i}
        if i % 3:
            want[b"key"] = f"k-{i % 50}".encode()
        assert seen[i] == want, i
    # list: every value once
    assert sorted(client.lrange(f"{stream}-list", 0, -1)) == sorted(_value(i) for i in range(N))
    # hash and strings: the last value of each key (keyed records only)
    last = {f"k-{i % 50}": _value(i) for i in range(N) if i % 3}
    assert {k.decode(): v for k, v in client.hgetall(f"{stream}-hash").items()} == last
    wait_until(
        lambda: all(client.get(f"str:{stream}:{k}") == v for k, v in last.items()),
        60,
        "the string keys",
        every=0.5,
    )
    keyless = sum(1 for i in range(N) if i % 3 == 0)
    root = tmp_path / "store"
    wait_until(lambda: topic_count(root, f"{stream}-hash-dlq") == keyless, 60, "dead letters")
    assert topic_count(root, f"{stream}-stream-dlq") == 0
    # the topic holds each entry once, and the source's timestamps came from the entry ids
    assert topic_count(tmp_path / "store", stream) == N
    assert source_ids[0].decode().split("-")[0].isdigit()

    # entries added while it runs are copied too
    client.xadd(stream, {"value": "später".encode(), "key": "late"})
    wait_until(lambda: client.xlen(f"{stream}-copy") == N + 1, 60, "the late entry", every=0.5)
    assert client.xrevrange(f"{stream}-copy", count=1)[0][1] == {
        b"value": "später".encode(),
        b"key": b"late",
    }


def test_list_drained_as_a_queue(runner: ConnectorRunner, client, url: str, tmp_path: Path):
    queue = _name("jobs")
    client.lpush(queue, *[f"job {i} ä".encode() for i in range(N)])
    runner.start(
        "lin",
        {
            "connector.class": "RedisListSourceConnector",
            "redis.url": url,
            "redis.lists": queue,
            "list.poll.max.records": "500",
            "value.converter": "ByteArrayConverter",
        },
    )
    root = tmp_path / "store"
    wait_until(
        lambda: _healthy(runner) or topic_count(root, queue) >= N, 120, "the queue", every=0.5
    )
    processing = f"{queue}:sluice-processing:lin"
    # acknowledged after the commit: Spark lets a source commit a micro-batch when it plans the
    # next one, so only the last poll (at most list.poll.max.records) may still wait
    wait_until(lambda: client.llen(processing) <= 500, 60, "the acknowledgements", every=0.2)
    client.lpush(queue, "one more")  # the next micro-batch acknowledges the previous ones
    wait_until(lambda: client.llen(processing) <= 1, 60, "the acknowledgements", every=0.2)
    assert client.llen(queue) == 0
    log = EmbeddedLog(root / "bus")
    try:
        values = [
            row["value"]
            for q, r in sorted(log.offsets(queue).items())
            for _, batch in log.read(queue, q, r.min_offset, r.max_offset)
            for row in batch.to_pylist()
        ]
    finally:
        log.close()
    # one source partition, one queue: in order, once
    assert values[:N] == [f"job {i} ä".encode() for i in range(N)]
    assert values[N:] in ([], [b"one more"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_configuration_errors_name_the_key(client, url: str) -> None:
    stream = _name("cfg")
    client.xadd(stream, {"value": "x"})
    client.set(f"{stream}-str", "x")
    client.lpush(f"{stream}-list", "x")
    good = {"redis.url": url, "redis.streams": stream, "connect.topicname": "t"}
    RedisStreamSourceConnector().validate(good)
    cases = [
        (
            RedisStreamSourceConnector,
            {**good, "redis.url": f"redis://127.0.0.1:{_closed_port()}"},
            r"redis.url: cannot reach Redis at redis://127.0.0.1:\d+",
        ),
        (
            RedisStreamSourceConnector,
            {**good, "redis.url": "http://x"},
            r"redis.url: expected redis://host:port",
        ),
        (
            RedisStreamSourceConnector,
            {"redis.streams": stream},
            r"redis.url: required key is missing",
        ),
        (
            RedisStreamSourceConnector,
            {**good, "redis.username": "nobody", "redis.password": "no"},
            r"redis.password: .* refused the credentials",
        ),
        (
            RedisStreamSourceConnector,
            {**good, "redis.streams": f"{stream}-none"},
            r"redis.streams: stream '.*-none' does not exist",
        ),
        (
            RedisStreamSourceConnector,
            {**good, "redis.streams": f"{stream}-str"},
            r"redis.streams: '.*-str' .* is a string, not a stream",
        ),
        (
            RedisListSourceConnector,
            {"redis.url": url, "redis.lists": f"{stream}"},
            r"redis.lists: '.*' .* is a stream, not a list",
        ),
        (
            RedisSinkConnector,
            {"redis.url": url, "connect.topicnames": "t", "redis.type": "set"},
            r"redis.type: must be one of stream, list, string, hash",
        ),
        (
            RedisSinkConnector,
            {
                "redis.url": url,
                "connect.topicnames": "t",
                "redis.type": "string",
                "redis.key.format": "fixed",
            },
            r"redis.key.format: 'fixed' has no \$\{key\}",
        ),
        (
            RedisSinkConnector,
            {
                "connect.topicnames": "t",
                "redisAddr": "127.0.0.1",
                "redisPort": str(_closed_port()),
            },
            r"redisAddr: cannot reach Redis",
        ),
    ]
    for cls, config, message in cases:
        with pytest.raises(ConfigException, match=message):
            cls().validate(config)
    # an empty list does not exist in Redis: not an error
    RedisListSourceConnector().validate({"redis.url": url, "redis.lists": f"{stream}-empty"})
