"""NATS and Mosquitto stopped for 20 s in the middle of copies through topics: the connectors back
off and resume, nothing is lost, and NATS duplicates nothing. Also the bad-credentials errors.

Both servers are private (their own ports, folders and a user with a password) so that stopping
them disturbs no other test; one worker runs all four connectors and both servers go away at
once. While they are away the sources' `latest`/`poll` raise `RetriableException` and the driver
retries them with backoff (`errors.retry.*`); the sinks retry their writes the same way; the NATS
source's `read` waits page by page. The connectors must stay healthy, then finish once the
servers are back: the NATS copy and its topic hold each message once; every MQTT message is in
its topic and reached the copy (a subscriber in a persistent session). The connectors are created
through a herder over the test's runner, so that both REST faces show both sources' tasks
RUNNING and `retrying` during the outage, and no note on any connector after it. The MQTT
source has thousands of messages buffered when the broker goes (its receive maximum lets the
broker send them all ahead): it must stop handing them over and say it retries, not drain its
buffer through the outage.
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

from sluice.connectors.mqtt import MqttSourceConnector
from sluice.connectors.nats import NatsSourceConnector
from sluice.rest.app import create_app
from sluice.sdk import ConfigException
from tests import mqtt_helpers
from tests.conftest import wait_until
from tests.e2e.orphans import spawn
from tests.e2e.outage import (
    await_no_retrying,
    await_retrying,
    healthy,
    ride_out,
    status_herder,
)
from tests.e2e.topics import topic_count, topic_rows
from tests.nats_helpers import Nats
from tests.servers import ensure

# more than the default 300 s on a loaded 2-core machine: two private servers, a 20 s outage, paced
# copies
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

OUTAGE_S = 20.0
FIRST, MORE = 4000, 1000
USER, PASSWORD = "sluice", "s3cret-ü"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class PrivateServer:
    """A server process of this test alone; `start` waits for its port, `stop` for its exit."""

    def __init__(self, command: list[str]) -> None:
        self.command, self.proc = command, None
        self.port = int(command[command.index("-p") + 1]) if "-p" in command else 0

    def start(self) -> None:
        # spawned to die with pytest: a private server never outlives the test run
        self.proc = spawn(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _listening(self.port), 30, f"{self.command[0]} on {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # both save their state on TERM
            self.proc.wait(30)
            self.proc = None


def _nats_server(folder: Path) -> PrivateServer:
    ensure("nats")  # installs the package when missing
    port = _free_port()
    return PrivateServer(
        [
            shutil.which("nats-server") or "nats-server",
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-js",
            "-sd",
            str(folder / "nats"),
            "--user",
            USER,
            "--pass",
            PASSWORD,
        ]
    )


def _mosquitto(folder: Path) -> PrivateServer:
    ensure("mosquitto")
    port = _free_port()
    (folder / "mqtt").mkdir()
    passwords = folder / "mqtt" / "passwords"
    subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(passwords), USER, PASSWORD], check=True, timeout=60
    )
    conf = folder / "mqtt" / "mosquitto.conf"
    conf.write_text(
        f"user root\nlistener {port} 127.0.0.1\nallow_anonymous false\n"
        f"password_file {passwords}\npersistence true\npersistence_location {folder / 'mqtt'}/\n"
        "max_queued_messages 1000000\n"
    )
    server = PrivateServer(["/usr/sbin/mosquitto", "-c", str(conf)])
    server.port = port
    return server


def test_servers_away_for_20_s(paced_runner, tmp_path: Path) -> None:
    # 200 messages a second at most from each source: FIRST take 20 s, the outage comes mid-copy
    runner = paced_runner
    nats_server, broker = _nats_server(tmp_path), _mosquitto(tmp_path)
    nats_server.start()
    broker.start()
    login = {"username": USER, "password": PASSWORD}
    nats_url = f"nats://127.0.0.1:{nats_server.port}"
    nats = Nats(nats_url, user=USER, password=PASSWORD)
    mqtt_url = f"tcp://127.0.0.1:{broker.port}"
    copy = None
    herder = status_herder(runner, tmp_path)
    rest = TestClient(create_app(herder))
    try:
        # wrong credentials: a configuration error naming the key
        with pytest.raises(ConfigException, match=r"nats.password: .* refused the credentials"):
            NatsSourceConnector().validate(
                {"nats.url": nats_url, "nats.streams": "X", "nats.username": USER}
            )
        with pytest.raises(ConfigException, match=r"mqtt.password: .* refused the connection"):
            MqttSourceConnector().validate(
                {"mqtt.url": mqtt_url, "mqtt.topics": "a", "connect.topicname": "t"}
                | {"mqtt.username": USER, "mqtt.password": "wrong"}
            )

        nats.add_stream("EVENTS", ["events.>"])
        nats.add_stream("COPY", ["copy.>"])
        mqtt_helpers.session(broker.port, "outage-in", ["in/#"], **login)
        copy = mqtt_helpers.Collector(broker.port, "out/#", client_id="outage-copy", **login)
        _publish(nats, broker.port, login, 0, FIRST)
        retry = {"errors.retry.timeout": "-1", "errors.retry.delay.max.ms": "1000"}
        raw = {"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}
        nats_keys = {**raw, **retry, "nats.url": nats_url, "nats.timeout.ms": "1000"}
        nats_keys |= {"nats.username": USER, "nats.password": PASSWORD}
        mqtt_keys = {**raw, **retry, "mqtt.url": mqtt_url, "mqtt.timeout.ms": "2000"}
        mqtt_keys |= {"mqtt.username": USER, "mqtt.password": PASSWORD}
        for name, config in {
            "nin": {
                **nats_keys,
                "connector.class": "NatsSourceConnector",
                "nats.streams": "EVENTS",
                "connect.topicname": "events",
                "read.max.rows": "200",
            },
            "nout": {
                **nats_keys,
                "connector.class": "NatsSinkConnector",
                "connect.topicnames": "events",
                "nats.subject.format": "copy.${topic}",
            },
            "min": {
                **mqtt_keys,
                "connector.class": "MqttSourceConnector",
                "mqtt.topics": "in/#",
                "mqtt.client.id": "outage-in",
                "connect.topicname": "sensors",
                "mqtt.poll.max.records": "200",
                "read.max.rows": "200",
            },
            "mout": {
                **mqtt_keys,
                "connector.class": "MqttSinkConnector",
                "connect.topicnames": "sensors",
                "mqtt.topic.format": "out/copy",
            },
        }.items():
            herder.put_connector(name, config)

        def count(what: str) -> int:
            try:
                return nats.count("COPY") if what == "nats" else copy.count()
            except Exception:  # the server is away
                return -1

        wait_until(
            lambda: healthy(runner) or (count("nats") > 0 and copy.count() > 0),
            180,
            "both copies to start",
            every=0.2,
        )
        assert count("nats") < FIRST and copy.count() < FIRST  # paced: still running
        nats_server.stop()
        broker.stop()
        away = time.monotonic()

        def restore() -> None:
            nats_server.start()
            broker.start()

        notes = await_retrying(rest, ["nin", "min"], 3 * OUTAGE_S)
        assert "nats.url=" in notes["nin"]["error"], notes
        assert f"mqtt.url={mqtt_url}" in notes["min"]["error"], notes
        ride_out(runner, OUTAGE_S - (time.monotonic() - away), restore)
        _publish(nats, broker.port, login, FIRST, MORE)
        total = FIRST + MORE

        def done() -> bool:
            healthy(runner)
            return count("nats") >= total and len({r[1] for r in copy.received}) >= total

        wait_until(done, 300, "both copies whole", every=0.5)
        await_no_retrying(rest, ["nin", "nout", "min", "mout"])
        values = collections.Counter(m.data for m in nats.read("COPY"))
        assert sorted(values) == sorted(_value(i) for i in range(total)), "lost or doubled"
        root = Path(runner.root)
        assert topic_count(root, "events") == total  # each message once in the topic too
        sensors = {r["value"] for r in topic_rows(root, "sensors")}
        assert sorted(sensors) == sorted(_value(i) for i in range(total)), "MQTT lost"
        assert {r[1] for r in copy.received} == sensors
    finally:
        herder.progress.detach(runner.spark)
        runner.close()
        if copy is not None:
            copy.close()
        nats_server.stop()
        broker.stop()


def _value(i: int) -> bytes:
    return f"wert {i} ü".encode()


def _publish(nats: Nats, port: int, login: dict[str, str], first: int, n: int) -> None:
    nats.publish([(f"events.{i % 3}", _value(i), {"seq": str(i)}) for i in range(first, first + n)])
    messages = [(f"in/{i % 3}", _value(i), None) for i in range(first, first + n)]
    mqtt_helpers.publish(port, messages, **login)


class _Notes:
    """A retry store that keeps the notes it is given (the counters store's part)."""

    def __init__(self) -> None:
        self.notes: dict[tuple[str, int], dict] = {}

    def note_retrying(self, connector: str, task: int, note: dict, retries: int = 0) -> None:
        self.notes[(connector, task)] = dict(note)

    def clear_retrying(self, connector: str, task: int | None = None, retries: int = 0) -> None:
        self.notes.pop((connector, task or 0), None)


def test_mqtt_source_notes_an_outage_without_being_polled(tmp_path: Path) -> None:
    """The MQTT source's status says `retrying` from paho's own reconnection loop: in CI, two
    sinks retrying their writes held both cores through the outage, the driver never reached
    the source's next `poll`, and no note showed. Here nothing polls during the outage."""
    from sluice.connectors.mqtt import MqttSourceTask
    from sluice.engine.retry import watching_task
    from sluice.sdk import RetriableException, SourceTaskContext

    broker = _mosquitto(tmp_path)
    broker.start()
    store = _Notes()
    task = MqttSourceTask()
    task.context = SourceTaskContext(connector_name="mqtt-notes", task_id=0)
    url = f"tcp://127.0.0.1:{broker.port}"
    try:
        task.start(
            {"mqtt.url": url, "mqtt.topics": "n/#", "connect.topicname": "t"}
            | {"mqtt.username": USER, "mqtt.password": PASSWORD, "mqtt.client.id": "notes"}
        )
        with watching_task(store, "mqtt-notes", 0):
            task.poll()  # the first poll, under the task's watcher, as the engine calls it
        assert store.notes == {}
        broker.stop()
        wait_until(lambda: ("mqtt-notes", 0) in store.notes, 30, "the note, with no poll")
        note = store.notes[("mqtt-notes", 0)]
        assert f"mqtt.url={url}" in note["error"] and note["attempts"] >= 1, note
        with pytest.raises(RetriableException, match="is not connected"):
            task.poll()
        broker.start()
        wait_until(lambda: store.notes == {}, 30, "the note cleared on reconnection")
        assert len(task.poll()) == 0
    finally:
        task.stop()
        broker.stop()
