"""SinkTaskContext requests reach the topic reader: reset_offset replays a queue."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import wait_until, whole_lines

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("fused", ["true", "false"])
def test_reset_offset_from_a_sink_task_replays_the_queue(runner, tmp_path: Path, fused) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("".join(f"v{i}\n" for i in range(100)))
    runner.start(
        "src",
        {"connector.class": "FileSourceConnector", "filename": str(src), "connect.topicname": "t"},
    )
    wait_until(lambda: runner.bus.count("t") == 100, 60, "100 in the topic")
    runner.start(
        "dst",
        {
            "connector.class": "tests.integration.control_sinks.ResetOnceSink",
            "path": str(out),
            "connect.topicnames": "t",
            "pipeline.fused": fused,
        },
    )

    def values() -> Counter:
        for r in runner.running.values():
            assert r.query.exception() is None, r.query.exception()
        return Counter(json.loads(line)["value"] for line in whole_lines(out))

    wait_until(lambda: sum(values().values()) >= 200, 120, "the replayed queue")
    assert values() == Counter({f"v{i}": 2 for i in range(100)})  # once, then once more
    # the reset was applied once and acknowledged: nothing more arrives with new data
    with open(src, "a") as f:
        f.write("v100\n")
    wait_until(lambda: values()["v100"] == 1, 60, "the next line")
    assert sum(values().values()) == 201
