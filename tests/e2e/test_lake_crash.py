"""kill -9 of a worker writing one topic into Parquet, Delta Lake and Iceberg, during commits.

The child (`lake_child.py`) is killed with its whole process group (JVM included) once every
table holds part of the topic, started again, and left to finish; `SLUICE_CRASH_ROUNDS` kills
more than once, `SLUICE_LAKE_RECORDS` sets the size (`make crash-lake`: 1M records, two kills).
Then each table holds every record of the topic exactly once (and the topic holds each once),
every Delta version and every Iceberg snapshot reads, and each version/snapshot is one micro-batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sluice.bus.embedded import EmbeddedLog
from tests.conftest import wait_until
from tests.e2e.children import kill9, start_child
from tests.e2e.lake_child import targets
from tests.integration.lake_data import fill, iceberg_table

# more than the default 300 s on a loaded 2-core machine: a kill -9 and a restart of a Spark process
# writing three lakes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHILD = Path(__file__).with_name("lake_child.py")
RECORDS = int(os.environ.get("SLUICE_LAKE_RECORDS", "30000"))
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))
#: rows per queue and micro-batch: many commits per run (a 1M run takes bigger ones)
BATCH_ROWS = max(1000, RECORDS // 40)


def _start(root: Path, lake: Path, log: Path) -> subprocess.Popen:
    return start_child(CHILD, [str(root), str(lake), str(BATCH_ROWS)], log)


def _ids(kind: str, where: dict[str, str]) -> pa.ChunkedArray:
    """The `id` column of the table as committed now (empty before its first commit)."""
    try:
        if kind == "parquet":
            import pyarrow.dataset as ds

            return ds.dataset(where["path"], format="parquet").to_table(columns=["id"])["id"]
        if kind == "delta":
            from deltalake import DeltaTable

            return pa.table(DeltaTable(where["delta.table.path"]).to_pyarrow_table(columns=["id"]))[
                "id"
            ]
        table = iceberg_table(where["iceberg.warehouse"], where["iceberg.table"])
        return table.scan(selected_fields=("id",)).to_arrow()["id"]
    except Exception:  # not created yet, or (Parquet) a file renamed while listing
        return pa.chunked_array([], pa.int64())


def _counts(lake: Path) -> dict[str, int]:
    return {kind: len(_ids(kind, where)) for kind, where in targets(str(lake)).items()}


def _topic_count(root: Path) -> int:
    log = EmbeddedLog(root / "bus")
    try:
        return sum(r.max_offset for r in log.offsets("orders").values())
    finally:
        log.close()


def test_kill_9_during_commits_each_record_once_every_version_readable(tmp_path: Path) -> None:
    root, lake, out = tmp_path / "store", tmp_path / "lake", tmp_path / "child.log"
    started = time.monotonic()
    for first in range(0, RECORDS, 100_000):
        fill(root, "orders", first, min(100_000, RECORDS - first))
    assert _topic_count(root) == RECORDS
    kills = []
    for round_ in range(ROUNDS):
        proc = _start(root, lake, out)
        # past its share and past the last kill: a condition that held already would kill the
        # child before it wrote anything
        least = max(
            RECORDS * (round_ + 1) / (ROUNDS + 1) * 0.3, min(kills[-1].values()) + 1 if kills else 0
        )
        try:
            wait_until(
                lambda p=proc, n=least: p.poll() is not None or min(_counts(lake).values()) >= n,
                900,
                "every table part-way",
                every=1.0,  # reading three tables costs: leave the CPU to the child
            )
            assert proc.poll() is None, f"child exited early:\n{out.read_text()[-4000:]}"
        finally:
            kill9(proc)
        kills.append(_counts(lake))
    # the three queries run at their own pace: each had committed some, not all had finished
    assert all(n > 0 for k in kills for n in k.values()), kills
    assert all(min(k.values()) < RECORDS for k in kills), kills

    proc = _start(root, lake, out)
    try:
        wait_until(
            lambda: proc.poll() is not None or min(_counts(lake).values()) >= RECORDS,
            1800,
            "every table complete after the restart",
            every=1.0,
        )
        assert proc.poll() is None, f"child failed:\n{out.read_text()[-4000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    print(f"{RECORDS} records, kills at {kills}, {time.monotonic() - started:.0f} s in all")

    assert _topic_count(root) == RECORDS  # each record once in the topic
    for kind, where in targets(str(lake)).items():
        ids = _ids(kind, where).to_pylist()
        assert len(ids) == RECORDS and len(set(ids)) == RECORDS, (kind, len(ids), len(set(ids)))
    _every_version_reads(targets(str(lake)))


def _every_version_reads(where: dict[str, dict[str, str]]) -> None:
    from deltalake import DeltaTable

    path = where["delta"]["delta.table.path"]
    table = DeltaTable(path)
    sizes = []
    for version in range(table.version() + 1):
        table.load_as_version(version)
        sizes.append(len(pa.table(table.to_pyarrow_table(columns=["id"]))))
    assert sizes == sorted(sizes) and sizes[-1] == RECORDS, sizes
    batches = [h["sluice.batch"] for h in DeltaTable(path).history() if "sluice.batch" in h]
    assert len(batches) == len(set(batches)) == len(sizes), batches  # one version per batch

    iceberg = iceberg_table(where["iceberg"]["iceberg.warehouse"], "shop.orders")
    snapshots = sorted(iceberg.snapshots(), key=lambda s: s.sequence_number)
    rows = [len(iceberg.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in snapshots]
    assert rows == sorted(rows) and rows[-1] == RECORDS, rows
    keys = [(s.summary["sluice.app"], s.summary["sluice.batch"]) for s in snapshots]
    assert len(keys) == len(set(keys)), keys  # no micro-batch appended twice
