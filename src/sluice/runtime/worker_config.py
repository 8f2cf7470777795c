"""The worker's `key=value` config file (RocketMQ Connect's keys, plus `bus=` and `spark.*`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from sluice.bus import BUS_KINDS, Bus, create_bus, is_bus_key
from sluice.converters._compatibility import DEFAULT_LEVEL, LEVELS
from sluice.runtime.allocation import strategy_name
from sluice.runtime.properties_file import read_properties
from sluice.runtime.secrets import ConfigProviders, is_provider_key
from sluice.sdk import ClientPolicy, ConfigDef, ConfigException, ConfigKey
from sluice.sdk._client_options import ALLOWLIST_KEY, POLICY_KEY, POLICY_MODES
from sluice.sdk._config import closest

log = logging.getLogger(__name__)

WORKER_KEYS = ConfigDef(
    ConfigKey("workerId", default="standalone-worker", doc="this worker's id in statuses"),
    ConfigKey("httpHost", default="0.0.0.0", doc="address the REST API binds to"),
    ConfigKey("httpPort", type="int", default=8082, min=0, doc="REST API port"),
    ConfigKey(
        "storePathRootDir",
        default="~/storeRoot",
        doc="root of the embedded stores, topics and checkpoints",
    ),
    ConfigKey("pluginPaths", type="list", default=(), doc="folders of Python connector modules"),
    ConfigKey(
        "offsetCommitIntervalMsConfig",
        type="int",
        default=100,
        min=0,
        doc="micro-batch trigger interval: positions are committed once per micro-batch",
    ),
    ConfigKey(
        "metrics.source.lag.interval.ms",
        type="int",
        default=10_000,
        min=100,
        doc="how often /metrics asks each source how far it is behind (in the background)",
    ),
    ConfigKey("bus", default="embedded", choices=BUS_KINDS),
    ConfigKey("bus.default.queues", type="int", default=8, min=1, doc="queues of a new topic"),
    ConfigKey(
        "bus.retention.ms",
        type="int",
        default=7 * 24 * 3600 * 1000,
        min=-1,
        doc="delete topic data older than this (-1: keep)",
    ),
    ConfigKey("bus.retention.bytes", type="int", default=-1, min=-1, doc="-1: no size limit"),
    ConfigKey(
        "cluster.shared.path.check",
        type="bool",
        default=True,
        doc="with a non-local spark.master, check at start that the executors read and write "
        "storePathRootDir as the driver does (see docs/spark-cluster.md)",
    ),
    ConfigKey(
        "cluster.shared.path.check.timeout.ms",
        type="int",
        default=120_000,
        min=1000,
        doc="how long that check waits for executors",
    ),
    ConfigKey(
        "file.allowed.dirs",
        type="list",
        default=(),
        doc="folders that connectors' file paths must be in (comma-separated; empty: any)",
    ),
    ConfigKey(
        POLICY_KEY,
        default="allowlist",
        choices=POLICY_MODES,
        doc="client options connectors pass to their client libraries (source.kafka.*, URL "
        "parameters): allowlist (those known to be safe), all, or none; options that load "
        "code or run commands never pass (see docs/operations.md)",
    ),
    ConfigKey(
        ALLOWLIST_KEY,
        type="list",
        default=(),
        doc="more client options to allow under the allowlist policy: family:option "
        "(kafka:debug, postgresql:client_encoding…) or option",
    ),
    ConfigKey(
        "rest.auth",
        default="none",
        choices=("none", "basic", "token"),
        doc="REST authentication: none, basic (user + password) or token (bearer)",
    ),
    ConfigKey(
        "rest.auth.file",
        default="",
        doc="credentials file of rest.auth (lines name:role:hash, see `sluice users`)",
    ),
    ConfigKey(
        "rest.auth.metrics.open",
        type="bool",
        default=False,
        doc="serve /metrics without credentials when rest.auth is on",
    ),
    ConfigKey("rest.tls.cert", default="", doc="PEM certificate: serve the REST API over HTTPS"),
    ConfigKey("rest.tls.key", default="", doc="PEM private key of rest.tls.cert"),
    ConfigKey(
        "rest.request.max.bytes",
        type="int",
        default=4 << 20,
        min=1024,
        doc="the largest REST request body read; a larger one is a 413",
    ),
    ConfigKey(
        "rest.request.body.timeout.ms",
        type="int",
        default=30_000,
        min=100,
        doc="the longest a REST request body may take to arrive; a slower one is a 408",
    ),
    ConfigKey(
        "rest.auth.failures.per.minute",
        type="int",
        default=10,
        min=0,
        doc="failed credential checks a client address may make in any minute; more are "
        "answered 429 (0: no limit)",
    ),
    ConfigKey(
        "max.connectors",
        type="int",
        default=100,
        min=1,
        doc="the most connectors the worker (in distributed mode, the cluster) holds; a create "
        "past it is a 429",
    ),
    ConfigKey(
        "status.poll.interval.ms",
        type="int",
        default=500,
        min=10,
        doc="how often the worker checks its queries for failures",
    ),
    # -- distributed mode (docs/distributed.md) ---------------------------------------------
    ConfigKey(
        "cluster.store.url",
        default="",
        doc="PostgreSQL URL of the shared cluster store (postgresql://user:pw@host:port/db); "
        "set, the worker runs in distributed mode",
    ),
    ConfigKey(
        "cluster.name",
        default="sluice",
        pattern=r"[A-Za-z0-9._-]{1,100}",
        doc="the cluster this worker joins; a store of another cluster is refused",
    ),
    ConfigKey(
        "allocTaskStrategy",
        default="org.apache.rocketmq.connect.runtime.service.strategy."
        "DefaultAllocateConnAndTaskStrategy",
        doc="round-robin (RocketMQ's DefaultAllocateConnAndTaskStrategy) or consistent-hash "
        "(AllocateConnAndTaskStrategyByConsistentHash)",
    ),
    ConfigKey(
        "virtualNode",
        type="int",
        default=0,
        min=0,
        doc="virtual nodes per worker on the consistent-hash ring (0: as many as workers)",
    ),
    ConfigKey("consistentHashFunc", default="MD5", choices=("MD5",), doc="the ring's hash"),
    ConfigKey(
        "schema.compatibility",
        default=DEFAULT_LEVEL,
        choices=LEVELS,
        doc="compatibility level of new schema versions in the registry (a connector's "
        "schema.compatibility overrides it for the topics it writes)",
    ),
    ConfigKey(
        "rocketmq.runtime.cluster.rebalance.waitInterval",
        type="int",
        default=1000,
        min=50,
        doc="ms between two membership/allocation rounds (heartbeat, rebalance, lease renewal)",
    ),
    ConfigKey(
        "cluster.session.timeout.ms",
        type="int",
        default=6000,
        min=200,
        doc="a worker whose last heartbeat is older than this is dead; its leases are taken",
    ),
)

#: The keys only a distributed worker reads (docs/distributed.md): set without
#: `cluster.store.url`, the worker refuses to start rather than run standalone.
CLUSTER_ONLY_KEYS = (
    "cluster.name",
    "allocTaskStrategy",
    "virtualNode",
    "consistentHashFunc",
    "rocketmq.runtime.cluster.rebalance.waitInterval",
    "cluster.session.timeout.ms",
)

# RocketMQ Connect keys that only matter for its other buses or modes: accepted, not used here.
_KNOWN_UNUSED = {
    "namesrvAddr",
    "rmqProducerGroup",
    "rmqConsumerGroup",
    "operationTimeout",
    "maxMessageSize",
    "aclEnable",
    "accessKey",
    "secretKey",
    "connectorStoreTopic",
    "clusterStoreTopic",
    "configStoreTopic",
    "positionStoreTopic",
    "offsetStoreTopic",
    "connectStatusTopic",
    "maxStartTimeoutMills",
    "maxStopTimeoutMills",
    "metricsConfigPath",
    "openLogMetricReporter",
}


@dataclass(frozen=True)
class RestConfig:
    """Where the worker's REST API listens (`httpHost`, `httpPort`)."""

    host: str = "127.0.0.1"
    port: int = 8082


@dataclass(frozen=True)
class BusConfig:
    """The topic backend (`bus`, `bus.*`) and the keys of a broker backend as typed."""

    kind: str = "embedded"
    default_queues: int = 8
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    retention_bytes: int | None = None
    #: the keys of the bus backends (`kafka.*`, `rocketmq.*`…), read by the one `kind` names
    props: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterConfig:
    """Distributed mode's keys: the shared store, allocation and membership (docs/distributed.md);
    `store_url` empty means a standalone worker."""

    store_url: str = ""
    name: str = "sluice"
    alloc_strategy: str = "round-robin"
    virtual_nodes: int = 0
    hash_func: str = "MD5"
    rebalance_interval_ms: int = 1000
    session_timeout_ms: int = 6000
    #: `cluster.shared.path.check` and its timeout (`sluice.runtime.shared_path`)
    shared_path_check: bool = True
    shared_path_check_timeout_ms: int = 120_000


@dataclass(frozen=True)
class WorkerConfig:
    """A parsed worker config: typed RocketMQ Connect keys, grouped by what reads them (`rest`,
    `bus`, `cluster`), and the `spark.*` pass-through."""

    worker_id: str
    store_root: str
    plugin_paths: tuple[str, ...]
    trigger_interval_ms: int
    status_poll_ms: int
    rest: RestConfig = field(default_factory=RestConfig)
    bus: BusConfig = field(default_factory=BusConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    spark: dict[str, str] = field(default_factory=dict)
    #: `config.providers`: resolves `${provider:path:key}` references in connector configs
    providers: ConfigProviders = field(default_factory=ConfigProviders)
    source_lag_interval_ms: int = 10_000
    schema_compatibility: str = DEFAULT_LEVEL
    client_policy: ClientPolicy = field(default_factory=ClientPolicy)
    #: `max.connectors`: creates past it are refused (see `StandaloneHerder.put_connector`)
    max_connectors: int = 100

    @classmethod
    def from_properties(cls, props: dict[str, str], base_dir: str = ".") -> WorkerConfig:
        values = WORKER_KEYS.parse(props)
        unknown = [
            key
            for key in props
            if key not in WORKER_KEYS.keys
            and key not in _KNOWN_UNUSED
            and not key.startswith("spark.")
            and not is_bus_key(key)
            and not is_provider_key(key)
        ]
        for key in unknown:
            near = closest(key, [*WORKER_KEYS.keys, *_KNOWN_UNUSED])
            hint = f" (did you mean {near}?)" if near else ""
            log.warning("worker config: unknown key %r ignored%s", key, hint)
        _refuse_cluster_keys_alone(props, values["cluster.store.url"], unknown)

        def path(value: str) -> str:
            return os.path.abspath(os.path.join(base_dir, os.path.expanduser(value)))

        if "://" in values["storePathRootDir"]:  # SQLite stores and Arrow segments need POSIX
            raise ConfigException(
                "storePathRootDir",
                f"must be a file system path, got the URI {values['storePathRootDir']!r}",
                suggestion="mount the shared storage (NFS, an HDFS NFS gateway…) and name the "
                "mount point; see docs/spark-cluster.md",
            )
        providers = ConfigProviders.from_worker(props)  # a bad provider is reported at once
        store_root = path(values["storePathRootDir"])
        strategy = strategy_name(values["allocTaskStrategy"])
        interval = values["rocketmq.runtime.cluster.rebalance.waitInterval"]
        timeout = values["cluster.session.timeout.ms"]
        if values["cluster.store.url"] and timeout < 3 * interval:
            raise ConfigException(
                "cluster.session.timeout.ms",
                f"{timeout} ms is less than three rounds of "
                f"rocketmq.runtime.cluster.rebalance.waitInterval ({interval} ms): a live worker "
                "would be taken for dead",
            )
        # Build (not connect) the bus now, from the keys it will be built from at start, so that
        # a missing or bad bus key is reported at once.
        bus_props = {k: v for k, v in props.items() if is_bus_key(k)}
        create_bus(values["bus"], bus_props, os.path.join(store_root, "bus"))
        return cls(
            worker_id=values["workerId"],
            store_root=store_root,
            plugin_paths=tuple(path(p) for p in values["pluginPaths"]),
            trigger_interval_ms=values["offsetCommitIntervalMsConfig"],
            status_poll_ms=values["status.poll.interval.ms"],
            rest=RestConfig(values["httpHost"], values["httpPort"]),
            bus=BusConfig(
                kind=values["bus"],
                default_queues=values["bus.default.queues"],
                retention_ms=None if values["bus.retention.ms"] < 0 else values["bus.retention.ms"],
                retention_bytes=(
                    None if values["bus.retention.bytes"] < 0 else values["bus.retention.bytes"]
                ),
                props=bus_props,
            ),
            cluster=ClusterConfig(
                store_url=values["cluster.store.url"],
                name=values["cluster.name"],
                alloc_strategy=strategy,
                virtual_nodes=values["virtualNode"],
                hash_func=values["consistentHashFunc"],
                rebalance_interval_ms=interval,
                session_timeout_ms=timeout,
                shared_path_check=values["cluster.shared.path.check"],
                shared_path_check_timeout_ms=values["cluster.shared.path.check.timeout.ms"],
            ),
            spark={k: v for k, v in props.items() if k.startswith("spark.")},
            providers=providers,
            source_lag_interval_ms=values["metrics.source.lag.interval.ms"],
            schema_compatibility=values["schema.compatibility"],
            client_policy=ClientPolicy.of(props),
            max_connectors=values["max.connectors"],
        )

    def create_bus(self) -> Bus:
        """The topic backend named by `bus=` (embedded: the log under `<store root>/bus`;
        kafka/rocketmq: their staged rows and commit journal there)."""
        return create_bus(
            self.bus.kind,
            self.bus.props,
            os.path.join(self.store_root, "bus"),
            default_queues=self.bus.default_queues,
        )

    @classmethod
    def load(cls, path: str) -> WorkerConfig:
        """Read a `key=value` file; relative paths in it are relative to the working directory
        (as RocketMQ Connect's `connect-standalone.sh` resolves them)."""
        return cls.from_properties(read_properties(path))


def _refuse_cluster_keys_alone(props: dict[str, str], store_url: str, unknown: list[str]) -> None:
    """Keys only distributed mode reads, set without `cluster.store.url`: the user meant a
    cluster (a misspelt or forgotten store URL), and a worker that ran standalone instead would
    run every connector on its own beside the cluster's workers. Raises naming them."""
    given = [key for key in CLUSTER_ONLY_KEYS if key in props]
    if store_url or not given:
        return
    typo = closest("cluster.store.url", unknown)
    verb = "is" if len(given) == 1 else "are"
    message = f"required key is missing: {', '.join(given)} {verb} set, which only a distributed "
    message += "worker reads"
    if typo is None:
        suggestion = "set cluster.store.url as docs/distributed.md shows, or remove "
        suggestion += f"{'it' if len(given) == 1 else 'them'} to run a standalone worker"
    else:
        message += f"; {typo} is set, and looks like a typo of cluster.store.url"
        suggestion = f"rename {typo} to cluster.store.url"
    raise ConfigException("cluster.store.url", message, suggestion=suggestion)
