"""Start-time check: is the store root shared with the executors of the Spark cluster?

With `spark.master` on a cluster, the executors write what the driver then reads (staged topic
segments and rows, sink parts) under `storePathRootDir`, and the driver writes what they read
(Spark checkpoints, positions); a path that is only local to the driver's host breaks this in ways
that show up late and far away (a batch that finds no staged files). So a worker whose master is
not `local…` checks it before it starts any connector, with real files rather than a guess from
the path's name:

1. the driver writes a random token to `<root>/.shared-path-probe/<id>/driver`;
2. a Spark job (one task per executor core, at least two) reads that token on the executors and
   writes one file per task with the executor's own token, host and Python;
3. the driver reads those files back.

Any step that fails is reported as a `ConfigException` naming `storePathRootDir`, with the
executor hosts that did not see the driver's file; a cluster that runs no probe task within
`cluster.shared.path.check.timeout.ms` is reported naming `spark.master`.
`cluster.shared.path.check=false` turns the check off (for a path known to be shared, to save the
seconds the job takes).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import threading
import uuid
from typing import Any

from pyspark.sql import SparkSession

from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException

log = logging.getLogger(__name__)

PROBE_DIR = ".shared-path-probe"


def check_shared_store_root(spark: SparkSession, config: WorkerConfig) -> None:
    """Raise `ConfigException` unless the executors of a non-local master share the store root.

    Runs on the driver, once, at worker start (a Spark job of a few tiny tasks). Does nothing for
    `local…` masters or with `cluster.shared.path.check=false`.
    """
    master = spark.sparkContext.master
    if master.startswith("local") or not config.cluster.shared_path_check:
        return
    probe = os.path.join(config.store_root, PROBE_DIR, uuid.uuid4().hex)
    os.makedirs(probe)
    try:
        token = uuid.uuid4().hex
        with open(os.path.join(probe, "driver"), "w", encoding="utf-8") as f:
            f.write(token)
        results = _run_probe(spark, probe, token, config.cluster.shared_path_check_timeout_ms)
        _judge(config.store_root, probe, results)
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _run_probe(spark: SparkSession, probe: str, token: str, timeout_ms: int) -> list[dict]:
    sc = spark.sparkContext
    tasks = max(2, sc.defaultParallelism)
    group = f"sluice-shared-path-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def run() -> None:
        sc.setJobGroup(group, "sluice: is storePathRootDir shared with the executors?", True)
        try:
            rdd = sc.parallelize(range(tasks), tasks)
            outcome["rows"] = rdd.map(lambda i: _executor_probe(probe, token, i)).collect()
        except Exception as exc:  # reported below, with the key
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="shared-path-check", daemon=True)
    thread.start()
    thread.join(timeout_ms / 1000)
    if thread.is_alive():
        sc.cancelJobGroup(group)
        raise ConfigException(
            "spark.master",
            f"no executor of {sc.master} ran the shared-path probe within {timeout_ms} ms",
            suggestion="check that the cluster is up and has free cores (its web UI), or set "
            "cluster.shared.path.check.timeout.ms",
        )
    if "error" in outcome:
        raise ConfigException(
            "spark.master",
            f"the shared-path probe failed on the executors of {sc.master}: "
            f"{str(outcome['error']).splitlines()[0][:500]}",
            suggestion="executors need the driver's Python environment with sluice installed; "
            "see docs/spark-cluster.md",
        )
    return outcome["rows"]


def _executor_probe(probe: str, token: str, index: int) -> dict:
    """Runs on an executor: read the driver's token, write one of its own; never raises (a failure
    is data the driver reports with the host it happened on)."""
    import sluice

    row = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": sys.executable,
        "sluice": os.path.dirname(os.path.abspath(sluice.__file__)),
        "token": uuid.uuid4().hex,
        "error": None,
        "index": index,
    }
    try:
        with open(os.path.join(probe, "driver"), encoding="utf-8") as f:
            seen = f.read()
        if seen != token:
            raise ValueError("it holds another token (a different directory under the same path)")
        with open(os.path.join(probe, f"executor-{index}"), "w", encoding="utf-8") as f:
            f.write(row["token"])
    except (OSError, ValueError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def _judge(root: str, probe: str, rows: list[dict]) -> None:
    problems = [f"{r['host']} (pid {r['pid']}): {r['error']}" for r in rows if r["error"]]
    for r in rows:
        if r["error"]:
            continue
        try:
            with open(os.path.join(probe, f"executor-{r['index']}"), encoding="utf-8") as f:
                if f.read() != r["token"]:
                    problems.append(f"{r['host']}: its file holds another token on the driver")
        except OSError as exc:
            problems.append(f"{r['host']}: the driver cannot read its file: {exc}")
    if problems:
        raise ConfigException(
            "storePathRootDir",
            f"{root} is not shared between this driver ({socket.gethostname()}) and the Spark "
            f"executors; the probe under {os.path.join(root, PROBE_DIR)} found: "
            + "; ".join(problems[:5]),
            suggestion="put storePathRootDir on a file system every executor mounts at the same "
            "path (NFS, an HDFS NFS gateway…), see docs/spark-cluster.md; "
            "cluster.shared.path.check=false skips this check",
        )
    pythons = sorted({f"{r['host']}: {r['python']} (sluice from {r['sluice']})" for r in rows})
    log.info(
        "storePathRootDir %s is shared with the executors (%d probe tasks); executors run %s",
        root,
        len(rows),
        "; ".join(pythons),
    )
