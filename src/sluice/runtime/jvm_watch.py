"""Noticing that the worker's Spark JVM is gone, so that the worker exits instead of living on.

A worker drives one JVM (the Spark driver; in `local[*]` mode its executors too) through
PySpark's py4j gateway. When that JVM dies (killed, out of memory, or exited by Spark itself: a
fatal error in a task thread, such as a `StackOverflowError`, makes Spark's uncaught-exception
handler end the JVM), every query dies with it and every later call fails
(`ConnectionRefusedError`), but the Python process, its REST API and its stores go on: statuses
said RUNNING over nothing, creates answered 200 and then failed, the log grew by dozens of lines a
second. Nothing inside the process can bring a JVM back (PySpark starts one per process), so the
way out is to exit non-zero and let the supervisor (systemd, Kubernetes, a shell loop) start the
worker again: it resumes every connector from its checkpoint.

`jvm_gone` says whether (and why) the JVM cannot run queries any more; `JvmWatch` asks it every
second from a thread of its own and calls back once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: How often the watch asks (seconds).
INTERVAL_S = 1.0


def jvm_gone(spark: SparkSession) -> str | None:
    """Why the JVM behind `spark` cannot run queries any more, or None while it can.

    Its process has exited (PySpark keeps the `Popen` of the JVM it launched), its
    SparkContext is stopped, or the py4j gateway does not answer.
    """
    context = spark.sparkContext
    process = getattr(getattr(context, "_gateway", None), "proc", None)
    if process is not None and process.poll() is not None:
        return f"the Spark JVM (pid {process.pid}) exited with code {process.returncode}"
    jsc = getattr(context, "_jsc", None)
    if jsc is None:
        return "the SparkContext was stopped"
    try:
        if jsc.sc().isStopped():
            return "the SparkContext was stopped"
    except Exception as exc:  # py4j: the gateway is closed or nobody listens any more
        return f"the Spark JVM does not answer ({type(exc).__name__}: {exc})"
    return None


class JvmWatch:
    """Asks `jvm_gone` every `interval_s` seconds on a daemon thread; when two answers in a row
    say the JVM is gone (one py4j hiccup is not a death), calls `on_gone(reason)` once and
    stops. `stop` before stopping Spark on purpose."""

    def __init__(
        self,
        spark: SparkSession,
        on_gone: Callable[[str], None],
        *,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._spark = spark
        self._on_gone = on_gone
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-jvm-watch", daemon=True)

    def start(self) -> JvmWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        strikes = 0
        while not self._stopped.wait(self._interval_s):
            try:
                reason = jvm_gone(self._spark)
            except Exception as exc:  # never let the watch itself die silently
                reason = f"the Spark JVM cannot be asked ({type(exc).__name__}: {exc})"
            strikes = strikes + 1 if reason else 0
            if reason and strikes >= 2 and not self._stopped.is_set():
                self._stopped.set()
                self._on_gone(reason)
                return
