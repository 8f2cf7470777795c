"""kill -9 of a process copying a Redis stream → topic → stream, list, hash and string keys, and
draining a list → topic.

The child (`redis_child.py`) is killed with its whole process group (JVM included) while all are
mid-way, started again, and left to finish; `SLUICE_CRASH_ROUNDS` kills more than once (`make
crash-redis` runs three rounds). Then:

- the topic `events` holds each stream entry once (the stream source is exactly-once), so every
  sink gets each record once per delivery and any repeated write is the sink's own;
- the sink is exactly-once in every `redis.type`: the stream copy and the list hold each record
  once (a replayed `LPUSH` would show as a second element), the hash holds one field per record
  key and the string keys one key per record, each with its record's value — and since an upsert
  hides a repeated write, Redis's keyevent notifications count the `HSET`s and `SET`s actually
  made: one per record, none twice;
- the list source is at-least-once: every element reached the topic; an element may be there twice
  only if it was taken but not acknowledged when the process died (at most two micro-batches:
  the one in flight and the one before it, acknowledged only when Spark plans the next; each
  holds one poll and the polls made ahead while the one before it ran).
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.engine.checkpoint import last_committed_offsets
from sluice.engine.source import POLL_AHEAD_MAX
from tests.e2e.children import run_then_kill, start_child
from tests.e2e.topics import topic_count, topic_rows
from tests.servers import ensure

# more than the default 300 s, as the other crash tests: the child's start and restart (two
# Spark drivers) and 10,000 entries through four sinks take ~160 s on a 2-core machine busy
# with the other half of the suite
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHILD = Path(__file__).with_name("redis_child.py")
ENTRIES, ELEMENTS, POLL = 10_000, 5_000, 500
#: what one crash can replay: two micro-batches, each of one poll and the polls made ahead
IN_FLIGHT = 2 * (1 + POLL_AHEAD_MAX) * POLL
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))
WRITES = ("set", "hset", "lpush")  # the commands of the string, hash and list sinks
SINKS = {"stream": "events-out", "list": "events-list", "hash": "events-hash"}
SINKS["string"] = "events-string"


class Writes:
    """Counts the writes of the string, hash and list sinks to keys starting with `prefix`, from
    Redis's keyevent notifications (published as each command runs, one per command)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client, self.prefix = client, prefix.encode()
        self.flags = client.config_get("notify-keyspace-events")["notify-keyspace-events"]
        # E: keyevent channels; $: strings; h: hashes; l: lists (kept: whatever was on before)
        client.config_set("notify-keyspace-events", "".join(set(self.flags) | set("E$hl")))
        self.by_key: collections.Counter[tuple[str, bytes]] = collections.Counter()
        self.totals: collections.Counter[str] = collections.Counter()
        self.done = threading.Event()
        self.pubsub = client.pubsub()
        db = client.connection_pool.connection_kwargs.get("db", 0)
        self.pubsub.subscribe(
            **{f"__keyevent@{db}__:{c}": self._count for c in WRITES},
            **{f"done-{prefix}": lambda _: self.done.set()},
        )
        self.thread = self.pubsub.run_in_thread(sleep_time=0.01, daemon=True)

    def _count(self, message: dict) -> None:
        if message["data"].startswith(self.prefix):  # not the sinks' marks
            command = message["channel"].decode().rpartition(":")[2]
            self.by_key[command, message["data"]] += 1
            self.totals[command] += 1

    def settle(self) -> None:
        """Wait until every notification published so far has been counted (one connection
        delivers in order, so a marker published now arrives after them)."""
        self.client.publish(f"done-{self.prefix.decode()}", "1")
        assert self.done.wait(60), "the marker never came back"

    def close(self) -> None:
        self.thread.stop()
        self.thread.join(10)
        self.pubsub.close()
        self.client.config_set("notify-keyspace-events", self.flags)


def _start(root: Path, url: str, stream: str, queue: str, log: Path) -> subprocess.Popen:
    return start_child(CHILD, [str(root), url, stream, queue], log)


def _value(i: int) -> bytes:
    return f"entry {i} ü".encode()


def _progress(client: Any, stream: str, writes: Writes) -> dict[str, int]:
    """Records written so far by each sink (`redis.type` → count)."""
    return {
        "stream": client.xlen(f"{stream}-copy"),
        "list": client.llen(f"{stream}-list"),
        "hash": client.hlen(f"{stream}-hash"),
        "string": writes.totals["set"],
    }


def _committed(root: Path) -> dict[str, int]:
    """Records of the topic each sink's query committed (`redis.type` → count)."""
    counts = {}
    for kind, name in SINKS.items():
        run = (root / "connectors" / name / "CURRENT").read_text().strip()
        ends = last_committed_offsets(str(root / "connectors" / name / "runs" / run / "checkpoint"))
        counts[kind] = sum(ends[0]["q"].values()) if ends else 0
    return counts


def test_kill_9_stream_and_sink_types_exactly_once_list_at_least_once(tmp_path: Path) -> None:
    import redis

    url = f"redis://{ensure('redis')}/0"
    client = redis.Redis.from_url(url)
    tag = uuid.uuid4().hex[:8]
    stream, queue = f"crash-{tag}", f"crash-jobs-{tag}"
    pipe = client.pipeline(transaction=False)
    for i in range(ENTRIES):
        pipe.xadd(stream, {"key": f"k{i}", "value": _value(i), "seq": str(i)})
    for i in range(0, ELEMENTS, 500):
        pipe.lpush(queue, *[f"job {j}" for j in range(i, i + 500)])
    pipe.execute()
    root, out = tmp_path / "store", tmp_path / "child.log"
    writes = Writes(redis.Redis.from_url(url), f"{stream}-")
    try:
        kills = _crash_rounds(client, root, url, stream, queue, out, writes)
        taken_at_kill = client.llen(f"{queue}:sluice-processing:jobs-in")
        run_then_kill(
            _start(root, url, stream, queue, out),
            lambda: (
                min(_progress(client, stream, writes).values()) >= ENTRIES
                and len({r["value"] for r in topic_rows(root, "jobs")}) >= ELEMENTS
            ),
            out,
            timeout=600,
            what="everything after the restart",
        )
        writes.settle()
        print("kills at (written by each sink, of which not committed, taken from the list):")
        print("\n".join(map(str, kills)))
        print(f"{taken_at_kill} list elements taken, unacknowledged at the last kill")
        _check_topic(root)
        _check_list_hash_strings(client, stream, writes)
        _check_stream_copy(client, stream)
        _check_jobs(root)
    finally:
        writes.close()
        _clean(client, tag)


def _crash_rounds(
    client: Any, root: Path, url: str, stream: str, queue: str, out: Path, writes: Writes
) -> list[tuple[dict[str, int], dict[str, int], int]]:
    kills, furthest = [], 0
    for round_ in range(ROUNDS):
        # every sink past its share, and past where the furthest was killed: this run wrote
        least = max(ENTRIES * (round_ + 1) / (ROUNDS + 1) * 0.4, furthest + 1)
        target = ("list", "hash", "string")[round_ % 3]  # one round in the suite: the list
        ready = _kill_moment(client, root, stream, queue, writes, least, target)
        proc = _start(root, url, stream, queue, out)
        run_then_kill(proc, ready, out, timeout=300, what="every sink and the list mid-way")
        written, committed = _progress(client, stream, writes), _committed(root)
        # written beyond the commit: the restart replays them, and the marks must skip them
        replayed = {k: n - committed[k] for k, n in written.items()}
        kills.append((written, replayed, ELEMENTS - client.llen(queue)))
        furthest = max(written.values())
    # each sink was killed mid-way, not after it had finished
    assert all(0 < n < ENTRIES for p, _, _ in kills for n in p.values()), kills
    return kills


def _kill_moment(
    client: Any, root: Path, stream: str, queue: str, writes: Writes, least: float, target: str
) -> Callable[[], bool]:
    """When every sink wrote `least` records and the list source took some: as soon as the sink of
    `target` also has records written but not committed (so the restart replays them), or 10 s
    later, or sooner if a sink nears the end. (Waiting for all of them at once takes too long.)"""
    deadline: list[float] = []

    def ready() -> bool:
        written = _progress(client, stream, writes)
        if min(written.values()) < least or client.llen(queue) >= ELEMENTS:
            return False
        deadline[:] = deadline or [time.monotonic() + 10]
        committed = _committed(root)  # read after `written`: never counts a later write
        return (
            written[target] > committed[target]
            or time.monotonic() > deadline[0]
            or max(written.values()) > ENTRIES * 0.8
        )

    return ready


def _check_topic(root: Path) -> None:
    values = collections.Counter(r["value"] for r in topic_rows(root, "events"))
    print(f"topic events: {sum(values.values())} records, {len(values)} distinct values")
    assert topic_count(root, "events") == ENTRIES  # each entry once in the topic
    assert sorted(values) == sorted(_value(i) for i in range(ENTRIES))


def _check_stream_copy(client: Any, stream: str) -> None:
    entries = client.xrange(f"{stream}-copy")
    seqs = collections.Counter(int(f[b"seq"]) for _, f in entries)
    assert len(entries) == ENTRIES and sorted(seqs) == list(range(ENTRIES)), "lost or doubled"
    for _, f in entries:
        i = int(f[b"seq"])
        assert f == {b"key": b"k%d" % i, b"value": _value(i), b"seq": b"%d" % i}


def _check_list_hash_strings(client: Any, stream: str, writes: Writes) -> None:
    counts = {c: writes.totals[c] for c in WRITES}
    repeated = [k for k, n in writes.by_key.items() if k[0] == "set" and n > 1]
    pushed = collections.Counter(client.lrange(f"{stream}-list", 0, -1))
    print(f"writes made (keyevent notifications): {counts}; keys SET twice: {len(repeated)}")
    print(f"list sink: {sum(pushed.values()) - len(pushed)} duplicates")
    assert counts == dict.fromkeys(WRITES, ENTRIES) and not repeated, "a write was repeated"
    assert pushed == collections.Counter(_value(i) for i in range(ENTRIES)), "lost or doubled"
    assert client.hgetall(f"{stream}-hash") == {b"k%d" % i: _value(i) for i in range(ENTRIES)}
    keys = [f"{stream}-str:k{i}" for i in range(ENTRIES)]
    assert client.mget(keys) == [_value(i) for i in range(ENTRIES)]
    assert sum(1 for _ in client.scan_iter(f"{stream}-str:*", count=1000)) == ENTRIES


def _check_jobs(root: Path) -> None:
    jobs = collections.Counter(r["value"] for r in topic_rows(root, "jobs"))
    assert sorted(jobs) == sorted(f"job {j}".encode() for j in range(ELEMENTS)), "jobs lost"
    duplicates = sum(jobs.values()) - ELEMENTS
    print(f"list source: {duplicates} duplicates (bound {IN_FLIGHT * ROUNDS})")
    assert duplicates <= IN_FLIGHT * ROUNDS


def _clean(client: Any, tag: str) -> None:
    """Remove this run's keys: the source, the targets, the processing list, the marks."""
    keys = list(client.scan_iter(f"*{tag}*", count=1000))
    for i in range(0, len(keys), 1000):
        client.unlink(*keys[i : i + 1000])
    client.close()
