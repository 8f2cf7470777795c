"""A second, ACL-enabled RocketMQ 5.x (name server + broker) for the ACL tests.

It is a private RocketMQ (`tests.integration.private_rocketmq`) with the ACL keys below added to
its broker.conf. RocketMQ 5.3.3 dropped ACL 1.0 (``aclEnable`` + ``plain_acl.yml``
enforced as such); its ACL 2.0 imports a ``plain_acl.yml`` at start-up
(``migrateAuthFromV1Enabled``): each account becomes a user (``admin: true`` a super user) and its
topic/group permissions ACL policies, enforced by the default authentication (the same HMAC-SHA1
request signature as 4.x) and authorization providers. It never touches the main test broker.

Accounts (no ``globalWhiteRemoteAddresses``: every request must be signed):

* ``ADMIN`` — ``admin: true``: creates topics and groups, reads and writes every topic;
* ``LOW`` — ``admin: false``, ``defaultTopicPerm: DENY``: may only use topic `GRANTED_TOPIC`.
"""

from __future__ import annotations

from pathlib import Path

from sluice.clients.rocketmq import Credentials
from tests.integration import private_rocketmq
from tests.integration.private_rocketmq import PrivateRocketMQ

#: the ACL tests' name for their private cluster
AclCluster = PrivateRocketMQ

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


def start(root: Path) -> PrivateRocketMQ:
    """Start the cluster under ``root`` (a private RocketMQ with the ACL lines above)."""
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    return private_rocketmq.start(
        root, "rocketmq-acl", broker_conf=broker_conf(root), home_conf=root / "conf"
    )
