"""A connector stopped while a micro-batch is in its commit phase (a config change or a pause
while records flow) lets the batch end first: a fresh run (what a changed config starts) must
not deliver that batch again. `StreamingQuery.stop` alone cut it off after its side effects and
before Spark logged it, so the stop saved the positions of the batch before (found by
bench/chaos_worker.py: records twice in the topic after `PUT …/config`)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import wait_until, whole_lines
from tests.integration.flaky_sinks import lines_in_topic

pytestmark = pytest.mark.spark


def test_stop_waits_for_the_batch_in_its_commit_then_a_fresh_run_goes_on(
    runner, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    lines_in_topic(runner, src, 50)
    conf = {
        "connector.class": "tests.integration.flaky_sinks.GatedSink",
        "path": str(out),
        "connect.topicnames": "t",
    }
    runner.start("dst", conf)
    flushing = Path(f"{out}.flushing")
    wait_until(flushing.exists, 120, "the first batch to reach its flush")

    stopper = threading.Thread(target=runner.stop, args=("dst",))
    stopper.start()
    stopper.join(1.5)  # the stop is under way while the batch is held in its flush
    Path(f"{out}.gate").touch()
    stopper.join(60)
    assert not stopper.is_alive()

    runner.reset_run("dst")  # what PUT …/config does: a fresh run from the stored positions
    with open(src, "a") as f:
        f.write("".join(f"r{i}\n" for i in range(50, 60)))
    runner.start("dst", conf)
    wait_until(lambda: len(whole_lines(out)) >= 60, 120, "60 delivered")
    lines = whole_lines(out)
    assert sorted(lines, key=lambda v: int(v[1:])) == [f"r{i}" for i in range(60)], len(lines)
