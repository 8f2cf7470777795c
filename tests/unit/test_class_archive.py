"""The choice of the driver JVM's class archive (`sluice.engine.class_archive`): pure logic; the
archive itself is built and mapped by a real JVM in tests/integration/test_class_archive.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sluice.engine import class_archive, class_archive_build
from sluice.engine.session import DEFAULTS

OPTIONS = class_archive.OPTIONS_KEY


def test_the_archive_is_named_by_spark_and_the_jvm_in_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None and path.parent == tmp_path / "sluice" / "jvm"
    from pyspark import __version__

    assert path.name.startswith(f"spark-{__version__}-") and path.suffix == ".jsa"
    assert class_archive.archive_path() == path  # stable for one JVM and Spark
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    assert class_archive.archive_path() is None  # no java to name it by


def test_an_existing_archive_is_added_to_the_drivers_options(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    assert class_archive.with_archive(DEFAULTS, path) == DEFAULTS  # not built yet
    path.write_bytes(b"x")
    conf = class_archive.with_archive(DEFAULTS, path)
    assert conf[OPTIONS] == f"{DEFAULTS[OPTIONS]} -XX:SharedArchiveFile={path}"
    assert conf[OPTIONS].startswith("-XX:Tier4")  # sluice's own options are kept
    assert class_archive.with_archive({}, path)[OPTIONS] == f"-XX:SharedArchiveFile={path}"


@pytest.mark.parametrize(
    "conf",
    [
        {OPTIONS: "-Xshare:off"},
        {OPTIONS: "-Xmx2g -XX:SharedArchiveFile=/opt/mine.jsa"},
        {OPTIONS: "-XX:ArchiveClassesAtExit=/tmp/x.jsa"},
        {"spark.driver.extraClassPath": "/opt/extra.jar"},
    ],
)
def test_a_driver_that_decided_about_class_sharing_is_left_alone(
    tmp_path: Path, conf: dict[str, str]
) -> None:
    path = tmp_path / "a.jsa"
    path.write_bytes(b"x")
    assert not class_archive.applies(conf)
    assert class_archive.with_archive(conf, path) == conf
    assert class_archive.build_in_background(conf, tmp_path / "missing.jsa") is False
    assert not (tmp_path / "missing.jsa.lock").exists()


def test_no_second_builder_while_one_runs(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    (tmp_path / "a.jsa.lock").write_text(str(os.getpid()))  # a live builder (this process)
    assert class_archive_build.build(path) is False
    assert class_archive.build_in_background(DEFAULTS, path) is False
    assert (tmp_path / "a.jsa.lock").read_text() == str(os.getpid())  # its lock left alone
    assert not path.exists()


def test_an_existing_archive_is_not_built_again(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    path.write_bytes(b"x")
    assert class_archive.build_in_background(DEFAULTS, path) is False
    done = subprocess.run(
        [sys.executable, "-m", "sluice.engine.class_archive_build", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == str(path), done
    assert path.read_bytes() == b"x"


def test_a_failed_build_is_not_retried_in_the_background_for_a_day(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    mark = tmp_path / "a.jsa.failed"
    assert not class_archive.failed_recently(path)
    mark.touch()
    assert class_archive.failed_recently(path)
    assert class_archive.build_in_background(DEFAULTS, path) is False  # no builder started
    assert not (tmp_path / "a.jsa.lock").exists()
    day_ago = time.time() - class_archive.RETRY_FAILED_AFTER_S - 60
    os.utime(mark, (day_ago, day_ago))
    assert not class_archive.failed_recently(path)  # a worker would try again now
