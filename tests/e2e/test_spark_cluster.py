"""sluice workers on a Spark standalone cluster (master + 2 workers of
`scripts/servers/spark-cluster.sh`, loopback), with real processes.

- file source → broker topic → file sink through a `sluice worker` whose `spark.master` is the
  cluster, on the Kafka bus (and on the RocketMQ bus with `SLUICE_SPARK_CLUSTER_BUSES=rocketmq`,
  `make test-spark-cluster-rocketmq`): the connector queries' tasks run on both
  executors (Spark's own REST API of the driver says so), and the source's records are sent to
  the broker from the executors' Python workers (the commit journal names the process that wrote
  each part; its parent is the cluster's executor, not the driver); `kill -9` of one Spark worker
  mid-stream (its executor goes with it) → the queries go on on the other executor (the killed
  worker is started again at the end); the sink file ends byte-identical and each line is in the
  topic once (Kafka: as a `read_committed` consumer counts them). The killed worker is started
  again through
  `scripts/servers/spark-cluster.sh`, i.e. `sluice spark-cluster up`, which starts only that one;
  `sluice spark-cluster status` then lists the master and two ALIVE workers;
- a store root that the driver sees but the executors do not (the driver runs in a mount namespace
  of its own with a private tmpfs over the store's folder) is refused at start naming
  `storePathRootDir`;
- executors that start a Python without sluice, and a cluster that cannot give the application
  an executor, are refused naming `spark.master`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import REPO, WorkerProcess, free_port
from tests.integration.bus_helpers import RealKafka, rocketmq_namesrv, unique
from tests.servers import SCRIPT, SERVERS_DIR, ensure

# more than the default 300 s on a loaded 2-core machine: a worker on the Spark standalone cluster,
# one of its workers killed and restarted
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark_master() -> str:
    """The cluster's master URL (`spark://127.0.0.1:7077`), started if needed."""
    return ensure("spark-cluster")


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The worker's one-line error (Spark may log after it while it stops)."""
    lines = [x for x in done.stderr.splitlines() if x.startswith("error: worker config")]
    assert done.returncode == 2 and lines, done.stderr[-3000:]
    return lines[-1]


def _run_bad_worker(
    tmp_path: Path, conf: dict[str, str], *, wrap: list[str] | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    """Start `sluice worker` with `conf` (optionally under `wrap`); it must exit by itself."""
    path = tmp_path / "bad.conf"
    lines = {
        "workerId": "bad",
        "httpHost": "127.0.0.1",
        "httpPort": str(free_port()),
        "spark.driver.memory": "1g",
        **conf,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    cmd = [sys.executable, "-m", "sluice.cli", "worker", "-c", str(path)]
    return subprocess.run(
        [*(wrap or []), *cmd],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def test_store_root_not_shared_with_executors_is_refused(tmp_path: Path, spark_master: str) -> None:
    private = tmp_path / "private"
    private.mkdir()
    # The driver's view of `private` is a tmpfs of its own; the executors (started by the Spark
    # workers, outside this namespace) see the real, empty folder at the same path.
    wrap = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs sluice-private "$0" && exec "$@"',
        str(private),
    ]
    done = _run_bad_worker(
        tmp_path,
        {"spark.master": spark_master, "storePathRootDir": str(private / "store")},
        wrap=wrap,
    )
    error = _error_line(done)
    assert "storePathRootDir: " in error and "is not shared" in error
    assert "FileNotFoundError" in error  # the executors' own report, with their host
    assert "boot success" not in done.stderr
    assert not (private / "store").exists()  # the driver's copy went with its namespace


def test_executors_without_sluice_are_refused(tmp_path: Path, spark_master: str) -> None:
    # A Python that exists on the executors but has no sluice (nor pyspark): the first thing a
    # user gets wrong on a cluster. build_session leaves a PYSPARK_PYTHON of another interpreter.
    bare = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=300
    )
    done = _run_bad_worker(
        tmp_path,
        {
            "spark.master": spark_master,
            "storePathRootDir": str(tmp_path / "store"),
            "spark.task.maxFailures": "1",
        },
        env={"PYSPARK_PYTHON": str(bare / "bin" / "python")},
    )
    error = _error_line(done)
    assert "spark.master: the shared-path probe failed on the executors" in error, error
    assert "sluice installed" in error


def test_cluster_without_room_for_executors_is_refused(tmp_path: Path, spark_master: str) -> None:
    # Executors of 64 GiB: no worker of the cluster (2 GiB each) can start one, so no probe task
    # ever runs; the check gives up after its timeout instead of hanging the worker's start.
    done = _run_bad_worker(
        tmp_path,
        {
            "spark.master": spark_master,
            "spark.executor.memory": "64g",
            "storePathRootDir": str(tmp_path / "store"),
            "cluster.shared.path.check.timeout.ms": "3000",
        },
    )
    error = _error_line(done)
    expected = f"spark.master: no executor of {spark_master} ran the shared-path probe within 3000"
    assert expected in error, error
    assert "free cores" in error


# ------------------------------------------------------------------------------- the pipeline
def _feed(path: Path, stop: threading.Event, written: list[int]) -> None:
    """Append 200 lines every 0.2 s until stopped."""
    n = 0
    while not stop.is_set():
        with open(path, "a", encoding="utf-8") as f:
            for _ in range(200):
                f.write(f"{n:08d} spark cluster line {'é' * (n % 7)}\n")
                n += 1
        written[0] = n
        stop.wait(0.2)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


class _App:
    """The driver's monitoring REST API (`/api/v1`, Spark's web UI on loopback)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1/applications"
        self.id = httpx.get(self.base, timeout=60).json()[0]["id"]

    def executors(self) -> dict[str, dict[str, Any]]:
        """Every executor of the application, dead ones too, by id (the driver left out)."""
        rows = httpx.get(f"{self.base}/{self.id}/allexecutors", timeout=60).json()
        return {r["id"]: r for r in rows if r["id"] != "driver"}


def _worker_pid(i: int) -> int:
    pid = int((SERVERS_DIR / "spark-cluster" / "run" / f"worker-{i}.pid").read_text())
    assert "deploy.worker.Worker" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(
        errors="replace"
    )
    return pid


def _cluster_up() -> str:
    """Start what of the cluster is not running (the worker this test killed); the script's line."""
    env = {**os.environ, "SLUICE_SERVERS_CALLER": "pytest"}  # keeps the started-by-pytest mark
    done = subprocess.run(
        ["bash", str(SCRIPT), "up", "spark-cluster"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _check_cluster_cli(restarted: str) -> None:
    """The script ran `sluice spark-cluster up`, which started only the killed worker; `status`
    lists the master and both workers of the state dir, and `up` again starts nothing."""
    assert restarted == "spark-cluster up spark://127.0.0.1:7077 started"
    status = _spark_cluster_cli("status", "--json")
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert body["master"] == "spark://127.0.0.1:7077" and body["master_pid"] > 0
    assert body["worker_pids"] == {"worker-1": _worker_pid(1), "worker-2": _worker_pid(2)}
    # the killed worker may still be listed, DEAD, beside the two ALIVE ones
    assert [w["state"] for w in body["workers"]].count("ALIVE") == body["alive_workers"] == 2
    assert all(w["address"].startswith("127.0.0.1:") for w in body["workers"])
    again = _spark_cluster_cli("up")
    assert again.stdout.strip() == "spark-cluster up spark://127.0.0.1:7077 already running"


def _spark_cluster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`sluice spark-cluster ARGS` on the state dir of the test servers' cluster."""
    state = str(SERVERS_DIR / "spark-cluster")
    cmd = [sys.executable, "-m", "sluice.cli", "spark-cluster", *args, "--state-dir", state]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


class _Bus:
    """The bus of the pipeline test: Kafka or RocketMQ."""

    def __init__(self, kind: str, tmp_path: Path, topic: str) -> None:
        self.kind, self.topic = kind, topic
        if kind == "kafka":
            self.kafka = RealKafka(ensure("kafka"))
            self.kafka.create_topic(topic, 4)
            self.conf = {"bus": "kafka", "bootstrap.servers": self.kafka.bootstraps}
        else:
            from sluice.bus.rocketmq import RocketMQBus

            namesrv = rocketmq_namesrv()
            self.rocketmq = RocketMQBus(tmp_path / "probe", namesrv_addr=namesrv)
            self.rocketmq.create_topic(topic, 4)
            self.conf = {"bus": "rocketmq", "namesrvAddr": namesrv}

    def values(self) -> list[bytes]:
        """Every record value in the topic (Kafka: as a `read_committed` consumer sees them)."""
        if self.kind == "kafka":
            return self.kafka.committed_values(self.topic)
        log, values = self.rocketmq.log, []
        for r in self.rocketmq.describe(self.topic).ranges:
            for _, batch in log.read(self.topic, r.queue, r.min_offset, r.max_offset):
                values.extend(batch.column("value").to_pylist())
        return values


class _PartWriters:
    """Who sent the source's parts: samples the commit journal's "task finished its part" rows
    (each names its writer's host/pid) while the pipeline runs, and keeps, per process, the
    command lines of it and its ancestors (taken at once: the process may go later). Two kinds of
    pid say nothing about the writer and are left out, counted in `gone`: one whose process has
    exited before the sampler looked (a Python worker of the killed Spark worker's executor, or
    one Spark retired as idle), and one whose process started after its row was written (pids are
    reused quickly on a busy machine)."""

    def __init__(self, journal: Path, writer_prefix: str) -> None:
        self.journal, self.prefix = journal, writer_prefix
        self.seen: dict[int, list[str]] = {}
        self.gone: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                with sqlite3.connect(self.journal, timeout=5) as db:
                    owners = db.execute(
                        "SELECT owner, updated_at FROM parts WHERE topic = '' AND writer_id LIKE ?",
                        (self.prefix + "%",),
                    ).fetchall()
            except sqlite3.Error:  # not created yet
                continue
            for owner, written_at in owners:
                pid = int(owner.split("/")[1])
                if pid in self.seen or pid in self.gone:
                    continue
                chain = _ancestry(pid)
                started = _started_at(pid)
                if not chain or started is None or started > written_at + 1.0:
                    self.gone.add(pid)
                    continue
                self.seen[pid] = chain

    def __enter__(self) -> _PartWriters:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), None if it is gone."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _ancestry(pid: int) -> list[str]:
    """The command lines of `pid` and its ancestors (empty if it is gone)."""
    out = []
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            break
        out.append(cmd)
    return out


#: the broker buses the pipeline test runs on: Kafka in the suite; `make
#: test-spark-cluster-rocketmq` (in `make test-deep`) runs it on RocketMQ, which the Spark side
#: of the test does not tell apart (the executors' writes of both buses are also tested in local
#: mode: tests/e2e/test_bus_crash.py)
BUSES = os.environ.get("SLUICE_SPARK_CLUSTER_BUSES", "kafka").split(",")


@pytest.mark.parametrize(
    "kind", [pytest.param(b, marks=pytest.mark.rocketmq if b == "rocketmq" else ()) for b in BUSES]
)
def test_pipeline_runs_on_executors_and_survives_a_spark_worker_kill_9(
    tmp_path: Path, spark_master: str, kind: str
) -> None:
    topic = unique("spark")
    bus = _Bus(kind, tmp_path, topic)
    ui = free_port()
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("")
    worker = WorkerProcess(
        tmp_path / "w",
        extra_conf={
            **bus.conf,
            "spark.master": spark_master,
            "spark.executor.memory": "1g",
            "spark.ui.enabled": "true",
            "spark.ui.port": str(ui),
        },
    ).start()
    log = worker.log.read_text()
    # the probe ran on the executors, in this test's Python environment (same path here)
    assert "is shared with the executors" in log
    assert f"{Path(sys.executable).parent}/python" in log.split("executors run", 1)[1]
    stop, written = threading.Event(), [0]
    feeder = threading.Thread(target=_feed, args=(src, stop, written), daemon=True)
    writers = _PartWriters(tmp_path / "w" / "store" / "bus" / "writes.sqlite", "src/")
    try:
        writers.__enter__()
        app = _App(ui)
        # tasks the executors ran before any connector (the probe's)
        probe_tasks = {i: e["completedTasks"] for i, e in app.executors().items()}
        for name, config in (
            ("src", {"connector.class": "FileSourceConnector", "filename": str(src)}),
            ("dst", {"connector.class": "FileSinkConnector", "filename": str(dst)}),
        ):
            key = "connect.topicname" if name == "src" else "connect.topicnames"
            config |= {"max.tasks": "2", key: topic}
            response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
            assert response.status_code == 200, response.text
        feeder.start()

        def busy_executors() -> dict[str, int]:
            """Tasks of the connector queries per live executor."""
            return {
                i: e["completedTasks"] - probe_tasks.get(i, 0)
                for i, e in app.executors().items()
                if e["isActive"]
            }

        # both executors (one per Spark worker) ran tasks of the connector queries
        wait_until(
            lambda: len([n for n in busy_executors().values() if n > 0]) >= 2 and _size(dst) > 0,
            what="tasks on two executors and the sink started",
        )
        hosts = {e["hostPort"] for e in app.executors().values()}
        assert all(h.startswith("127.0.0.1:") for h in hosts), hosts
        before = app.executors()
        size_at_kill = _size(dst)
        os.kill(_worker_pid(2), signal.SIGKILL)
        # its executor goes with it (it watches its worker) and the driver removes it ...
        wait_until(
            lambda: sum(not e["isActive"] for e in app.executors().values()) == 1,
            what="the killed worker's executor to be removed",
        )
        lost = next(i for i, e in app.executors().items() if not e["isActive"])
        survivor = next(i for i in before if i != lost)
        # ... and the queries go on on the other executor
        done_then = app.executors()[survivor]["completedTasks"]
        wait_until(
            lambda: (
                _size(dst) > size_at_kill + 20_000
                and app.executors()[survivor]["completedTasks"] > done_then
            ),
            what="the sink to grow on the surviving executor",
        )
        stop.set()
        feeder.join()
        wait_until(lambda: _size(dst) >= _size(src), timeout=120, what="the sink to catch up")
        assert dst.read_bytes() == src.read_bytes()
        for name in ("src", "dst"):
            assert worker.state(name) == "RUNNING"
        assert worker.terminate() == 0
    finally:
        stop.set()
        writers.__exit__()
        if worker.proc is not None and worker.proc.poll() is None:
            worker.kill9()
        restarted = _cluster_up()
    _check_cluster_cli(restarted)
    # the source's parts were sent by Python workers of the cluster's executors
    assert writers.seen, (
        f"no writer of the source's parts was seen alive (gone before a look: {writers.gone})"
    )
    for pid, chain in writers.seen.items():
        assert any("CoarseGrainedExecutorBackend" in cmd for cmd in chain[1:]), (pid, chain)
        assert not any("sluice.cli worker" in cmd for cmd in chain), (pid, chain)
    # each line appended exactly once
    seen = bus.values()
    assert len(seen) == written[0]
    assert sorted(seen) == sorted(line.encode() for line in src.read_text().splitlines())
