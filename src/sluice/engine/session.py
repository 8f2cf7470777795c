"""The one SparkSession of a worker (or of a test session)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    # Bigger Arrow batches between the JVM and Python workers: fewer, cheaper hand-offs.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.driver.memory": "4g",
    "spark.ui.showConsoleProgress": "false",
    # Python workers forked with pyspark, pyarrow and sluice already imported (see the module).
    "spark.python.daemon.module": "sluice.engine.worker_daemon",
}


def build_session(
    conf: Mapping[str, str] | None = None, *, app_name: str = "sluice", log_level: str = "WARN"
) -> SparkSession:
    """Start (or reuse) the process's SparkSession with sluice's defaults; `conf` wins.

    Points Spark's Python workers at this interpreter: otherwise they start whatever `python3` is on
    PATH, which lacks sluice and fails with "Python worker failed to connect back".
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = dict(DEFAULTS)
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(
        settings.pop("spark.master", "local[*]")
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def activate(spark: SparkSession) -> None:
    """Make `spark` the JVM's active session in the calling thread.

    The JVM keeps the active session per thread, and Python data sources registered from a
    thread without one are not found when a query starts ([DATA_SOURCE_NOT_FOUND]): a worker
    starts queries from its REST threads.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.SparkSession.setActiveSession(spark._jsparkSession)
