"""kill -9 of a process running a poll-only source, a source that dead-letters and a sink that
dead-letters; then a restart.

The child (`replay_child.py`) runs, on one SparkSession, a poll-only queue (message files,
acknowledged by deleting them once their micro-batch committed) and a replayable source whose bad
records go to a dead-letter topic. It is killed with its whole process group (JVM included) while
both are mid-way, started again, and left to finish. Then the topics are read back:

- poll-only is at-least-once: every message is in the topic; a message may appear twice only if it
  was not acknowledged when the process died (its file still existed), and there are at most two
  micro-batches of such messages — the one in flight, and the one before it, which Spark lets the
  source acknowledge only when it plans the next (`commit(end)` follows the next `latestOffset`);
  a micro-batch holds one poll, plus the polls made ahead while the batch before it ran over 10 s;
- dead letters are exactly-once like the topic they come with: each bad record is in the
  dead-letter topic once, each good record in the topic once, although a batch was replayed;
- so are a sink's: a file sink reading JSON lines that the test keeps appending to the source's
  file (so that the sink is busy with a batch when the kill comes, by construction) writes each
  good line once and puts each malformed one in its dead-letter topic once.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sluice.bus.embedded import EmbeddedLog
from sluice.engine.source import POLL_AHEAD_MAX
from tests.conftest import wait_until
from tests.e2e.orphans import spawn

# more than the default 300 s on a loaded 2-core machine: a kill -9 and a restart of a Spark process
# with four connectors
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHILD = Path(__file__).with_name("replay_child.py")
MESSAGES, MAX_POLL = 300, 20  # 15 polls of the queue
#: What a crash can replay: two micro-batches (a batch is acknowledged when the next one is
#: planned), each of one poll plus the polls made ahead while the one before it ran
IN_FLIGHT = 2 * (1 + POLL_AHEAD_MAX) * MAX_POLL
RECORDS, READ_MAX_ROWS = 15_000, 1_000  # 15 micro-batches, 200 dead letters in each
BAD = [i for i in range(RECORDS) if i % 10 in (3, 7)]
GOOD = [i for i in range(RECORDS) if i % 10 not in (3, 7)]


def _raw_line(i: int) -> str:
    """Line i of the sink's JSON source: every tenth (i % 10 == 3) malformed."""
    return f'{{"a": oops{i}}}\n' if i % 10 == 3 else f'{{"a": {i}}}\n'


class _Feeder:
    """Appends `_raw_line`s to the sink's source file, 5 every 50 ms, until stopped: the sink has
    new lines to read whenever the process is killed."""

    def __init__(self, path: Path) -> None:
        self.path, self.written = path, 0
        path.write_text("")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.append(5)

    def append(self, n: int) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(_raw_line(i) for i in range(self.written, self.written + n)))
        self.written += n

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _start(root: Path, queue: Path, log: Path, raw: Path, out_file: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    args = [str(root), str(queue), str(MAX_POLL), str(RECORDS), str(READ_MAX_ROWS)]
    args += [str(raw), str(out_file)]
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return spawn(
        [sys.executable, str(CHILD), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _count(log: EmbeddedLog, topic: str) -> int:
    """Records ever published to `topic`: the sum of its queues' end offsets (0 before it is
    created)."""
    if not log.topic_exists(topic):
        return 0
    return sum(r.max_offset for r in log.offsets(topic).values())


def _records(log: EmbeddedLog, topic: str) -> list[dict]:
    """Every record of `topic`, in queue and offset order."""
    out: list[dict] = []
    for queue, r in sorted(log.offsets(topic).items()):
        for _, batch in log.read(topic, queue, r.min_offset, r.max_offset):
            out.extend(batch.to_pylist())
    return out


def _dead_letter_id(record: dict) -> int:
    value = json.loads(record["value"])
    value = value.get("payload", value)
    return value["id"] if isinstance(value["id"], int) else int(value["id"].split()[-1])


def test_kill_9_poll_only_at_least_once_and_dead_letters_once(tmp_path: Path) -> None:
    root, queue, out = tmp_path / "store", tmp_path / "queue", tmp_path / "child.log"
    queue.mkdir()
    for i in range(MESSAGES):
        (queue / f"m{i:06d}.msg").write_text(f"message {i:06d}")
    log = EmbeddedLog(root / "bus")
    raw, written = tmp_path / "raw.jsonl", tmp_path / "written.txt"

    def progress() -> tuple[int, int]:
        return _count(log, "polled"), _count(log, "people-dlq")

    feeder = _Feeder(raw)
    proc = _start(root, queue, out, raw, written)
    try:
        # mid-way: both have published something, the faster one about a third of its work;
        # the sink has written lines and dead letters (and the feeder gives it more meanwhile)
        wait_until(
            lambda: (
                proc.poll() is not None
                or (
                    min(progress()) > 0
                    and max(progress()[0] / MESSAGES, progress()[1] / len(BAD)) >= 0.3
                    and _count(log, "raw-dlq") > 0
                    and written.exists()
                    and written.stat().st_size > 0
                )
            ),
            600,
            "the sources and the sink to be mid-way",
            every=0.05,
        )
        assert proc.poll() is None, f"child exited early:\n{out.read_text()[-4000:]}"
    finally:
        _kill9(proc)
        feeder.stop()
    polled_at_kill, letters_at_kill = progress()
    sink_letters_at_kill, lines_at_kill = _count(log, "raw-dlq"), feeder.written
    feeder.append(100)  # lines the restarted sink reads first
    raw_lines = feeder.written
    raw_good = [i for i in range(raw_lines) if i % 10 != 3]
    raw_bad = [i for i in range(raw_lines) if i % 10 == 3]
    unacknowledged = {int(p.name[1:7]) for p in queue.glob("*.msg")}
    assert 0 < polled_at_kill < MESSAGES and 0 < letters_at_kill < len(BAD), progress()

    def sink_lines() -> list[int]:
        text = written.read_text(encoding="utf-8") if written.exists() else ""
        return [int(re.search(r"-?\d+", line).group()) for line in text.splitlines()]

    proc = _start(root, queue, out, raw, written)
    try:
        wait_until(
            lambda: (
                proc.poll() is not None
                or (
                    _count(log, "people") >= len(GOOD)
                    and _count(log, "people-dlq") >= len(BAD)
                    and len({r["value"] for r in _records(log, "polled")}) >= MESSAGES
                    and _count(log, "raw-dlq") >= len(raw_bad)
                    and len(sink_lines()) >= len(raw_good)
                )
            ),
            600,
            "every message, record and dead letter after the restart",
            every=0.5,
        )
        assert proc.poll() is None, f"child failed:\n{out.read_text()[-4000:]}"
    finally:
        _kill9(proc)

    # poll-only: nothing lost; duplicates only of unacknowledged messages, at most two polls
    polled = collections.Counter(int(r["value"].split()[-1]) for r in _records(log, "polled"))
    assert sorted(polled) == list(range(MESSAGES)), "messages lost"
    twice = {m for m, n in polled.items() if n > 1}
    duplicates = sum(polled.values()) - MESSAGES
    print(
        f"at the kill: {polled_at_kill}/{MESSAGES} messages in the topic, "
        f"{len(unacknowledged)} unacknowledged; {duplicates} duplicates after the restart "
        f"(bound {IN_FLIGHT}); {letters_at_kill}/{len(BAD)} dead letters at the kill"
    )
    assert max(polled.values()) <= 2 and twice <= unacknowledged, sorted(twice - unacknowledged)
    assert duplicates <= IN_FLIGHT

    # dead letters: each bad record once, each good one once in the topic
    letters = collections.Counter(_dead_letter_id(r) for r in _records(log, "people-dlq"))
    assert sorted(letters) == BAD and set(letters.values()) == {1}, letters.most_common(3)
    keys = sorted(int(r["key"]) for r in _records(log, "people"))
    assert keys == GOOD

    # the sink's dead letters: each malformed line once, each good line once in the file
    print(
        f"sink: {sink_letters_at_kill} dead letters at the kill, {lines_at_kill} lines appended "
        f"by then, {raw_lines} in all"
    )
    sink_letters = collections.Counter(
        int(r["value"].decode().split("oops")[1].rstrip("}")) for r in _records(log, "raw-dlq")
    )
    assert sorted(sink_letters) == raw_bad, "sink dead letters lost"
    assert set(sink_letters.values()) == {1}, sink_letters.most_common(3)
    lines = sink_lines()
    assert sorted(lines) == raw_good and len(lines) == len(set(lines)), "sink lines lost/doubled"
    assert _count(log, "raw") == raw_lines  # each line once in the topic too
    log.close()
