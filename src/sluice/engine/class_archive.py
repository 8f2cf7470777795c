"""A class-data-sharing archive of the driver JVM: Spark's classes mapped from one file at start
instead of being read from ~250 jars, parsed and verified every time a worker starts.

A worker's Spark start is mostly the JVM loading classes on two cores: launching the gateway,
the SparkContext and the SparkSession took 11.0 s, and the first micro-batch of a query another
5.1 s. With HotSpot's application class-data sharing (AppCDS, JDK 13+: `-XX:ArchiveClassesAtExit`
writes the classes a run loaded into an archive when its JVM exits, `-XX:SharedArchiveFile` maps
them at the next start) the same steps took 5.2 s and 2.1 s (bench/README.md, "Spark's start").

The archive belongs to one JVM build and one Spark installation (HotSpot refuses, and falls back
to loading classes as before, when either differs), so its file name is a digest of both; it lives
in the user's cache (`$XDG_CACHE_HOME/sluice/jvm`, else `~/.cache/sluice/jvm`). A worker that finds
none starts a builder (`python -m sluice.engine.class_archive`) once it is up: a detached process at
idle CPU priority that starts a throwaway Spark, runs a streaming query of a Python data source and
one of Spark's own, stops, and lets its JVM write the archive under a temporary name, which it
renames into place only once the JVM exited cleanly — so a half-written archive is never mapped. A
lock file keeps a second builder from starting while one runs, and a build that failed (its
reason is in the log beside the archive) is not started again in the background for a day: a
JVM that cannot build one (a broken or unusual Java) would otherwise cost a throwaway Spark at
every worker start. `make test` (so CI) builds it up front; `make jvm-archive` tries at once.

A driver whose options already decide about class sharing (`-Xshare:…`, `-XX:SharedArchiveFile`,
`-XX:ArchiveClassesAtExit` in `spark.driver.extraJavaOptions`) or that changes the JVM's class path
(`spark.driver.extraClassPath`) is left alone: `-Xshare:off` there turns the archive off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

log = logging.getLogger(__name__)

OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: options by which the user has decided about class sharing already
_OWN_DECISION = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
#: how long the builder waits for each step (Spark's start, a micro-batch, the JVM's exit)
_STEP_TIMEOUT_S = 600.0
#: how long after a failed build a worker does not start another in the background
RETRY_FAILED_AFTER_S = 24 * 3600.0


def cache_dir() -> Path:
    """Where archives are kept: `$XDG_CACHE_HOME/sluice/jvm`, else `~/.cache/sluice/jvm`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sluice" / "jvm"


def _java() -> str | None:
    """The `java` Spark's launcher runs (`$JAVA_HOME/bin/java`, else the first on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_path(directory: Path | None = None) -> Path | None:
    """The archive for this JVM and Spark installation (it may not exist yet); None when there is
    no `java` to name it by."""
    java = _java()
    if java is None:
        return None
    from pyspark import __version__ as pyspark_version

    digest = hashlib.sha256()
    for part in _identity(java, Path(_spark_jars())):
        digest.update(part.encode() + b"\0")
    name = f"spark-{pyspark_version}-{digest.hexdigest()[:16]}.jsa"
    return (directory or cache_dir()) / name


def _identity(java: str, jars: Path) -> Iterator[str]:
    """What the archive depends on: the JVM binary (and its library), and where the jars it
    loads from are and what they are."""
    for path in (java, os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "server",
                                    "libjvm.so")):  # fmt: skip
        with contextlib.suppress(OSError):
            st = os.stat(path)
            yield f"{path}:{st.st_size}:{st.st_mtime_ns}"
    yield str(jars)  # the archive records the class path: another installation needs its own
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(jars), key=lambda e: e.name):
            yield f"{entry.name}:{entry.stat().st_size}"


def applies(conf: Mapping[str, str]) -> bool:
    """Whether sluice may choose the driver's class sharing under these Spark settings."""
    options = conf.get(OPTIONS_KEY, "")
    return not conf.get("spark.driver.extraClassPath") and not any(
        flag in options for flag in _OWN_DECISION
    )


def with_archive(conf: Mapping[str, str], path: Path | None) -> dict[str, str]:
    """`conf` with the driver mapping the archive at `path`, when it exists and `applies`."""
    out = dict(conf)
    if path is not None and path.is_file() and applies(conf):
        out[OPTIONS_KEY] = f"{conf.get(OPTIONS_KEY, '')} -XX:SharedArchiveFile={path}".strip()
    return out


# ------------------------------------------------------------------------------- building one
def build_in_background(conf: Mapping[str, str], path: Path | None) -> bool:
    """Start a detached builder of the archive at `path` if there is none and none is being built;
    True when one was started. Never raises: a worker runs as well without an archive."""
    if path is None or path.exists() or not applies(conf):
        return False
    if failed_recently(path):
        log.info("no class archive for the driver JVM: its last build failed (see %s.log)", path)
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if _builder_alive(path):
            return False
        # double fork (start_new_session + the builder's own fork): not in the worker's process
        # tree, not in its session, not killed with it
        subprocess.Popen(
            [sys.executable, "-m", "sluice.engine.class_archive", "--detach", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ).wait(timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("no class archive built for the driver JVM (%s: %s)", type(exc).__name__, exc)
        return False
    log.info("building the driver JVM's class archive %s in the background", path)
    return True


def _lock(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _failure_mark(path: Path) -> Path:
    """The file a failed build leaves beside the archive (its time is the failure's)."""
    return path.with_name(path.name + ".failed")


def failed_recently(path: Path) -> bool:
    """Whether a build of `path` failed less than `RETRY_FAILED_AFTER_S` ago."""
    try:
        return time.time() - _failure_mark(path).stat().st_mtime < RETRY_FAILED_AFTER_S
    except OSError:
        return False


def _builder_alive(path: Path) -> bool:
    try:
        pid = int(_lock(path).read_text().strip() or "0")
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _origin(path: Path) -> Path:
    """The file beside an archive naming the Spark jars folder it was built from."""
    return path.with_name(path.name + ".from")


def _spark_jars() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "jars")


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
    lock = _lock(path)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if _builder_alive(path):
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
            _origin(path).write_text(_spark_jars())
            _failure_mark(path).unlink(missing_ok=True)
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
    """`python -m sluice.engine.class_archive [--detach] [PATH]`: build the archive (at PATH, by
    default this JVM's and Spark's in the cache) unless it exists; print where it is."""
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
    if not done and not path.exists() and not _builder_alive(path):
        with contextlib.suppress(OSError):
            _failure_mark(path).touch()
    print(path if done else f"class archive not built: see {path}.log", flush=True)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
