"""`sluice worker -c conf/connect-standalone.conf`: wires a standalone worker together and runs it.

One process: the REST API (uvicorn), the standalone herder and one SparkSession. SIGTERM or
SIGINT stops the HTTP server, then every query gracefully (positions synced), then Spark.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import uvicorn

from sluice.engine.session import build_session
from sluice.rest import create_app
from sluice.rest._auth import RestSecurity
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.shared_path import check_shared_store_root
from sluice.runtime.standalone import StandaloneHerder
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException

log = logging.getLogger("sluice.worker")

BOOT_MESSAGE = "The standalone worker boot success."


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # py4j logs every JVM call at INFO
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _expose_plugin_paths(paths: tuple[str, ...]) -> None:
    """Spark's Python workers import plugin classes by module name: put the folders on their
    PYTHONPATH (they inherit this process's environment)."""
    if not paths:
        return
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *(p for p in current if p not in paths)])


def run_worker(config_path: str) -> int:
    """Run a standalone worker until SIGTERM/SIGINT; the process exit code."""
    _configure_logging()
    try:
        config = WorkerConfig.load(config_path)
        security = RestSecurity.from_properties(config.raw)
    except ConfigException as exc:
        print(f"error: worker config {config_path}: {exc}", file=sys.stderr)
        return 2
    os.makedirs(config.store_root, exist_ok=True)
    _expose_plugin_paths(config.plugin_paths)
    log.info("starting worker %s (store %s)", config.worker_id, config.store_root)
    spark = build_session(config.spark, app_name=f"sluice-{config.worker_id}", log_level="ERROR")
    try:  # on a Spark cluster: executors must share storePathRootDir (docs/spark-cluster.md)
        check_shared_store_root(spark, config)
    except ConfigException as exc:
        print(f"error: worker config {config_path}: {exc}", file=sys.stderr)
        spark.stop()
        return 2
    plugins = PluginRegistry(config.plugin_paths)
    herder = StandaloneHerder(spark, config, plugins)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(herder, security),
            host=config.http_host,
            port=config.http_port,
            log_level="warning",
            lifespan="off",
            **security.uvicorn_options(),
        )
    )

    def _shutdown(signum: int, _frame: object) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        server.should_exit = True

    # uvicorn handles these signals while it serves, then restores the handlers it found and
    # raises the signal again: with ours in place that ends in the clean shutdown below.
    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    try:
        herder.start()
        threading.Thread(
            target=_announce, args=(server, config, security.scheme), daemon=True
        ).start()
        server.run()
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind the port
        log.error("REST API could not start on %s:%s", config.http_host, config.http_port)
        return int(exc.code or 1)
    finally:
        log.info("stopping connectors")
        herder.close()
        spark.stop()
        log.info("worker stopped")
    return 0


def _announce(server: uvicorn.Server, config: WorkerConfig, scheme: str = "http") -> None:
    while not server.started and not server.should_exit:
        threading.Event().wait(0.05)
    if server.started:
        log.info(
            "REST API on %s://%s:%s (docs at /docs)", scheme, config.http_host, config.http_port
        )
        log.info(BOOT_MESSAGE)
