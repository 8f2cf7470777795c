"""The builder of the driver JVM's class archive (`sluice.engine.class_archive` says what the
archive is, where it lives and when a worker starts this builder).

`python -m sluice.engine.class_archive_build [--detach] [PATH]` builds it: a throwaway Spark (the
worker's own session settings, `sluice.engine.session`) runs a streaming query of a Python data
source and one of Spark's own to a first batch, stops, and its JVM writes the classes it loaded
under a temporary name, renamed into place only once the JVM exited cleanly. Kept apart from the
archive's choice so that the session, which maps the archive, does not import what builds one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from sluice.engine.class_archive import (
    OPTIONS_KEY,
    archive_path,
    builder_alive,
    failure_mark,
    lock_file,
    spark_jars,
)

#: how long the builder waits for each step (Spark's start, a micro-batch, the JVM's exit)
_STEP_TIMEOUT_S = 600.0


def _origin(path: Path) -> Path:
    """The file beside an archive naming the Spark jars folder it was built from."""
    return path.with_name(path.name + ".from")


def _remove_orphans(path: Path) -> None:
    """Remove the temporary archives of builders that died (a killed builder's JVM still writes
    its archive when it exits, under the builder's temporary name), and the archives of Spark
    installations that are gone (a deleted venv's: 150+ MiB each)."""
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 1 : -len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid():
            with contextlib.suppress(OSError):
                tmp.unlink()
    for origin in path.parent.glob("*.jsa.from"):
        with contextlib.suppress(OSError):
            if not os.path.isdir(origin.read_text().strip()):
                archive = origin.with_name(origin.name[: -len(".from")])
                for stale in (archive, origin, archive.with_name(archive.name + ".log")):
                    stale.unlink(missing_ok=True)


def build(path: Path, *, idle: bool = True) -> bool:
    """Build the archive at `path` in this process (a throwaway Spark); True once it is in place.

    With `idle`, the process (and so its JVM) runs at the idle scheduling class: it takes only
    CPU time nothing else wants."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_file(path)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if builder_alive(path):
            return False
        lock.unlink(missing_ok=True)  # its builder died: take over
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # another builder took over first
            return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    _remove_orphans(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if idle:
            with contextlib.suppress(OSError, AttributeError):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        if _run_and_dump(tmp) and tmp.is_file() and tmp.stat().st_size > 0:
            os.replace(tmp, path)
            _origin(path).write_text(spark_jars())
            failure_mark(path).unlink(missing_ok=True)
            return True
        return False
    finally:
        tmp.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def _run_and_dump(tmp: Path) -> bool:
    """Start Spark with the JVM told to write its classes to `tmp` at exit, run the workload, stop
    Spark and end the JVM; True when the JVM exited cleanly (the archive is then complete)."""
    from pyspark import SparkContext

    from sluice.engine.session import DEFAULTS, build_session

    options = f"{DEFAULTS[OPTIONS_KEY]} -XX:ArchiveClassesAtExit={tmp}"
    spark = build_session(
        {"spark.master": "local[1]", "spark.driver.memory": "1g", OPTIONS_KEY: options},
        app_name="sluice-class-archive",
        log_level="ERROR",
        zygote=False,
        class_archive=False,
    )
    gateway = SparkContext._gateway
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sluice-class-archive-{os.getpid()}"
    try:
        _workload(spark, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return False
    # Spark's gateway ends its JVM when its standard input closes; the archive is written then
    proc.stdin.close()
    return proc.wait(timeout=_STEP_TIMEOUT_S) == 0


def _workload(spark, work: Path) -> None:  # type: ignore[no-untyped-def]
    """What loads the classes a worker needs: a streaming query of a Python data source (Spark's
    Python planner and reader, Arrow) and of Spark's own rate source, each to a first batch."""
    from sluice.engine._warm_source import WarmSource

    spark.dataSource.register(WarmSource)
    queries = [
        spark.readStream.format(fmt)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(work / fmt))
        .start()
        for fmt in (WarmSource.name(), "rate")
    ]
    deadline = time.monotonic() + _STEP_TIMEOUT_S
    try:
        while any(_rows(q) == 0 for q in queries):
            failed = [q.exception() for q in queries if not q.isActive]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"the class-archive workload did not run: {failed}")
            time.sleep(0.1)
    finally:
        for q in queries:
            with contextlib.suppress(Exception):
                q.stop()


def _rows(query) -> int:  # type: ignore[no-untyped-def]
    return sum(p.get("numInputRows", 0) for p in query.recentProgress)


def main(argv: list[str]) -> int:
    """`python -m sluice.engine.class_archive_build [--detach] [PATH]`: build the archive (at
    PATH, by default this JVM's and Spark's in the cache) unless it exists; print where it is."""
    detach = "--detach" in argv
    rest = [a for a in argv if a != "--detach"]
    path = Path(rest[0]) if rest else archive_path()
    if path is None:
        print("no java found: no class archive", file=sys.stderr)
        return 1
    if path.exists():
        print(path)
        return 0
    if detach and os.fork() > 0:
        return 0  # the worker's child exits at once; the grandchild builds
    path.parent.mkdir(parents=True, exist_ok=True)
    shown = os.dup(1)
    # the throwaway Spark's and the JVM's dump messages (hundreds of classes CDS skips) go to a
    # log beside the archive, not to whoever started the build
    with open(path.with_name(path.name + ".log"), "wb") as quiet:
        os.dup2(quiet.fileno(), 1)
        os.dup2(quiet.fileno(), 2)
    try:
        done = build(path, idle=detach)
    except Exception:  # e.g. Spark did not start: said in the log, the exit code says it failed
        traceback.print_exc()
        done = False
    os.dup2(shown, 1)
    if not done and not path.exists() and not builder_alive(path):
        with contextlib.suppress(OSError):
            failure_mark(path).touch()
    print(path if done else f"class archive not built: see {path}.log", flush=True)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
