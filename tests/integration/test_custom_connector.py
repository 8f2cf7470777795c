"""A connector written against the SDK only (the kind docs/sdk.md teaches) runs end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_until, whole_lines

pytestmark = pytest.mark.spark


def test_readme_counter_source_reaches_a_sink_in_limited_batches(runner, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    runner.start(
        "counter",
        {
            "connector.class": "tests.integration.counter_example.CounterSource",
            "count": "2500",
            "connect.topicname": "numbers",
            "read.max.rows": "1000",
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "FileSinkConnector",
            "filename": str(out),
            "connect.topicnames": "numbers",
        },
    )

    def lines() -> list[str]:
        for r in runner.running.values():
            assert r.query.exception() is None, r.query.exception()
        return whole_lines(out)

    wait_until(lambda: len(lines()) >= 2500, 120, "2500 numbers")
    assert lines() == [str(i) for i in range(2500)]
    # the read limit made at least three source micro-batches
    batches = {
        p["batchId"]
        for p in runner.running["counter"].query.recentProgress
        if p["numInputRows"] > 0
    }
    assert len(batches) >= 3
