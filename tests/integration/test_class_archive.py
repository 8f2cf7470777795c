"""The driver JVM's class archive (`sluice.engine.class_archive`) with a real JVM: the builder
writes it (taking over from a builder that died, clearing what that one left and the archive of a
Spark installation that is gone), a Spark started
afterwards maps it, and a worker's background builder runs outside the worker's process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.engine import class_archive
from sluice.engine.session import DEFAULTS
from tests.conftest import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]

_MAPS = """
import sys
from sluice.engine.session import DEFAULTS, build_session
log = sys.argv[1]
spark = build_session(
    {"spark.master": "local[1]", "spark.driver.memory": "1g",
     "spark.driver.extraJavaOptions": DEFAULTS["spark.driver.extraJavaOptions"]
     + f" -Xlog:class+load=info:file={log}"},
    zygote=False,
)
assert spark.range(3).count() == 3
spark.stop()
"""


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_the_builder_writes_the_archive_and_the_next_spark_maps_it(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    named = class_archive.archive_path(tmp_path / "sluice" / "jvm")
    assert named is not None
    path = named
    path.parent.mkdir(parents=True)
    dead = _dead_pid()
    (path.parent / f"{path.name}.lock").write_text(str(dead))  # a builder that was killed ...
    orphan = path.parent / f"{path.name}.{dead}.tmp"
    orphan.write_bytes(b"half an archive")  # ... and what its JVM wrote when it went
    gone = path.parent / "spark-4.0.0-0123456789abcdef.jsa"  # a deleted venv's archive
    gone.write_bytes(b"x")
    (path.parent / f"{gone.name}.from").write_text(str(tmp_path / "deleted-venv" / "jars"))
    (path.parent / f"{path.name}.failed").touch()  # an earlier build failed: asked, it tries again
    done = subprocess.run(
        [sys.executable, "-m", "sluice.engine.class_archive_build"],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.strip() == str(path)
    assert done.stderr == ""  # Spark's and the dump's messages are in the log beside it
    assert path.stat().st_size > 10 << 20
    assert sorted(p.name for p in path.parent.iterdir()) == [
        path.name,
        f"{path.name}.from",
        f"{path.name}.log",
    ]
    assert (path.parent / f"{path.name}.from").read_text() == class_archive.spark_jars()

    loads = tmp_path / "class-load.log"
    mapped = subprocess.run(
        [sys.executable, "-c", _MAPS, str(loads)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    text = loads.read_text()
    # Spark's own classes come from the archive (its top layer), not from their jars
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in text, text[:2000]
    assert "org.apache.spark.SparkContext source: jar:" not in text


def test_a_workers_background_builder_is_detached_and_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    lock = tmp_path / "a.jsa.lock"
    assert class_archive.build_in_background(DEFAULTS, path) is True
    wait_until(lambda: lock.exists() and lock.read_text().strip() != "", 60, "the builder's lock")
    pid = int(lock.read_text())
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        parent, session = int(fields[1]), int(fields[3])
        # not a child of the process that asked (a worker's tree stays the worker's), not in its
        # session (a Ctrl-C or kill of the worker's group leaves it alone)
        assert parent != os.getpid() and session != os.getsid(0) and session != os.getpid()
        # while it runs, nobody starts another one
        assert class_archive.build_in_background(DEFAULTS, path) is False
    finally:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 60, "the builder to end")


def test_a_builder_that_cannot_start_spark_says_where_to_look_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsa"
    broken_jdk = tmp_path / "no-jdk"
    (broken_jdk / "bin").mkdir(parents=True)
    (broken_jdk / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (broken_jdk / "bin" / "java").chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "sluice.engine.class_archive_build", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAVA_HOME": str(broken_jdk), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.strip() == f"class archive not built: see {path}.log"
    assert "Traceback" in path.with_name("a.jsa.log").read_text()  # why, for whoever looks
    # the failure is marked: a worker does not start another builder for a day
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsa.failed", "a.jsa.log", "no-jdk"]
    assert class_archive.failed_recently(path)
    assert class_archive.build_in_background(DEFAULTS, path) is False
