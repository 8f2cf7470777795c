"""`sluice spark-cluster`: the checks that refuse bad input before anything starts, `down` when
nothing runs, and `status` of a cluster that is not up. Starting a real cluster is tested by
tests/e2e/test_spark_cluster.py, whose cluster `scripts/servers/spark-cluster.sh` starts through
this command."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sluice.cli import main


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _up(tmp_path: Path, *args: str) -> list[str]:
    return ["spark-cluster", "up", "--state-dir", str(tmp_path / "state"), *args]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--workers", "0"], "error: --workers: 0: a cluster needs at least 1 worker"),
        (["--cores", "0"], "error: --cores: 0: each worker needs at least 1 core"),
        (["--memory", "2 GB"], "error: --memory: '2 GB': expected a size such as 1g or 512m"),
        (["--master-port", "70000"], "error: --master-port: 70000 is not a usable TCP port"),
        (["--ui-port", "7077"], "error: --ui-port: 7077 is also --master-port"),
        (["--timeout", "0"], "error: --timeout: 0: must be more than 0 seconds"),
    ],
)
def test_bad_settings_are_usage_errors_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    assert main(_up(tmp_path, *args)) == 2
    assert capsys.readouterr().err == error + "\n"
    assert not (tmp_path / "state" / "run").exists()  # nothing was started


def test_a_spark_home_without_spark_class_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_up(tmp_path, "--spark-home", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert err == f"error: --spark-home: {tmp_path}/bin/spark-class is missing or not executable\n"


def test_a_taken_port_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a fake Spark home: spark-class exists, and would leave a mark if it were ever run
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    mark = tmp_path / "ran"
    (home / "bin" / "spark-class").write_text(f"#!/bin/sh\ntouch {mark}\n")
    (home / "bin" / "spark-class").chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        common = ["--spark-home", str(home), "--ui-port", str(_free_port())]
        assert main(_up(tmp_path, *common, "--master-port", str(port))) == 1
        assert capsys.readouterr().err == (
            f"error: --master-port: port {port} is used by another process\n"
        )
        common = ["--spark-home", str(home), "--master-port", str(_free_port())]
        assert main(_up(tmp_path, *common, "--ui-port", str(port))) == 1
        assert f"error: --ui-port: port {port} is used" in capsys.readouterr().err
    assert not mark.exists()


def test_down_with_nothing_running_and_a_stale_pid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert main(["spark-cluster", "down", "--state-dir", str(state)]) == 0
    assert capsys.readouterr().out == "spark-cluster down\n"
    # a pid file whose pid is now another process (here: this test's) is not a Spark daemon:
    # it is dropped, the process is left alone
    (state / "run").mkdir(parents=True)
    (state / "run" / "worker-1.pid").write_text(f"{os.getpid()}\n")
    (state / "run" / "master.pid").write_text("not a pid\n")
    assert main(["spark-cluster", "down", "--state-dir", str(state)]) == 0
    assert sorted(p.name for p in (state / "run").iterdir()) == []


def test_status_of_a_cluster_that_is_not_up_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-dir", str(tmp_path), "--ui-port", str(_free_port())]
    assert main(["spark-cluster", "status", *state]) == 1
    out, err = capsys.readouterr()
    assert "not answering, pid -" in out and "No workers registered." in out
    assert err == "error: spark-cluster down (0 ALIVE workers of 0 started)\n"
