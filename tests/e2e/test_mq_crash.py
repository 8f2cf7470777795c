"""kill -9 of a process copying a JetStream stream → topic → stream and MQTT → topic → MQTT.

The child (`mq_child.py`) runs all four connectors in one worker; it is killed with its whole
process group (JVM included) while both copies are mid-way, started again, and left to finish;
`SLUICE_CRASH_ROUNDS` kills more than once (`make crash-mq` runs three rounds). Then:

- NATS is exactly-once: the copy stream holds each message once with its headers, and so does
  the topic between them (the sink's `Nats-Msg-Id`s would hide a record published twice);
- MQTT is at-least-once: every message reached the topic and the copy; a message may be in the
  topic twice only if it was polled but not acknowledged when the process died (at most two
  polls per kill: the micro-batch in flight and the one before it, acknowledged only when Spark
  plans the next).
"""

from __future__ import annotations

import collections
import os
import uuid
from pathlib import Path

import pytest

from sluice.engine.source import POLL_AHEAD_MAX
from tests import mqtt_helpers
from tests.e2e.children import run_then_kill, start_child
from tests.e2e.topics import topic_count, topic_rows
from tests.nats_helpers import Nats
from tests.servers import ensure

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("mq_child.py")
MESSAGES, SENSORS, POLL = 3000, 1500, 300
#: what one crash can replay: two micro-batches, each of one poll and the polls made ahead
IN_FLIGHT = 2 * (1 + POLL_AHEAD_MAX) * POLL
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


def test_kill_9_nats_exactly_once_mqtt_at_least_once(tmp_path: Path) -> None:
    nats_url = f"nats://{ensure('nats')}"
    port = int(ensure("mosquitto").rsplit(":", 1)[1])
    tag = uuid.uuid4().hex[:8]
    stream, copy = f"CRASH{tag}", f"CRASHCOPY{tag}"
    client_id, topic_filter, out = f"crash-{tag}", f"crash-in-{tag}/#", f"crash-out-{tag}/copy"
    nats = Nats(nats_url)
    nats.add_stream(stream, [f"crash.{tag}.>"])
    nats.add_stream(copy, [f"crashcopy.{tag}.>"])
    mqtt_helpers.session(port, client_id, [topic_filter])
    collected = mqtt_helpers.Collector(port, out)
    try:
        nats.publish(
            [
                (f"crash.{tag}.e", f"nachricht {i} ü".encode(), {"Sluice-Key": f"k{i % 97}"})
                for i in range(MESSAGES)
            ]
        )
        mqtt_helpers.publish(
            port,
            [(f"crash-in-{tag}/s{i % 7}", f"messung {i} ü".encode(), None) for i in range(SENSORS)],
        )
        args = [nats_url, stream, f"crashcopy.{tag}", str(port), client_id, topic_filter, out]
        root, log = tmp_path / "store", tmp_path / "child.log"
        kills = []
        for round_ in range(ROUNDS):
            share = (round_ + 1) / (ROUNDS + 1)
            run_then_kill(
                start_child(CHILD, [str(root), *args], log),
                lambda s=share: (
                    nats.count(copy) >= MESSAGES * s * 0.4 and 0 < collected.count() < SENSORS
                ),
                log,
                timeout=300,
                what="both mid-way",
            )
            kills.append((nats.count(copy), collected.count()))
        assert all(0 < n < MESSAGES and 0 < m < SENSORS for n, m in kills), kills

        run_then_kill(
            start_child(CHILD, [str(root), *args], log),
            lambda: (
                nats.count(copy) >= MESSAGES and len({r[1] for r in collected.received}) >= SENSORS
            ),
            log,
            timeout=600,
            what="everything after the restart",
        )
        print(f"kills at (NATS copied, MQTT copied): {kills}")

        messages = nats.read(copy)
        assert len(messages) == MESSAGES, "lost or doubled"
        values = collections.Counter(m.data for m in messages)
        assert sorted(values) == sorted(f"nachricht {i} ü".encode() for i in range(MESSAGES))
        for m in messages:
            i = int(m.data.split()[1])
            assert m.headers["Sluice-Key"] == f"k{i % 97}" and m.headers["Nats-Msg-Id"]
        assert topic_count(root, "events") == MESSAGES  # each message once in the topic too

        sensors = collections.Counter(r["value"] for r in topic_rows(root, "sensors"))
        want = sorted(f"messung {i} ü".encode() for i in range(SENSORS))
        assert sorted(sensors) == want, "MQTT messages lost on the way to the topic"
        assert sorted({r[1] for r in collected.received}) == want, "lost on the way out"
        duplicates = sum(sensors.values()) - SENSORS
        print(f"MQTT: {duplicates} duplicates in the topic (bound {IN_FLIGHT * ROUNDS})")
        assert duplicates <= IN_FLIGHT * ROUNDS
    finally:
        collected.close()
        mqtt_helpers.session(port, client_id, [], end=True)
        nats.delete_stream(stream)
        nats.delete_stream(copy)
