"""The one SparkSession of a worker (or of a test session)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping

from pyspark import SparkContext
from pyspark.sql import SparkSession

from sluice.engine import class_archive as class_archives
from sluice.engine.zygote import CLIENT, own_socket
from sluice.engine.zygote import ENV as ZYGOTE_ENV
from sluice.engine.zygote import start as start_zygote

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    # Bigger Arrow batches between the JVM and Python workers: fewer, cheaper hand-offs.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # Spark's default checkpoint file manager writes through Hadoop's FileContext, whose local file
    # system (without Hadoop's native library) runs `chmod` in a child process for each file it
    # creates (seen with strace). The FileSystem-based manager, which still runs that chmod, writes
    # the same temporary file + checksum + rename in about a quarter of the time: 190 -> 50 ms per
    # log, twice per micro-batch, with 10 connectors on 2 cores (bench/README.md, latency). The
    # store root is a POSIX path, where its rename is atomic.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    "spark.driver.memory": "4g",
    "spark.ui.showConsoleProgress": "false",
    # Python workers forked with pyspark, pyarrow and sluice already imported (see the module).
    "spark.python.daemon.module": "sluice.engine.worker_daemon",
    # The JIT's optimising tier (C2) only for code that stays hot ten times longer than its
    # defaults: the driver's streaming loop, planning and RPC are lukewarm and cost C2 ~4 s of CPU
    # per 30 s JDBC copy; the row loops of transforms on the JVM path are hot enough to get there.
    # Measured in bench/README.md (C1 alone was faster for fused pipelines, 1.2-1.9x slower
    # with transforms).
    "spark.driver.extraJavaOptions": " ".join(
        (
            "-XX:Tier4InvocationThreshold=50000",
            "-XX:Tier4MinInvocationThreshold=6000",
            "-XX:Tier4CompileThreshold=150000",
            "-XX:Tier4BackEdgeThreshold=400000",
        )
    ),
}

#: Settings sluice needs whatever the worker config says (they win over `conf`).
REQUIRED: dict[str, str] = {
    # sluice's Time travels as Spark's TIME(6) (a preview type in Spark 4.3). With the flag off
    # (Spark's default) a Python data source can produce TIME values and `to_json`/`CAST … AS
    # STRING` read them, but every function returning a TIME (`CAST(… AS TIME)`,
    # `time_from_millis`, `make_time`), `mapInArrow` and the Arrow stream writers of topics and
    # sinks fail with UNSUPPORTED_TIME_TYPE. With it on, all of them work (checked on 4.3.0).
    "spark.sql.timeType.enabled": "true",
    # No `SELECT … FROM text.`/path``: SQL in a connector config (a REST client's) must not read
    # files around file.allowed.dirs (see sluice.engine.sql_guard).
    "spark.sql.runSQLOnFiles": "false",
}


def build_session(
    conf: Mapping[str, str] | None = None,
    *,
    app_name: str = "sluice",
    log_level: str = "WARN",
    zygote: bool = True,
    class_archive: bool = True,
) -> SparkSession:
    """Start (or reuse) the process's SparkSession with sluice's defaults; `conf` wins, except
    over `REQUIRED`.

    Points Spark's Python processes at this interpreter (through `spark_python`): otherwise they
    start whatever `python3` is on PATH, which lacks sluice and fails with "Python worker failed to
    connect back". A `PYSPARK_PYTHON` naming another interpreter is left alone. With `zygote`
    (and no Spark started yet in this process) and a `local` master, the Python processes Spark
    starts are forked from one preloaded process (`sluice.engine.zygote`). With `class_archive`
    the driver JVM maps the class archive of this JVM and Spark when one was built
    (`sluice.engine.class_archive`).
    """
    master = (conf or {}).get("spark.master", "local[*]")
    # only where every Python process Spark starts is on this machine and this worker's: the
    # executors of a cluster (even one on loopback) start their own
    local = master.startswith("local")
    if zygote and local and SparkContext._active_spark_context is None:
        # a zygote named by the environment may be a parent process's (a test run starting
        # workers): each process uses its own
        if os.environ.get(ZYGOTE_ENV) != own_socket():
            start_zygote()
    elif not local:
        os.environ.pop(ZYGOTE_ENV, None)
    # The driver-side planners of Python data sources start with PYSPARK_DRIVER_PYTHON.
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        if os.environ.get(name, sys.executable) == sys.executable:
            os.environ[name] = spark_python()
    settings = dict(DEFAULTS)
    if loopback_master(master):
        # Nothing outside this machine talks to a local driver, or to the driver of a cluster
        # whose master is on loopback (its executors run here too, `scripts/servers/
        # spark-cluster.sh`): keep its RPC and block-manager ports on loopback (by default Spark
        # binds the address the host name resolves to, or the first non-loopback interface when
        # that is a loopback one), and its web UI when enabled (that one binds SPARK_LOCAL_IP,
        # else 0.0.0.0; read when the JVM starts).
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.update(conf or {})
    settings.update(REQUIRED)
    if class_archive and SparkContext._active_spark_context is None:
        settings = class_archives.with_archive(settings, class_archives.archive_path())
    builder = SparkSession.builder.appName(app_name).master(settings.pop("spark.master", master))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def build_class_archive_in_background(conf: Mapping[str, str] | None = None) -> bool:
    """Start building the driver JVM's class archive if there is none yet (see
    `sluice.engine.class_archive`); True when a builder was started. Called once a worker is up,
    so the builder's throwaway Spark does not slow its start."""
    settings = {**DEFAULTS, **(conf or {})}
    return class_archives.build_in_background(settings, class_archives.archive_path())


def loopback_master(master: str) -> bool:
    """True for `local…` masters and for `spark://` masters whose hosts are all loopback
    (`spark://127.0.0.1:7077`, `spark://localhost:7077,127.0.0.1:7078`).

    Other masters (remote standalone, YARN, Kubernetes) keep Spark's own choice of driver
    address: executors elsewhere must reach the driver (set `spark.driver.host` if the host name
    does not resolve to an address they can reach).
    """
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [hp.rsplit(":", 1)[0].strip("[]") for hp in master[len("spark://") :].split(",")]
    return all(h == "localhost" or h == "::1" or h.startswith("127.") for h in hosts)


def spark_python() -> str:
    """A launcher of this interpreter for the Python processes Spark starts, which starts them
    without the pyspark and py4j zips of this pyspark installation on `PYTHONPATH`.

    Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and its own jar) ahead of everything on the
    `PYTHONPATH` of every Python process it starts (workers, their daemons, the planners and
    streaming readers of Python data sources). A zip holds no bytecode, so each such process
    compiled the pyspark modules it imports, and each task re-read the zips' directories: 1.3 s of
    CPU per process start against 0.3 s from site-packages, several processes per query
    (measured in bench/README.md). Spark's `SPARK_HOME` here is the pip-installed pyspark package,
    so the zip is the same code as site-packages, and its jars hold no Python; the entries of any
    other Spark installation are kept. The launcher is a small POSIX shell script, written once
    per distinct text.

    It also runs Spark's `pyspark.daemon` as sluice's daemon (`sluice.engine.worker_daemon`), and,
    when this worker's zygote listens (`sluice.engine.zygote`), hands `-m pyspark…`/`-m sluice…`
    starts to it through a small client instead of starting an interpreter.
    """
    import shlex

    import pyspark

    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    lib = os.path.join(home, "python", "lib")
    zips = sorted(os.path.join(lib, n) for n in os.listdir(lib) if n.endswith(".zip"))
    # Spark also adds the jar it runs from (no Python inside): every task's import-cache reset
    # re-read its directory of 6,000 entries.
    jars = shlex.quote(os.path.join(home, "jars", "")) + "*.jar"
    patterns = "|".join([*(shlex.quote(z) for z in zips), jars])
    client = _written("sluice-zygote-client", CLIENT, 0o644)
    python = shlex.quote(sys.executable)
    script = f"""#!/bin/sh
# Written by sluice.engine.session.spark_python: runs {sys.executable} for Spark without this
# pyspark installation's zips on PYTHONPATH (they duplicate site-packages, without bytecode).
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    case "$entry" in
        {patterns}) ;;
        *) kept="${{kept:+$kept:}}$entry" ;;
    esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
# Spark starts a daemon of its own (pyspark.daemon) for each kind of driver-side Python step of
# a data source (lookup, create, plan a read, plan a write, commit a streaming write): run them
# as sluice's daemon, whose forks start with the modules imported and frozen (see the module).
if [ "$1" = "-m" ] && [ "$2" = "pyspark.daemon" ]; then
    shift 2
    set -- -m sluice.engine.worker_daemon "$@"
fi
# forked from this worker's zygote when it listens (see sluice.engine.zygote)
if [ -n "$SLUICE_ZYGOTE" ] && [ -S "$SLUICE_ZYGOTE" ] && [ "$1" = "-m" ]; then
    exec {python} -S -E {shlex.quote(client)} {python} "$@"
fi
exec {python} "$@"
"""
    return _written("sluice-python", script, 0o755)


def _written(prefix: str, text: str, mode: int) -> str:
    """`text` in a file of the temporary folder named by its digest (written once)."""
    import tempfile

    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"{prefix}-{os.getuid()}-{digest}")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    return path


def activate(spark: SparkSession) -> None:
    """Make `spark` the JVM's active session in the calling thread.

    The JVM keeps the active session per thread, and Python data sources registered from a
    thread without one are not found when a query starts ([DATA_SOURCE_NOT_FOUND]): a worker
    starts queries from its REST threads.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.SparkSession.setActiveSession(spark._jsparkSession)
