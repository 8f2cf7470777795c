"""kill -9 of a process copying a Redis stream → topic → stream and draining a list → topic.

The child (`redis_child.py`) is killed with its whole process group (JVM included) while both are
mid-way, started again, and left to finish; `SLUICE_CRASH_ROUNDS` kills more than once (`make
crash-redis` runs three rounds). Then:

- stream → stream is exactly-once: the copy holds each entry once, fields intact, and so does the
  topic between them (the sink's per-queue marks would hide a record published twice);
- the list is at-least-once: every element reached the topic; an element may be there twice only
  if it was taken but not acknowledged when the process died (at most two polls: the micro-batch
  in flight and the one before it, acknowledged only when Spark plans the next).
"""

from __future__ import annotations

import collections
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.crash_helpers import kill9, start_child, topic_count, topic_records
from tests.servers import ensure

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("redis_child.py")
ENTRIES, ELEMENTS, POLL = 10_000, 5_000, 500
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


def _start(root: Path, url: str, stream: str, queue: str, log: Path) -> subprocess.Popen:
    return start_child(CHILD, [str(root), url, stream, queue], log)


def test_kill_9_stream_exactly_once_list_at_least_once(tmp_path: Path) -> None:
    import redis

    url = f"redis://{ensure('redis')}/0"
    client = redis.Redis.from_url(url)
    tag = uuid.uuid4().hex[:8]
    stream, queue = f"crash-{tag}", f"crash-jobs-{tag}"
    pipe = client.pipeline(transaction=False)
    for i in range(ENTRIES):
        pipe.xadd(stream, {"key": f"k{i % 97}", "value": f"entry {i} ü".encode(), "seq": str(i)})
    for i in range(0, ELEMENTS, 500):
        pipe.lpush(queue, *[f"job {j}" for j in range(i, i + 500)])
    pipe.execute()
    root, out = tmp_path / "store", tmp_path / "child.log"
    copy = f"{stream}-copy"
    kills = []
    for round_ in range(ROUNDS):
        proc = _start(root, url, stream, queue, out)
        share = (round_ + 1) / (ROUNDS + 1)
        try:
            wait_until(
                lambda p=proc, s=share: (
                    p.poll() is not None
                    or (client.xlen(copy) >= ENTRIES * s * 0.4 and client.llen(queue) < ELEMENTS)
                ),
                300,
                "both mid-way",
                every=0.05,
            )
            assert proc.poll() is None, f"child exited early:\n{out.read_text()[-4000:]}"
        finally:
            kill9(proc)
        kills.append((client.xlen(copy), ELEMENTS - client.llen(queue)))
    taken_at_kill = client.llen(f"{queue}:sluice-processing:jobs-in")
    assert all(0 < c < ENTRIES for c, _ in kills), kills

    proc = _start(root, url, stream, queue, out)
    try:
        wait_until(
            lambda: (
                proc.poll() is not None
                or (
                    client.xlen(copy) >= ENTRIES
                    and len({r["value"] for r in topic_records(root, "jobs")}) >= ELEMENTS
                )
            ),
            600,
            "everything after the restart",
            every=0.5,
        )
        assert proc.poll() is None, f"child failed:\n{out.read_text()[-4000:]}"
    finally:
        kill9(proc)

    entries = client.xrange(copy)
    seqs = collections.Counter(int(f[b"seq"]) for _, f in entries)
    print(f"kills at (copied, taken): {kills}; {taken_at_kill} taken, unacknowledged at the last")
    assert len(entries) == ENTRIES and sorted(seqs) == list(range(ENTRIES)), "lost or doubled"
    for _, f in entries:
        i = int(f[b"seq"])
        assert f == {
            b"key": b"k%d" % (i % 97),
            b"value": f"entry {i} ü".encode(),
            b"seq": b"%d" % i,
        }
    assert topic_count(root, "events") == ENTRIES  # each entry once in the topic too

    jobs = collections.Counter(r["value"] for r in topic_records(root, "jobs"))
    assert sorted(jobs) == sorted(f"job {j}".encode() for j in range(ELEMENTS)), "jobs lost"
    duplicates = sum(jobs.values()) - ELEMENTS
    print(f"list: {duplicates} duplicates (bound {2 * POLL * ROUNDS})")
    assert duplicates <= 2 * POLL * ROUNDS
    for key in client.scan_iter(f"*{tag}*"):  # the copy, the processing list
        client.delete(key)
    root_run = (root / "connectors" / "events-out" / "CURRENT").read_text().strip()
    for key in client.scan_iter("sluice:offsets:events-out:events:*"):
        if client.get(key).decode().startswith(root_run):  # this run's marks only
            client.delete(key)
    client.close()
