"""A real `sluice worker` process for end-to-end tests, driven over HTTP like a user would."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import wait_until
from tests.e2e.orphans import spawn

REPO = Path(__file__).parents[2]
BOOT = "The standalone worker boot success."
DISTRIBUTED_BOOT = "The distributed worker boot success."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WorkerProcess:
    """One worker process with its own store, config file and log."""

    tmp: Path
    port: int = field(default_factory=free_port)
    plugin_dir: Path | None = None
    #: extra worker config lines, e.g. ``{"bus": "kafka", "bootstrap.servers": "…"}``
    extra_conf: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    #: the log line that says the worker is up (a distributed worker logs its own)
    boot: str = BOOT
    #: how long `start` waits for it (several JVMs booting at once on a loaded machine: longer)
    boot_timeout: float = 180
    #: the certificate of a worker that serves HTTPS (`rest.tls.cert` in `extra_conf`): `url` is
    #: https then, and `request` trusts it
    tls_cert: Path | None = None
    #: the interpreter that runs it (another venv's: see tests/e2e/test_core_install.py)
    python: str = sys.executable

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_cert is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def conf(self) -> Path:
        return self.tmp / "connect-standalone.conf"

    @property
    def log(self) -> Path:
        return self.tmp / "worker.log"

    def write_conf(self) -> None:
        lines = [
            "workerId=e2e-worker",
            "httpHost=127.0.0.1",
            f"httpPort={self.port}",
            f"storePathRootDir={self.tmp / 'store'}",
            "offsetCommitIntervalMsConfig=200",
            "status.poll.interval.ms=100",
            "spark.master=local[2]",
            "spark.driver.memory=1g",
        ]
        if self.plugin_dir is not None:
            lines.append(f"pluginPaths={self.plugin_dir}")
        lines.extend(f"{key}={value}" for key, value in self.extra_conf.items())
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self) -> WorkerProcess:
        """Start the process and wait for the boot message in its log."""
        return self.wait_boot(self.launch())

    def launch(self) -> int:
        """Start the process without waiting for it to boot; returns how many boot messages the
        log held before, for `wait_boot` (a chaos round may kill it while it starts)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        if not self.conf.exists():
            self.write_conf()
        boots = self.log.read_text().count(self.boot) if self.log.exists() else 0
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if self.python != sys.executable:  # Spark's Python workers too run that interpreter
            for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
                env.pop(name, None)
        out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        # A session of its own, so kill -9 of the group takes the JVM down with it.
        self.proc = spawn(
            [self.python, "-m", "sluice.cli", "worker", "-c", str(self.conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.tmp,
            start_new_session=True,
        )
        return boots

    def wait_boot(self, boots: int, timeout: float | None = None) -> WorkerProcess:
        """Wait for boot message number `boots + 1` in the log (the process must stay up)."""
        assert self.proc is not None
        wait_until(
            lambda: self.proc.poll() is not None or self.log.read_text().count(self.boot) > boots,
            timeout=self.boot_timeout if timeout is None else timeout,
            what="the worker to boot",
        )
        assert self.proc.poll() is None, f"worker exited:\n{self.log.read_text()[-3000:]}"
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self, timeout: float = 120) -> int:
        """SIGTERM, as a service manager would; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:  # the JVM child must not outlive the worker
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)

    # -- HTTP -------------------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.tls_cert is not None:
            kwargs.setdefault("verify", ssl.create_default_context(cafile=str(self.tls_cert)))
        return httpx.request(method, self.url + path, timeout=120, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post_connector(self, name: str, config: dict[str, str]) -> None:
        """Create (or update) a connector through RocketMQ Connect's `POST /connectors/{name}`."""
        response = self.request("POST", f"/connectors/{name}", content=json.dumps(config))
        assert response.status_code == 200, response.text

    def file_pipeline(self, data: Path, i: int | str, topic: str = "") -> None:
        """`src-<i>`: data/in-<i>.txt → `topic` (default topic-<i>), and `sink-<i>`: that topic
        → data/out-<i>.txt."""
        topic = topic or f"topic-{i}"
        self.post_connector(
            f"src-{i}",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(data / f"in-{i}.txt"),
                "connect.topicname": topic,
            },
        )
        self.post_connector(
            f"sink-{i}",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(data / f"out-{i}.txt"),
                "connect.topicnames": topic,
            },
        )

    def body(self, path: str, **kwargs: Any) -> Any:
        """The `body` of a successful RocketMQ Connect style GET."""
        response = self.get(path, **kwargs)
        assert response.status_code == 200, response.text
        envelope = response.json()
        assert envelope["status"] == 200
        return envelope["body"]

    def state(self, name: str) -> str:
        return self.request("GET", f"/v1/connectors/{name}/status").json()["connector"]["state"]


@dataclass
class DistWorker(WorkerProcess):
    """A distributed worker: its own id, port and log; `shared` holds the cluster keys (store
    URL, cluster name, storePathRootDir, strategy) common to every worker of the cluster."""

    worker_id: str = ""
    shared: dict[str, str] = field(default_factory=dict)
    boot: str = DISTRIBUTED_BOOT

    def write_conf(self) -> None:
        lines = {
            "workerId": self.worker_id,
            "httpHost": "127.0.0.1",
            "httpPort": str(self.port),
            "offsetCommitIntervalMsConfig": "1500",
            "status.poll.interval.ms": "200",
            "spark.master": "local[1]",
            "spark.driver.memory": "512m",
            "spark.ui.enabled": "false",
            **self.shared,
            **self.extra_conf,
        }
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def owners(self, names: list[str]) -> dict[str, tuple[str, str]]:
        """`{connector: (state, workerId)}` as this worker reads them from the store."""
        out = {}
        for name in names:
            status = self.get(f"/v1/connectors/{name}/status").json()
            out[name] = (status["connector"]["state"], status["connector"]["workerId"])
        return out

    def starts(self) -> dict[str, int]:
        """How many times each connector was started in this worker's log."""
        counts: dict[str, int] = {}
        if self.log.exists():
            for name in re.findall(r"connector (\S+) started \(", self.log.read_text()):
                counts[name] = counts.get(name, 0) + 1
        return counts
