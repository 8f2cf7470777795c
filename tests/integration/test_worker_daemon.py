"""Spark's Python workers come from sluice's preloading daemon (`sluice.engine.worker_daemon`)."""

from __future__ import annotations

import sys
from typing import Any

from sluice.engine import worker_daemon


def _worker_state(rows: Any) -> Any:
    import sys

    import pyarrow as pa

    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    for _ in rows:
        pass
    yield pa.RecordBatch.from_pydict(
        {
            "daemon": [spec.name if spec else ""],
            "preloaded": ["sluice.engine.direct" in sys.modules],
        }
    )


def test_workers_are_forked_from_the_preloading_daemon(spark: Any) -> None:
    out = (
        spark.range(1, numPartitions=1)
        .mapInArrow(_worker_state, "daemon string, preloaded boolean")
        .collect()
    )
    assert out[0]["daemon"] == "sluice.engine.worker_daemon"
    assert out[0]["preloaded"] is True


def test_preload_reports_what_it_could_not_import(monkeypatch: Any) -> None:
    monkeypatch.setattr(sys, "argv", ["daemon", "json"])
    assert worker_daemon.preload(("sluice.no_such_module", "csv")) == ["sluice.no_such_module"]
    assert "json" in sys.modules and "csv" in sys.modules
