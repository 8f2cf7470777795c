"""``sluice spark-cluster up|down|status``: a Spark standalone cluster here, loopback only.

One master and N workers started with ``spark-class`` from the pip-installed pyspark (its
``SPARK_HOME`` is the ``pyspark`` package folder, which ships ``bin/spark-class`` and the jars),
so the cluster runs the very Spark version of the sluice workers that drive it. Everything binds
127.0.0.1 (``--host`` for RPC, ``SPARK_LOCAL_IP`` for the web UIs). Under the state dir:
``run/master.pid``, ``run/worker-<i>.pid``, ``log/master.log``, ``log/worker-<i>.log`` and
``data/worker-<i>`` (each worker's work dir, where its executors' stdout/stderr live).

``up`` starts only what is not running (a killed worker comes back, the others are left alone)
and returns once the master's JSON (``http://127.0.0.1:<ui port>/json/``) lists N ALIVE workers;
``down`` stops the workers (each takes its executors with it), then the master, and does nothing
when nothing runs. This is the one implementation: ``scripts/servers/spark-cluster.sh`` (the test
servers) calls it. It depends on the standard library and httpx only (DESIGN §7: no runtime).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._errors import CliError, UsageProblem

__all__ = ["ClusterSpec", "SparkClusterError", "down", "status", "up"]

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
_MEMORY = re.compile(r"^[1-9][0-9]*[mMgG]$")
#: How long a daemon may take to stop after SIGTERM before it gets SIGKILL.
_STOP_SECONDS = 30.0


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/sluice/spark-cluster`` (``~/.local/state/…`` when unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sluice" / "spark-cluster"


def default_spark_home() -> Path | None:
    """The folder of the ``pyspark`` package this Python imports (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class SparkClusterError(CliError):
    """The cluster could not be started or stopped; the message says what and where to look."""


@dataclass(frozen=True)
class ClusterSpec:
    """What ``up`` starts: ports, sizes and folders. ``check`` refuses values that cannot work."""

    state_dir: Path = field(default_factory=default_state_dir)
    workers: int = 2
    master_port: int = 7077
    ui_port: int = 8080
    #: worker i's web UI listens on ``worker_ui_port + i - 1`` (Spark moves up if it is taken).
    worker_ui_port: int = 8091
    cores: int = 2
    memory: str = "2g"
    spark_home: Path | None = field(default_factory=default_spark_home)
    timeout: float = 120.0

    @property
    def url(self) -> str:
        """The master's URL, the value of a sluice worker's ``spark.master``."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def json_url(self) -> str:
        """The master web UI's JSON summary (workers and their states)."""
        return f"http://127.0.0.1:{self.ui_port}/json/"

    def pid_file(self, role: str) -> Path:
        """``run/<role>.pid`` (role: ``master`` or ``worker-<i>``)."""
        return self.state_dir / "run" / f"{role}.pid"

    def log_file(self, role: str) -> Path:
        """``log/<role>.log``: the daemon's stdout and stderr."""
        return self.state_dir / "log" / f"{role}.log"

    def check(self) -> None:
        """Refuse settings that cannot give a cluster, naming the option (exit code 2)."""
        if self.workers < 1:
            raise UsageProblem(f"--workers: {self.workers}: a cluster needs at least 1 worker")
        if self.cores < 1:
            raise UsageProblem(f"--cores: {self.cores}: each worker needs at least 1 core")
        if not _MEMORY.match(self.memory):
            raise UsageProblem(f"--memory: {self.memory!r}: expected a size such as 1g or 512m")
        ports = {"--master-port": self.master_port, "--ui-port": self.ui_port}
        ports["--worker-ui-port"] = self.worker_ui_port
        for option, port in ports.items():
            if not 1 <= port <= 65535 - (self.workers if option == "--worker-ui-port" else 0):
                raise UsageProblem(f"{option}: {port} is not a usable TCP port")
        if self.master_port == self.ui_port:
            raise UsageProblem(f"--ui-port: {self.ui_port} is also --master-port")
        if self.timeout <= 0:
            raise UsageProblem(f"--timeout: {self.timeout:g}: must be more than 0 seconds")

    def spark_class(self) -> Path:
        """``<spark home>/bin/spark-class``, or an error naming ``--spark-home``."""
        if self.spark_home is None:
            raise UsageProblem(
                "--spark-home: no pyspark is importable by this Python (pip install pyspark, "
                "or name a Spark distribution's folder)"
            )
        path = self.spark_home / "bin" / "spark-class"
        if not os.access(path, os.X_OK):
            raise UsageProblem(f"--spark-home: {path} is missing or not executable")
        return path


# -- processes -----------------------------------------------------------------------------------


def _pid_of(pid_file: Path, main_class: str) -> int | None:
    """The pid in ``pid_file`` if that process runs ``main_class`` (a reused pid is not ours)."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if main_class.encode() in cmdline else None


def _port_taken(port: int) -> bool:
    """Someone listens on 127.0.0.1:``port`` (or on every address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: a port left in TIME_WAIT by a stopped daemon is free for its successor
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _environment(spec: ClusterSpec) -> dict[str, str]:
    """The daemons' environment: loopback, an empty conf dir (no spark-defaults of the machine)."""
    conf = spec.state_dir / "run" / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "SPARK_HOME": str(spec.spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": str(conf),
        "SPARK_DAEMON_MEMORY": "512m",
        "SPARK_LOG_DIR": str(spec.state_dir / "log"),
        "SPARK_PID_DIR": str(spec.state_dir / "run"),
        # a dead worker is noticed when its connection drops; this timeout covers a hung one
        "SPARK_MASTER_OPTS": "-Dspark.worker.timeout=15",
    }


def _start(spec: ClusterSpec, role: str, args: list[str], env: dict[str, str]) -> int:
    """Start ``spark-class ARGS`` detached (own session), its pid in ``run/<role>.pid``."""
    log = spec.log_file(role)
    log.parent.mkdir(parents=True, exist_ok=True)
    spec.pid_file(role).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(spec.spark_class()), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a Ctrl-C of `up` does not reach the daemons
        )
    # spark-class execs java in place, so this pid stays the daemon's
    spec.pid_file(role).write_text(f"{proc.pid}\n")
    return proc.pid


def _stop(pid_file: Path, main_class: str) -> None:
    """SIGTERM the daemon of ``pid_file`` (if it is one), SIGKILL after a while; drop the file."""
    pid = _pid_of(pid_file, main_class)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait(lambda: _pid_of(pid_file, main_class) is None, _STOP_SECONDS):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait(lambda: _pid_of(pid_file, main_class) is None, 5)
    pid_file.unlink(missing_ok=True)


def _wait(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` every 0.25 s for up to ``seconds``; whether it became true."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
    return True


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- the master's view ---------------------------------------------------------------------------


def master_json(spec: ClusterSpec) -> dict[str, Any] | None:
    """The master's JSON summary, or None when its web UI does not answer."""
    try:
        response = httpx.get(spec.json_url, timeout=2)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def alive_workers(spec: ClusterSpec) -> int:
    """How many workers the master lists as ALIVE (0 when it does not answer)."""
    body = master_json(spec) or {}
    return sum(1 for w in body.get("workers", []) if w.get("state") == "ALIVE")


# -- the commands --------------------------------------------------------------------------------


def up(spec: ClusterSpec) -> bool:
    """Start what is not running and wait for N ALIVE workers; whether anything was started."""
    spec.check()
    spec.spark_class()
    roles = [f"worker-{i}" for i in range(1, spec.workers + 1)]
    missing = [r for r in roles if _pid_of(spec.pid_file(r), _WORKER) is None]
    master_runs = _pid_of(spec.pid_file("master"), _MASTER) is not None
    if master_runs and not missing and alive_workers(spec) >= spec.workers:
        return False
    if not master_runs:
        for option, port in (("--master-port", spec.master_port), ("--ui-port", spec.ui_port)):
            if _port_taken(port):
                raise SparkClusterError(f"{option}: port {port} is used by another process")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkClusterError("java is not on PATH and JAVA_HOME is unset (Spark needs Java 17+)")
    env = _environment(spec)
    if not master_runs:
        _start(spec, "master", _master_args(spec), env)
        if not _wait(lambda: master_json(spec) is not None or not _alive(spec, "master"), 90):
            raise _failed(spec, "master", f"did not answer on {spec.json_url} within 90 s")
        if not _alive(spec, "master"):
            raise _failed(spec, "master", "exited at start")
    for role in missing:
        (spec.state_dir / "data" / role).mkdir(parents=True, exist_ok=True)
        _start(spec, role, _worker_args(spec, int(role.split("-")[1])), env)
    _await_workers(spec, roles)
    return True


def _master_args(spec: ClusterSpec) -> list[str]:
    ports = ["--port", str(spec.master_port), "--webui-port", str(spec.ui_port)]
    return [_MASTER, "--host", "127.0.0.1", *ports]


def _worker_args(spec: ClusterSpec, i: int) -> list[str]:
    options = {
        "--host": "127.0.0.1",
        "--webui-port": str(spec.worker_ui_port + i - 1),
        "--cores": str(spec.cores),
        "--memory": spec.memory,
        "--work-dir": str(spec.state_dir / "data" / f"worker-{i}"),
    }
    return [_WORKER, *(x for kv in options.items() for x in kv), spec.url]


def _alive(spec: ClusterSpec, role: str) -> bool:
    return _pid_of(spec.pid_file(role), _MASTER if role == "master" else _WORKER) is not None


def _await_workers(spec: ClusterSpec, roles: list[str]) -> None:
    """Until the master lists N ALIVE workers; a worker that exits or a timeout is an error."""

    def ready() -> bool:
        return alive_workers(spec) >= spec.workers or any(not _alive(spec, r) for r in roles)

    if not _wait(ready, spec.timeout) or alive_workers(spec) < spec.workers:
        dead = next((r for r in roles if not _alive(spec, r)), None)
        if dead is not None:
            raise _failed(spec, dead, "exited before registering with the master")
        raise SparkClusterError(
            f"--timeout: {alive_workers(spec)} of {spec.workers} workers registered with the "
            f"master within {spec.timeout:g} s (logs: {spec.state_dir / 'log'})"
        )


def _failed(spec: ClusterSpec, role: str, what: str) -> SparkClusterError:
    log = spec.log_file(role)
    return SparkClusterError(f"the Spark {role} {what} (log {log}: {_tail(log)})")


def _worker_pid_files(spec: ClusterSpec) -> list[Path]:
    run = spec.state_dir / "run"
    return sorted(run.glob("worker-*.pid")) if run.is_dir() else []


def down(spec: ClusterSpec) -> None:
    """Stop every worker started under the state dir, then the master; nothing running is fine."""
    for pid_file in _worker_pid_files(spec):
        _stop(pid_file, _WORKER)
    _stop(spec.pid_file("master"), _MASTER)


def status(spec: ClusterSpec) -> dict[str, Any]:
    """The master (URL, pid, whether it answers) and each worker: ours by pid, the master's view."""
    run = spec.state_dir / "run"
    pids = {
        p.stem: _pid_of(p, _WORKER)
        for p in (sorted(run.glob("worker-*.pid")) if run.is_dir() else [])
    }
    body = master_json(spec)
    workers = [
        {
            "id": w.get("id"),
            "address": f"{w.get('host')}:{w.get('port')}",
            "state": w.get("state"),
            "cores": w.get("cores"),
            "memory_mb": w.get("memory"),
            "web_ui": w.get("webuiaddress"),
        }
        for w in (body or {}).get("workers", [])
    ]
    return {
        "master": spec.url,
        "master_pid": _pid_of(spec.pid_file("master"), _MASTER),
        "master_ui": spec.json_url.removesuffix("json/"),
        "answering": body is not None,
        "alive_workers": sum(1 for w in workers if w["state"] == "ALIVE"),
        "worker_pids": pids,
        "workers": workers,
    }
