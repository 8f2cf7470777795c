"""A class-data-sharing archive of the driver JVM: Spark's classes mapped from one file at start
instead of being read from ~250 jars, parsed and verified every time a worker starts.

A worker's Spark start is mostly the JVM loading classes on two cores: launching the gateway,
the SparkContext and the SparkSession took 11.0 s, and the first micro-batch of a query another
5.1 s. With HotSpot's application class-data sharing (AppCDS, JDK 13+: `-XX:ArchiveClassesAtExit`
writes the classes a run loaded into an archive when its JVM exits, `-XX:SharedArchiveFile` maps
them at the next start) the same steps took 5.2 s and 2.1 s (bench/README.md, "Spark's start").

The archive belongs to one JVM build and one Spark installation (HotSpot refuses, and falls back to
loading classes as before, when either differs), so its file name is a digest of both; it lives in
the user's cache (`$XDG_CACHE_HOME/sluice/jvm`, else `~/.cache/sluice/jvm`). A worker that finds
none starts a builder (`python -m sluice.engine.class_archive_build`) once it is up: a detached
process at idle CPU priority that starts a throwaway Spark, runs a streaming query of a Python data
source and one of Spark's own, stops, and lets its JVM write the archive under a temporary name,
which it renames into place only once the JVM exited cleanly — so a half-written archive is never
mapped. A lock file keeps a second builder from starting while one runs, and a build that failed
(its reason is in the log beside the archive) is not started again in the background for a day: a
JVM that cannot build one (a broken or unusual Java) would otherwise cost a throwaway Spark at every
worker start. `make test` (so CI) builds it up front; `make jvm-archive` tries at once.

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
from collections.abc import Iterator, Mapping
from pathlib import Path

log = logging.getLogger(__name__)

OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: options by which the user has decided about class sharing already
_OWN_DECISION = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
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
    for part in _identity(java, Path(spark_jars())):
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


# -------------------------------------------------------------------- starting a builder
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
        if builder_alive(path):
            return False
        # double fork (start_new_session + the builder's own fork): not in the worker's process
        # tree, not in its session, not killed with it
        subprocess.Popen(
            [sys.executable, "-m", "sluice.engine.class_archive_build", "--detach", str(path)],
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


def lock_file(path: Path) -> Path:
    """The file a running builder of `path` holds (its pid inside)."""
    return path.with_name(path.name + ".lock")


def failure_mark(path: Path) -> Path:
    """The file a failed build leaves beside the archive (its time is the failure's)."""
    return path.with_name(path.name + ".failed")


def failed_recently(path: Path) -> bool:
    """Whether a build of `path` failed less than `RETRY_FAILED_AFTER_S` ago."""
    try:
        return time.time() - failure_mark(path).stat().st_mtime < RETRY_FAILED_AFTER_S
    except OSError:
        return False


def builder_alive(path: Path) -> bool:
    """Whether the builder named in the lock of `path` still runs."""
    try:
        pid = int(lock_file(path).read_text().strip() or "0")
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


def spark_jars() -> str:
    """The folder of the Spark installation's jars (an archive belongs to one)."""
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "jars")
