"""sluice's core install, without any extra: the quickstart runs (file → topic → file through a
real worker, over REST), and what needs an extra says which.

The venv is built once for the module, offline: pip installs pyproject.toml's `dependencies` (the
core) with ``--no-index`` from a wheelhouse packed from this suite's own venv
(`tests.e2e.wheelhouse`: exactly the versions the suite runs with, no network, no pip cache), and
sluice itself is put on the path the way `pip install -e .` does it, with a ``.pth`` file naming
``src`` (building the editable wheel would need pyproject's build backend, which an offline
machine may lack). So pip resolves the core requirements as a user's install does, and anything
the quickstart imports beyond them fails here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e import wheelhouse
from tests.e2e.worker_process import REPO, WorkerProcess, free_port

# the first test builds the core venv (a wheelhouse of the core, then pip install)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
#: what the connector families' extras install: the core venv may hold none of it
EXTRA_DISTS = {
    re.split(r"[\[=<>~ ;]", requirement, maxsplit=1)[0].lower()
    for extra, requirements in PROJECT["optional-dependencies"].items()
    if extra not in ("all", "dev")
    for requirement in requirements
}
DISTRIBUTIONS = (
    "import importlib.metadata as m, json\n"
    "print(json.dumps([d.metadata['Name'].lower() for d in m.distributions()]))"
)


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The interpreter of a fresh venv holding sluice's core install and nothing else."""
    root = tmp_path_factory.mktemp("core-install")
    packed = wheelhouse.build(PROJECT["dependencies"], root / "wheels")
    assert not set(packed) & EXTRA_DISTS, "the core requires a library of an extra"
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], timeout=300)  # pip: Python's own
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    requirements = root / "core.txt"
    requirements.write_text("\n".join(PROJECT["dependencies"]) + "\n")
    wheels = str(root / "wheels")
    pip = [python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check"]
    installed = _run([*pip, "--find-links", wheels, "-r", str(requirements)], timeout=780)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(site.stdout.strip(), "__editable__.sluice.pth").write_text(f"{REPO / 'src'}\n")
    yield python


def test_the_core_venv_holds_no_extra(core_python: str) -> None:
    listed = _run([core_python, "-c", DISTRIBUTIONS])
    assert listed.returncode == 0, listed.stderr
    names = set(json.loads(listed.stdout))
    assert "pyspark" in names and not names & EXTRA_DISTS
    where = _run([core_python, "-c", "import sluice; print(sluice.__file__)"])
    assert where.stdout.strip() == str(REPO / "src" / "sluice" / "__init__.py"), where.stderr


def test_bus_kafka_without_the_kafka_extra_refuses_to_start(
    core_python: str, tmp_path: Path
) -> None:
    conf = tmp_path / "kafka.conf"
    conf.write_text(
        f"storePathRootDir={tmp_path / 'store'}\nhttpPort={free_port()}\nbus=kafka\n"
        "bootstrap.servers=127.0.0.1:9092\n"
    )
    done = _run([core_python, "-m", "sluice.cli", "worker", "-c", str(conf)], timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        f"error: worker config {conf}: bus: bus=kafka needs the Kafka client (confluent-kafka): "
        "pip install 'sluice[kafka]'"
    ) in done.stderr


def test_quickstart_runs_and_a_redis_connector_names_its_extra(
    core_python: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(tmp_path / "worker", python=core_python)
    try:
        worker.wait_boot(worker.launch(), timeout=600)
        data = tmp_path / "data"
        data.mkdir()
        (data / "in-0.txt").write_text("hello\nworld\n")
        worker.file_pipeline(data, 0)
        with open(data / "in-0.txt", "a") as f:
            f.write("one more line\n")
        out = data / "out-0.txt"
        wait_until(
            lambda: out.exists() and out.read_text() == "hello\nworld\none more line\n",
            300,
            "the quickstart's lines in the sink file",
        )

        # listed without its client library…
        listed = worker.body("/plugin/list")
        assert "RedisSinkConnector" in str(listed)
        cli = _run(
            [core_python, "-m", "sluice.cli", "--url", worker.url, "plugins", "list"],
            timeout=300,
        )
        assert cli.returncode == 0 and "RedisSinkConnector" in cli.stdout, cli.stderr
        # …but not created
        config = {
            "connector.class": "RedisSinkConnector",
            "redis.url": "redis://127.0.0.1:6379/0",
            "connect.topicnames": "fileTopic",
        }
        created = httpx.post(f"{worker.url}/connectors/redis-out", json=config, timeout=120)
        assert created.status_code == 400, created.text
        assert (
            "connector.class: RedisSinkConnector needs the redis client (redis-py): "
            "pip install 'sluice[redis]'"
        ) in created.text
        assert "redis-out" not in worker.body("/connectors/list")
        validated = httpx.put(
            f"{worker.url}/v1/connector-plugins/RedisSinkConnector/config/validate",
            json=config,
            timeout=120,
        )
        assert validated.status_code == 400, validated.text
        assert "pip install 'sluice[redis]'" in validated.text
        assert worker.state("sink-0") == "RUNNING"
    finally:
        code = worker.terminate() if worker.proc is not None else 0
    assert code == 0, worker.log.read_text()[-3000:]
