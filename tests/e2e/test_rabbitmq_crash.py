"""kill -9 of a process copying a RabbitMQ stream queue → topic → exchange and draining a classic
queue → topic.

The child (`rabbitmq_child.py`) is killed with its whole process group (JVM included) while both
are mid-way, started again, and left to finish; `SLUICE_CRASH_ROUNDS` kills more than once (`make
crash-rabbitmq` runs three rounds). Then:

- stream → topic is exactly-once: the topic holds each message once;
- topic → exchange is at-least-once: the copy (a queue bound to the exchange) holds every record,
  and a record published twice (its micro-batch replayed) carries the same `message_id` both times;
- the classic queue is at-least-once: every message reached the topic; one may be there twice only
  if it was delivered but not acknowledged when the process died (at most two polls of 250: the
  micro-batch in flight and the one before it, acknowledged only when Spark plans the next).
"""

from __future__ import annotations

import collections
import json
import os
import uuid
from pathlib import Path

import pytest

from tests.e2e.children import run_then_kill, start_child
from tests.e2e.topics import topic_count, topic_rows
from tests.servers import ensure

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("rabbitmq_child.py")
ENTRIES, ELEMENTS, PREFETCH = 4_000, 2_000, 500
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


def _drain(channel, queue: str) -> list[tuple[str, bytes, dict]]:
    out = []
    for method, props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=1):
        if method is None:
            break
        out.append((props.message_id, body, props.headers))
    channel.cancel()
    return out


def test_kill_9_stream_exactly_once_queue_at_least_once(tmp_path: Path) -> None:
    import pika

    url = f"amqp://guest:guest@{ensure('rabbitmq')}/%2F"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    ch = connection.channel()
    tag = uuid.uuid4().hex[:8]
    stream, queue, exchange, copy = (f"{n}-{tag}" for n in ("crash", "jobs", "out", "copy"))
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare(queue, durable=True)
    ch.exchange_declare(exchange, "fanout", durable=True)
    ch.queue_declare(copy, durable=True)
    ch.queue_bind(copy, exchange)
    for i in range(ENTRIES):
        props = pika.BasicProperties(headers={"seq": str(i), "ort": "köln"})
        ch.basic_publish("", stream, f"entry {i} ü".encode(), props)
    for i in range(ELEMENTS):
        ch.basic_publish("", queue, f"job {i}".encode())
    root, out = tmp_path / "store", tmp_path / "child.log"

    def count(name: str) -> int:
        return ch.queue_declare(name, passive=True).method.message_count

    args = [str(root), url, stream, queue, exchange]
    kills = []
    try:
        for round_ in range(ROUNDS):
            # past its share of the copy and past the last kill's count: a condition that held
            # already would kill the next child before it did anything
            least = max(
                ENTRIES * (round_ + 1) / (ROUNDS + 1) * 0.4, kills[-1][0] + 1 if kills else 0
            )
            run_then_kill(
                start_child(CHILD, args, out),
                lambda n=least: count(copy) >= n and count(queue) < ELEMENTS,
                out,
                timeout=300,
                what="both mid-way",
            )
            kills.append((count(copy), ELEMENTS - count(queue)))
        assert all(0 < c < ENTRIES for c, _ in kills), kills

        run_then_kill(
            start_child(CHILD, args, out),
            lambda: (
                topic_count(root, "events") >= ENTRIES
                and count(copy) >= ENTRIES
                and len({r["value"] for r in topic_rows(root, "jobs")}) >= ELEMENTS
            ),
            out,
            timeout=600,
            what="everything after the restart",
        )

        # the topic: each stream message once, intact
        events = topic_rows(root, "events")
        assert len(events) == ENTRIES == topic_count(root, "events")
        seqs = sorted(int(json.loads(r["headers"])["seq"]) for r in events)
        assert seqs == list(range(ENTRIES)), "lost or doubled in the topic"
        # the copy: every record, a repeat always under the same message id
        copied = _drain(ch, copy)
        by_id: dict[str, set] = collections.defaultdict(set)
        for message_id, body, headers in copied:
            by_id[message_id].add((body, headers["seq"]))
        assert len(by_id) == ENTRIES and all(len(v) == 1 for v in by_id.values())
        assert sorted(int(s) for v in by_id.values() for _, s in v) == list(range(ENTRIES))
        for (body, seq), *_ in (list(v) for v in by_id.values()):
            assert body == f"entry {seq} ü".encode()
        # the classic queue: every message, duplicates bounded
        jobs = collections.Counter(r["value"] for r in topic_rows(root, "jobs"))
        assert sorted(jobs) == sorted(f"job {j}".encode() for j in range(ELEMENTS)), "jobs lost"
        duplicates = sum(jobs.values()) - ELEMENTS
        print(
            f"kills at (copied, taken): {kills}; copy: {len(copied) - ENTRIES} republished; "
            f"queue: {duplicates} duplicates (bound {2 * PREFETCH * ROUNDS})"
        )
        assert duplicates <= 2 * PREFETCH * ROUNDS
    finally:
        for name in (stream, queue, copy):
            ch.queue_delete(name)
        ch.exchange_delete(exchange)
        connection.close()
