"""The zygote (sluice.engine.zygote) forks the processes Spark's launcher asks for: the child gets
the client's command line, environment, folder and standard streams; the client exits with the
child's status and passes signals on; without a zygote the launcher starts Python as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.engine import zygote
from sluice.engine.session import spark_python
from tests.conftest import wait_until


@pytest.fixture(scope="module")
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("zygote") / "z.sock")
    proc = subprocess.Popen([sys.executable, "-m", "sluice.engine.zygote", path, str(os.getpid())])
    wait_until(lambda: os.path.exists(path) or proc.poll() is not None, 120, "the zygote")
    assert proc.poll() is None
    yield path
    proc.terminate()
    proc.wait(30)
    assert not os.path.exists(path)  # it removes its socket when stopped


def _launch(args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [spark_python(), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry))
    return out


def _zygote_pid(path: str) -> int:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"sluice.engine.zygote" in cmd and path.encode() in cmd:
                return int(entry)
    raise AssertionError("no zygote process")


def test_a_forked_child_gets_argv_env_folder_and_streams(socket_path: str, tmp_path: Path) -> None:
    env = {**os.environ, zygote.ENV: socket_path, "SPARK_HOME": "/marker/from-the-client"}
    # pyspark.find_spark_home prints $SPARK_HOME: the environment and stdout reached the child
    done = _launch(["-m", "pyspark.find_spark_home"], env, cwd=tmp_path).communicate(timeout=120)
    assert done[0].strip() == "/marker/from-the-client", done


def test_the_client_exits_with_the_childs_status(socket_path: str) -> None:
    env = {**os.environ, zygote.ENV: socket_path}
    proc = _launch(["-m", "pyspark.no_such_module_here"], env)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "No module named pyspark.no_such_module_here" in err


def test_a_signal_to_the_client_reaches_the_child(socket_path: str) -> None:
    env = {**os.environ, zygote.ENV: socket_path}
    # pyspark's daemon (run as sluice's) serves until its stdin closes or it is told to stop
    proc = _launch(["-m", "pyspark.daemon", "pyspark.worker"], env, stdin=subprocess.PIPE)
    forked = _zygote_pid(socket_path)
    wait_until(lambda: _children(forked), 120, "the zygote to fork the daemon")
    (child,) = _children(forked)
    assert b"sluice.engine.zygote" in Path(f"/proc/{child}/cmdline").read_bytes()
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    wait_until(lambda: not Path(f"/proc/{child}").exists(), 120, "the child to end")


def test_without_a_zygote_the_launcher_starts_python_itself(tmp_path: Path) -> None:
    env = {**os.environ, zygote.ENV: str(tmp_path / "nobody-listens"), "SPARK_HOME": "/m"}
    done = _launch(["-m", "pyspark.find_spark_home"], env).communicate(timeout=120)
    assert done[0].strip() == "/m", done


def test_other_starts_are_not_forked(socket_path: str) -> None:
    env = {**os.environ, zygote.ENV: socket_path}
    done = _launch(["-c", "import sys; print(sys.flags.no_site)"], env).communicate(timeout=60)
    assert done[0].strip() == "0"  # a normal interpreter, not the client's bare one


_PARENT = """
import sys, threading
from sluice.engine import zygote
paths = []
starter = threading.Thread(target=lambda: paths.append(zygote.start()))
starter.start()
starter.join()  # the thread that started the zygote is gone: the zygote must live on
print(paths[0], flush=True)
sys.stdin.readline()
"""


def test_the_zygote_outlives_the_starting_thread_and_ends_with_its_process() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert parent.stdout is not None and parent.stdin is not None
    path = parent.stdout.readline().decode().strip()
    wait_until(lambda: os.path.exists(path), 120, "the zygote to listen")
    pid = _zygote_pid(path)
    parent.stdin.close()
    assert parent.wait(30) == 0
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 30, "the zygote to end")
    assert not os.path.exists(path)


def test_a_child_ignores_sigpipe_as_a_fresh_interpreter_does(socket_path: str) -> None:
    # A write to a closed pipe or a reset socket raises BrokenPipeError in Python; a forked child
    # that had SIGPIPE's default action was killed by it instead (a Python worker whose broker
    # connection was cut mid-read "exited unexpectedly").
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        env = {**os.environ, zygote.ENV: socket_path}
        proc = subprocess.Popen(
            [spark_python(), "-m", "pyspark.find_spark_home"],
            env=env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    _out, err = proc.communicate(timeout=120)
    forked = 128 + signal.SIGPIPE  # the client's status for a child a signal ended
    assert proc.returncode not in (forked, -signal.SIGPIPE), err
