"""Redis stopped for 20 s in the middle of a stream → topic → stream copy: nothing lost, nothing
duplicated, and the status says so while it lasts.

The server is a private `redis-server` (its own port and folder, append-only file fsynced on every
write) so that stopping it disturbs no other test. While it is away the source's `latest` raises
`RetriableException` and the driver retries it with backoff (`errors.retry.*`), the sink retries
its writes the same way; both connectors must stay healthy, then finish once it is back: the copy
holds each entry once, and so does the topic. The connectors are created through a herder over
the test's runner, so that both REST faces show, during the outage, the source's task RUNNING and
`retrying` (since when, how many retries, the error), and after it the note gone.
"""

from __future__ import annotations

import collections
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sluice.rest.app import create_app
from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.e2e.outage import (
    await_no_retrying,
    await_retrying,
    healthy,
    ride_out,
    status_herder,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

OUTAGE_S = 20.0
FIRST, MORE = 6000, 2000


class PrivateRedis:
    """A redis-server of this test alone (the Debian package the servers script installs)."""

    def __init__(self, folder: Path) -> None:
        from tests.servers import ensure

        ensure("redis")  # the shared one: installs the package when missing
        self.folder = folder
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = spawn(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        def up() -> bool:
            try:
                return bool(redis.Redis(port=self.port).ping())
            except redis.RedisError:
                return False

        wait_until(up, 30, "the private redis-server", every=0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)
            self.proc = None


def test_server_away_for_20_s(paced_runner, tmp_path: Path) -> None:
    import redis

    # 300 entries a second at most: FIRST take 20 s, the outage comes mid-copy
    runner = paced_runner

    server = PrivateRedis(tmp_path)
    server.start()
    client = redis.Redis(port=server.port)
    herder = status_herder(runner, tmp_path)
    rest = TestClient(create_app(herder))
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(FIRST):
            pipe.xadd("events", {"key": f"k{i % 31}", "value": f"é {i}", "seq": str(i)})
        pipe.execute()
        retry = {"errors.retry.timeout": "-1", "errors.retry.delay.max.ms": "1000"}
        raw = {"redis.url": server.url, "redis.timeout.ms": "1000", **retry}
        raw |= {"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}
        herder.put_connector(
            "in",
            {
                **raw,
                "connector.class": "RedisStreamSourceConnector",
                "redis.streams": "events",
                "connect.topicname": "events",
                "read.max.rows": "300",
            },
        )
        herder.put_connector(
            "out",
            {
                **raw,
                "connector.class": "RedisSinkConnector",
                "connect.topicnames": "events",
                "redis.key.format": "copy",
            },
        )

        def copied() -> int:
            try:
                return client.xlen("copy")
            except redis.RedisError:
                return -1

        wait_until(lambda: copied() > 0, 180, "the copy to start", every=0.2)
        assert copied() < FIRST  # paced: the copy is still running
        server.stop()
        away = time.monotonic()
        note = await_retrying(rest, ["in"], 3 * OUTAGE_S)["in"]
        assert "redis.url=" in note["error"], note
        ride_out(runner, OUTAGE_S - (time.monotonic() - away), server.start)
        client = redis.Redis(port=server.port)
        pipe = client.pipeline(transaction=False)
        for i in range(FIRST, FIRST + MORE):
            pipe.xadd("events", {"key": f"k{i % 31}", "value": f"é {i}", "seq": str(i)})
        pipe.execute()

        def done() -> bool:
            healthy(runner)
            return copied() >= FIRST + MORE

        wait_until(done, 300, "the whole stream", every=0.5)
        await_no_retrying(rest, ["in", "out"])
        assert runner.counters.get("in")["total-retries"] >= note["attempts"]
        seqs = collections.Counter(int(f[b"seq"]) for _, f in client.xrange("copy"))
        assert sorted(seqs) == list(range(FIRST + MORE)), "lost or doubled"
        assert runner.bus.count("events") == FIRST + MORE  # each entry once in the topic
    finally:
        herder.progress.detach(runner.spark)
        runner.close()
        server.stop()
