"""The composition root: one function builds a worker's runtime from its `WorkerConfig`.

Nothing else constructs the session, stores, bus, push board, plugin registry, progress tracker,
metrics snapshot or herder. The mode is chosen here and only here: `cluster.store.url` set means
a distributed worker (the shared PostgreSQL store for configs, statuses, leases, positions,
commit journal, schemas and counters, `DistributedHerder`), otherwise a standalone one (SQLite
under `storePathRootDir`). The REST app is built by the entry point (`sluice.worker_main`) from
`Runtime.herder`, because `rest` depends on `runtime` and not the reverse.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from pyspark.sql import SparkSession

from sluice.engine.session import build_class_archive_in_background, build_session
from sluice.engine.shutdown import quiet_batch_interrupts
from sluice.push import PushBoard
from sluice.runtime.herder import Herder
from sluice.runtime.herder.base import BaseHerder, QueryRunner
from sluice.runtime.herder.standalone import StandaloneHerder
from sluice.runtime.metrics.progress import ProgressTracker
from sluice.runtime.metrics.snapshot import MetricsSnapshot
from sluice.runtime.metrics.source_lag import SourceLag
from sluice.runtime.plugins import PluginRegistry, plugin_kind
from sluice.runtime.runner import ConnectorRunner
from sluice.runtime.secrets import password_keys
from sluice.runtime.shared_path import check_shared_store_root
from sluice.runtime.stores import WorkerParts, WorkerStores
from sluice.runtime.worker_config import WorkerConfig
from sluice.store import prepare_store_root
from sluice.store.configs import ConfigStore, SqliteConfigStore
from sluice.store.statuses import SqliteStatusStore

log = logging.getLogger(__name__)


def build_parts(config: WorkerConfig, stores: WorkerStores) -> WorkerParts:
    """The bus (named by `bus=`, its commit journal in `stores` when they hold one), the stores
    and the push board (where push sinks read their live limits and report progress)."""
    return WorkerParts(
        bus=stores.attach(config.create_bus()),
        stores=stores,
        push_board=PushBoard(os.path.join(config.store_root, "push.sqlite")),
    )


def build_runner(
    spark: SparkSession, config: WorkerConfig, plugins: PluginRegistry, parts: WorkerParts
) -> QueryRunner:
    """The query runner of a worker, its queries committing to `parts`."""
    runner = ConnectorRunner(
        spark,
        config.store_root,
        trigger_interval_ms=config.trigger_interval_ms,
        default_queues=config.bus.default_queues,
        retention_ms=config.bus.retention_ms,
        retention_bytes=config.bus.retention_bytes,
        plugins=plugins,
        bus=parts.bus,
        providers=config.providers,
        stores=parts.stores,
        schema_compatibility=config.schema_compatibility,
        push_board=parts.push_board,
    )
    runner.start_maintenance()  # topic retention and orphaned staged segments, every minute
    return runner


def build_progress(spark: SparkSession, runner: QueryRunner, parts: WorkerParts) -> ProgressTracker:
    """The tracker of every query's progress (record totals, rates, batch times for
    `/metrics`), listening to `spark`'s queries from now on."""
    return ProgressTracker(parts.stores.counters, runner.counts_own_records).attach(spark)


def build_metrics(
    config: WorkerConfig,
    plugins: PluginRegistry,
    runner: QueryRunner,
    progress: ProgressTracker,
    configs: ConfigStore,
    parts: WorkerParts,
) -> MetricsSnapshot:
    """What one scrape of `/metrics` reads (`MetricsSnapshot`), with the probe of source
    connectors' lag, which asks each source's tasks in the background."""

    def task_class(class_name: str) -> type | None:
        return getattr(plugins.connector_or_none(class_name), "task_class", None)

    def resolve(class_name: str, task_config: dict[str, str]) -> dict[str, str]:
        cls = plugins.connector_or_none(class_name)
        return config.providers.resolve(task_config, password_keys(cls) if cls else ())

    lag = SourceLag(
        task_class=task_class,
        resolve=resolve,
        committed=runner.committed_positions,
        interval_s=config.source_lag_interval_ms / 1000,
    )
    return MetricsSnapshot(
        config.worker_id,
        configs,
        runner,
        parts,
        progress,
        lag,
        kind_of=lambda conf: plugin_kind(
            plugins.connector_or_none(conf.get("connector.class", ""))
        ),
    )


@dataclass
class Runtime:
    """What a worker process runs: its Spark session and herder (which owns the rest)."""

    config: WorkerConfig
    spark: SparkSession
    plugins: PluginRegistry
    herder: BaseHerder

    @property
    def control(self) -> Herder:
        """The control-plane interface the REST API is given."""
        return self.herder

    def start(self) -> None:
        """Bring connectors to their target states (slow: call it once the REST API is up)."""
        self.herder.start()

    def prepare_next_start(self) -> None:
        """Once the worker is up: have the driver JVM's class archive built if there is none, so
        that the next start of Spark maps the classes instead of loading them
        (`sluice.engine.class_archive`)."""
        build_class_archive_in_background(self.config.spark)

    def close(self) -> None:
        """Stop every connector gracefully, leave the cluster, stop Spark (a JVM that is gone
        already is logged, not raised: the worker exits all the same)."""
        try:  # a micro-batch cut short by the stop is not an error (sluice.engine.shutdown)
            quiet_batch_interrupts(self.spark)
        except Exception as exc:  # the JVM is gone already: nothing to quiet, the stop goes on
            log.warning(
                "Spark's batch-interrupt loggers not quieted: %s: %s", type(exc).__name__, exc
            )
        try:
            self.herder.close()
        finally:
            try:
                self.spark.stop()
            except Exception as exc:
                log.warning("Spark not stopped cleanly: %s: %s", type(exc).__name__, exc)


def assemble(config: WorkerConfig) -> Runtime:
    """Build the runtime of one worker; raises `ConfigException` naming the key on bad input.

    The cluster store (distributed mode) is opened and checked before Spark starts, so a wrong
    `cluster.store.url`, a foreign cluster or a duplicate `workerId` fails fast.
    """
    # private to the worker's user; an emptied or truncated store file fails, naming the file
    prepare_store_root(config.store_root)
    plugins = PluginRegistry(config.plugin_paths)
    if config.cluster.store_url:
        from sluice.runtime.herder.distributed import DistributedHerder
        from sluice.store.cluster import ClusterStore

        cluster = ClusterStore.open(config)
        # fails fast, joins not
        cluster.check_id(config.worker_id, config.cluster.session_timeout_ms)
        # positions, commit journal, schemas and counters beside the configs: nothing a
        # takeover needs from the worker that ran a connector before is on its host
        stores = WorkerStores.postgres(config.cluster.store_url)
        spark = _checked_session(config)
        host = "127.0.0.1" if config.rest.host in ("0.0.0.0", "::", "") else config.rest.host
        try:
            # only now: the others allocate to a member, which must be able to start them
            cluster.join(
                config.worker_id,
                f"http://{host}:{config.rest.port}",
                config.cluster.session_timeout_ms,
            )
        except BaseException:
            spark.stop()
            raise
        parts = build_parts(config, stores)
        runner = build_runner(spark, config, plugins, parts)
        progress = build_progress(spark, runner, parts)
        herder: BaseHerder = DistributedHerder(
            spark,
            config,
            plugins,
            cluster,
            runner=runner,
            progress=progress,
            metrics=build_metrics(config, plugins, runner, progress, cluster.configs, parts),
            parts=parts,
        )
    else:
        spark = _checked_session(config)
        parts = build_parts(config, WorkerStores.sqlite(config.store_root))
        runner = build_runner(spark, config, plugins, parts)
        progress = build_progress(spark, runner, parts)
        configs = SqliteConfigStore(os.path.join(config.store_root, "configs.sqlite"))
        herder = StandaloneHerder(
            spark,
            config,
            plugins,
            runner=runner,
            configs=configs,
            statuses=SqliteStatusStore(os.path.join(config.store_root, "statuses.sqlite")),
            progress=progress,
            metrics=build_metrics(config, plugins, runner, progress, configs, parts),
            parts=parts,
        )
    return Runtime(config, spark, plugins, herder)


def _checked_session(config: WorkerConfig) -> SparkSession:
    """The worker's SparkSession; on a Spark cluster, only once the executors proved they share
    `storePathRootDir` (docs/spark-cluster.md) — otherwise Spark is stopped and the
    `ConfigException` names the key."""
    spark = build_session(config.spark, app_name=f"sluice-{config.worker_id}", log_level="ERROR")
    try:
        check_shared_store_root(spark, config)
    except BaseException:
        spark.stop()
        raise
    return spark
