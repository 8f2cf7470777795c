"""A second, ACL-enabled RocketMQ 5.x (name server + broker) for the ACL tests.

It is `scripts/servers/rocketmq.sh` again (the same Maven Central jars, JVM flags, loopback shim
and check), run with its own name, data folder and free loopback ports, and with the ACL keys below
added to its broker.conf. RocketMQ 5.3.3 dropped ACL 1.0 (``aclEnable`` + ``plain_acl.yml``
enforced as such); its ACL 2.0 imports a ``plain_acl.yml`` at start-up
(``migrateAuthFromV1Enabled``): each account becomes a user (``admin: true`` a super user) and its
topic/group permissions ACL policies, enforced by the default authentication (the same HMAC-SHA1
request signature as 4.x) and authorization providers. It never touches the main test broker.

Accounts (no ``globalWhiteRemoteAddresses``: every request must be signed):

* ``ADMIN`` — ``admin: true``: creates topics and groups, reads and writes every topic;
* ``LOW`` — ``admin: false``, ``defaultTopicPerm: DENY``: may only use topic `GRANTED_TOPIC`.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sluice.clients.rocketmq import Credentials, RocketMQClient

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "servers" / "rocketmq.sh"

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


def broker_conf(root: Path) -> str:
    """The broker.conf lines that turn ACL 2.0 on and import `PLAIN_ACL` (users and ACLs kept in
    RocksDB under ``root``)."""
    return "\n".join(
        [
            "brokerClusterName=AclCluster",
            "brokerName=broker-acl",
            "autoCreateTopicEnable=false",
            "authenticationEnabled=true",
            "authenticationProvider="
            "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
            "authenticationMetadataProvider="
            "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
            "authorizationEnabled=true",
            "authorizationProvider="
            "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
            "authorizationMetadataProvider="
            "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
            "migrateAuthFromV1Enabled=true",
            # ACL 2.0 wants action Get on a topic to read its queues' offset range
            # (GET_MAX_OFFSET 30, GET_MIN_OFFSET 31), which ACL 1.0 never checked and the import
            # of `PUB|SUB` does not give: only authenticate them, as 4.9.x did.
            "authorizationWhitelist=30,31",
            f"authConfigPath={root / 'auth'}",
            "",
        ]
    )


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
    env: dict[str, str]

    def client(self, credentials: Credentials | None, **kwargs: object) -> RocketMQClient:
        return RocketMQClient(self.namesrv, credentials=credentials, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop the two JVMs of this cluster (the script stops only what it started)."""
        subprocess.run(
            ["bash", str(SCRIPT), "down"], env=self.env, capture_output=True, timeout=120
        )


def start(root: Path) -> AclCluster:
    """Start the cluster under ``root``; the script waits until the broker is registered and
    checks that both JVMs listen on 127.0.0.1 only."""
    namesrv_port, broker_port = _free_ports()
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    (root / "broker-acl.conf").write_text(broker_conf(root))
    env = {
        **os.environ,
        "SLUICE_SERVERS_DIR": str(root),
        "SLUICE_ROCKETMQ_NAME": "rocketmq-acl",
        "SLUICE_ROCKETMQ_NAMESRV_PORT": str(namesrv_port),
        "SLUICE_ROCKETMQ_BROKER_PORT": str(broker_port),
        "SLUICE_ROCKETMQ_BROKER_CONF": str(root / "broker-acl.conf"),
        "SLUICE_ROCKETMQ_HOME_CONF": str(root / "conf"),
        "SLUICE_ROCKETMQ_BROKER_HEAP": "256m",
    }
    cluster = AclCluster(root, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}", env)
    done = subprocess.run(
        ["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        cluster.stop()
        raise RuntimeError(
            f"the ACL cluster did not come up (exit {done.returncode}):\n"
            f"{done.stderr[-4000:]}{done.stdout[-1000:]}"
        )
    return cluster
