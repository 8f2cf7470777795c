"""A second, ACL-enabled RocketMQ 4.9.4 (name server + broker) for the ACL tests.

It reuses what ``../shared/tools/rocketmq/up.sh`` prepares (the release folder, the Debian jars it
puts on the classpath, its LD_PRELOAD loopback shim), so ``up.sh`` must have run first; it never
touches that broker. Everything of its own lives under one directory: a RocketMQ home with the
``plain_acl.yml`` below, the store and the logs. Ports are free loopback ports picked at start.

Accounts (no ``globalWhiteRemoteAddresses``: every request must be signed):

* ``ADMIN`` — ``admin: true``: creates topics and groups, reads and writes every topic;
* ``LOW`` — ``admin: false``, ``defaultTopicPerm: DENY``: may only use topic `GRANTED_TOPIC`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sluice.clients.rocketmq import Credentials, RocketMQClient, RocketMQUnavailable
from tests.conftest import wait_until

RMQ_ROOT = Path(os.environ.get("RMQ_ROOT", "/tmp/rocketmq"))
RELEASE = RMQ_ROOT / "rocketmq-all-4.9.4-bin-release"
SHIM = RMQ_ROOT / "run" / "libloopback_bind.so"
NETTY = [
    "buffer",
    "codec",
    "common",
    "handler",
    "resolver",
    "transport",
    "transport-native-epoll",
    "transport-native-unix-common",
]

ADMIN = Credentials("sluiceAdmin", "admin-secret-1")
LOW = Credentials("sluiceLow", "low-secret-2")
GRANTED_TOPIC = "acl-granted"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    whiteRemoteAddress:
    admin: true
  - accessKey: {LOW.access_key}
    secretKey: {LOW.secret_key}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {GRANTED_TOPIC}=PUB|SUB
"""


def missing_prerequisites() -> list[str]:
    """What ``up.sh`` should have left on this machine and is not there."""
    needed = [RELEASE / "lib" / "rocketmq-broker-4.9.4.jar", SHIM]
    needed += [Path(f"/usr/share/java/netty-{m}.jar") for m in NETTY]
    needed += [Path("/usr/share/java/bcprov.jar"), Path("/usr/share/java/zstd-jni.jar")]
    missing = [str(p) for p in needed if not p.exists()]
    if shutil.which("java") is None:
        missing.append("java on PATH")
    return missing


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
    raise RuntimeError("no free loopback ports for the ACL broker")


@dataclass
class AclCluster:
    """A running ACL-enabled name server + broker (see the module docstring)."""

    root: Path
    namesrv: str
    broker: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self, credentials: Credentials | None, **kwargs: object) -> RocketMQClient:
        return RocketMQClient(self.namesrv, credentials=credentials, **kwargs)  # type: ignore[arg-type]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.out"))
        )

    def stop(self) -> None:
        """Stop the two JVMs this cluster started (their process groups), broker first."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait(10)
        self.processes.clear()


def _listening_ports(pid: int) -> list[str]:
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=False).stdout
    return [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]


def start(root: Path, timeout_s: float = 120.0) -> AclCluster:
    """Start the cluster under ``root`` and wait (polling) until the broker is registered."""
    namesrv_port, broker_port = _free_ports()
    home = root / "home"
    (home / "conf").mkdir(parents=True)
    for name in ("logback_broker.xml", "logback_namesrv.xml"):
        shutil.copy(RELEASE / "conf" / name, home / "conf" / name)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    store = root / "store"
    (root / "namesrv.conf").write_text(f"listenPort={namesrv_port}\n")
    (root / "broker.conf").write_text(
        "\n".join(
            [
                "brokerClusterName=AclCluster",
                "brokerName=broker-acl",
                "brokerId=0",
                "brokerIP1=127.0.0.1",
                "brokerIP2=127.0.0.1",
                f"namesrvAddr=127.0.0.1:{namesrv_port}",
                f"listenPort={broker_port}",
                "brokerRole=ASYNC_MASTER",
                "flushDiskType=ASYNC_FLUSH",
                f"storePathRootDir={store}",
                f"storePathCommitLog={store}/commitlog",
                "mappedFileSizeCommitLog=16777216",
                "autoCreateTopicEnable=false",
                "autoCreateSubscriptionGroup=true",
                "aclEnable=true",
                "",
            ]
        )
    )
    classpath = [str(RELEASE / "conf"), str(RELEASE / "lib" / "*")]
    classpath += [f"/usr/share/java/netty-{m}.jar" for m in NETTY]
    classpath += ["/usr/share/java/bcprov.jar", "/usr/share/java/zstd-jni.jar"]
    jvm = [
        "-server",
        "-XX:+UseG1GC",
        "-XX:-OmitStackTraceInFastThrow",
        "-Djava.net.preferIPv4Stack=true",
        f"-Duser.home={root / 'user'}",
        f"-Drocketmq.home.dir={home}",
        "--add-opens",
        "java.base/java.nio=ALL-UNNAMED",
        "--add-opens",
        "java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens",
        "java.base/jdk.internal.ref=ALL-UNNAMED",
        "-cp",
        ":".join(classpath),
    ]
    env = {**os.environ, "ROCKETMQ_HOME": str(home), "LD_PRELOAD": str(SHIM)}
    cluster = AclCluster(root, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}")

    def launch(name: str, heap: str, main: str) -> None:
        with open(root / f"{name}.out", "ab") as out:
            cluster.processes.append(
                subprocess.Popen(
                    [
                        "java",
                        f"-Xms{heap}",
                        f"-Xmx{heap}",
                        *jvm,
                        main,
                        "-c",
                        str(root / f"{name}.conf"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            )

    try:
        launch("namesrv", "128m", "org.apache.rocketmq.namesrv.NamesrvStartup")
        launch("broker", "256m", "org.apache.rocketmq.broker.BrokerStartup")
        probe = RocketMQClient(cluster.namesrv, timeout_s=2.0)

        def registered() -> bool:
            for proc in cluster.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"an ACL cluster JVM exited ({proc.returncode})")
            try:
                return cluster.broker in str(probe.cluster_info().get("brokerAddrTable"))
            except RocketMQUnavailable:
                return False

        wait_until(registered, timeout_s, "the ACL broker to register", every=0.25)
        for proc in cluster.processes:  # what up.sh checks too: loopback only
            bad = [a for a in _listening_ports(proc.pid) if not a.startswith("127.")]
            if bad:
                raise RuntimeError(f"the ACL cluster listens on non-loopback addresses {bad}")
    except BaseException as exc:
        logs = cluster.logs()
        cluster.stop()
        raise RuntimeError(f"{exc}\n{logs}") from exc
    return cluster
