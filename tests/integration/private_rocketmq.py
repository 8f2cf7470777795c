"""A RocketMQ 5.x name server + broker of one test (or one module) alone.

It is `scripts/servers/rocketmq.sh` again (the same Maven Central jars, JVM flags, loopback shim
and check), run with its own name, data folder and free loopback ports, so that a test may stop
and start it, or enable ACLs on it, without disturbing the shared test broker that the other
pytest-xdist worker is using at the same moment.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sluice.clients.rocketmq import Credentials, RocketMQClient

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "servers" / "rocketmq.sh"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports() -> tuple[int, int]:
    """A name server port and a broker port ``p`` with ``p - 2`` (its "VIP" channel) and
    ``p + 1`` (its HA port) free as well."""
    for _attempt in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base < 20_000 or base > 60_000:
            continue
        namesrv, broker = base, base + 10
        if all(_free(p) for p in (namesrv, broker - 2, broker, broker + 1)):
            return namesrv, broker
    raise RuntimeError("no free loopback ports for a private RocketMQ")


@dataclass
class PrivateRocketMQ:
    """A running private name server + broker (see the module docstring)."""

    root: Path
    namesrv: str
    broker: str
    env: dict[str, str]

    def client(self, credentials: Credentials | None = None, **kwargs: object) -> RocketMQClient:
        return RocketMQClient(self.namesrv, credentials=credentials, **kwargs)  # type: ignore[arg-type]

    def run(self, action: str) -> None:
        """`up` or `down` this cluster (the script stops only what it started; its data folder
        and ports stay, so topics and offsets survive a `down` then `up`)."""
        done = subprocess.run(
            ["bash", str(SCRIPT), action], env=self.env, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"private RocketMQ `{action}` failed (exit {done.returncode}):\n"
                f"{done.stderr[-4000:]}{done.stdout[-1000:]}"
            )

    def stop_broker(self) -> None:
        """Stop the broker alone, as `down` does (SIGTERM: its shutdown hook flushes the store
        and unregisters the broker, so the name server, left up, routes none of its topics from
        then on; a broker that dies instead stays routed for two minutes without heartbeats).
        `run("up")` starts the broker again."""
        pidfile = self.root / self.env["SLUICE_ROCKETMQ_NAME"] / "run" / "broker.pid"
        pid = int(pidfile.read_text())
        exited = os.pidfd_open(pid)  # readable once the process has exited (not our child)
        try:
            os.kill(pid, signal.SIGTERM)
            if not select.select([exited], [], [], 60)[0]:
                os.kill(pid, signal.SIGKILL)
        finally:
            os.close(exited)

    def stop(self) -> None:
        """Stop the two JVMs of this cluster, whatever state they are in."""
        subprocess.run(
            ["bash", str(SCRIPT), "down"], env=self.env, capture_output=True, timeout=120
        )


def start(
    root: Path,
    name: str = "rocketmq-private",
    broker_conf: str | None = None,
    home_conf: Path | None = None,
) -> PrivateRocketMQ:
    """Start a cluster under ``root`` (``broker_conf``: extra broker.conf lines; ``home_conf``:
    a folder copied to its home's conf/); the script waits until the broker is registered and
    checks that both JVMs listen on 127.0.0.1 only."""
    namesrv_port, broker_port = _free_ports()
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SLUICE_SERVERS_DIR": str(root),
        "SLUICE_ROCKETMQ_NAME": name,
        "SLUICE_ROCKETMQ_NAMESRV_PORT": str(namesrv_port),
        "SLUICE_ROCKETMQ_BROKER_PORT": str(broker_port),
        "SLUICE_ROCKETMQ_BROKER_HEAP": "256m",
    }
    if broker_conf is not None:
        (root / f"{name}-broker.conf").write_text(broker_conf)
        env["SLUICE_ROCKETMQ_BROKER_CONF"] = str(root / f"{name}-broker.conf")
    if home_conf is not None:
        env["SLUICE_ROCKETMQ_HOME_CONF"] = str(home_conf)
    cluster = PrivateRocketMQ(root, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}", env)
    try:
        cluster.run("up")
    except RuntimeError:
        cluster.stop()
        raise
    return cluster
