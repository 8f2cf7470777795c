"""Spark's Python worker daemon, with the modules every sluice worker needs imported once.

Spark forks a Python worker from a daemon process for each task, and for each planning step of a
Python data source on the driver. The stock daemon imports almost nothing before it forks, so
every worker imports pyspark (from a zip without bytecode: it is compiled each time), pyarrow,
numpy and sluice again: about 1 s of CPU per worker, several workers per micro-batch. A profile of
`bench/jdbc_copy.py` put 30% of all Python CPU in imports.

Named in `spark.python.daemon.module` (see `sluice.engine.session`), this module imports them in
the daemon and then runs pyspark's own daemon, so every forked worker starts with them loaded.
pyspark's daemon avoids this because pandas and pyarrow start threads when imported and a fork
copies none of them: the two that start here are numpy's BLAS pool (kept from starting) and
jemalloc's background thread, whose allocator takes its locks around `fork` itself.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

# Modules each kind of worker imports (the worker module itself, given as argv[1], too). An import
# that fails is left to the worker, which reports it where it belongs, with the task.
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.commit_data_source_write",
    "pyarrow.compute",
    # pyarrow imports pandas on a worker's first `pa.array(list)` (~0.3 s of CPU); it starts no
    # thread (checked with pandas 2.3 and no numexpr/bottleneck installed)
    "pandas",
    "pyarrow.csv",
    "pyarrow.ipc",
    # what the workers imported after their fork (an import audit hook in the zygote's children,
    # a file pipeline on the embedded bus): each import left 1-2 MB of private objects in every
    # worker; loaded here, its pages stay shared. `group_by` imports acero, which imports dataset.
    "pyarrow.pandas_compat",
    "pyarrow.acero",
    "pyarrow.dataset",
    "sqlite3",
    "concurrent.futures.thread",
    "encodings.idna",
    "sluice.store",
    "sluice.engine.counting",
    "sluice.bus.embedded",
    # the broker buses' executor-side writers (confluent_kafka's ~30 modules on the Kafka bus)
    "sluice.bus.kafka",
    "sluice.bus.rocketmq",
    "sluice.engine.direct",
    "sluice.engine.source",
    "sluice.engine.sink",
    "sluice.engine.source_errors",
    "sluice.bus.spark",
    "sluice.converters",
    # the built-in connectors, by name only (the engine does not depend on them)
    "sluice.connectors.file",
    "sluice.connectors.jdbc.sink",
    "sluice.connectors.jdbc.source",
    "sluice.connectors.rocketmq",
    "sluice.connectors.kafka",
    # what the JDBC connectors import when they first connect (~0.5 s of CPU per worker)
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "psycopg",
    "pymysql",
)


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `names` (and the worker module named by argv[1]); return those that failed."""
    failed = []
    for name in (*names, *sys.argv[1:2]):
        try:
            importlib.import_module(name)
        except Exception:  # the worker imports it again and reports it
            failed.append(name)
    return failed


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no pool thread to fork
    preload()
    from pyspark.daemon import manager

    # pyspark's forked worker runs a full `gc.collect()` after every task: over the ~1M objects
    # of the modules imported above that took most of a worker's CPU (a profile of a trickled
    # file pipeline: 93% of the task workers' samples, 85% of the commit runners'). Frozen,
    # they are skipped by every collection of the forked workers (and their pages stay shared).
    gc.collect()
    gc.freeze()
    manager()
