"""`sluice worker -c conf/connect-*.conf`: the entry point that runs a worker process.

One process: the REST API (uvicorn), the herder and one SparkSession, all built by
`sluice.runtime.assembly.assemble`. The REST API comes up first and answers while the herder
starts the connectors in the background (their statuses go UNASSIGNED -> RUNNING as they come
up); the boot message is logged when both are done. SIGTERM or SIGINT stops the HTTP server,
then every query gracefully (positions synced), then Spark.

If the Spark JVM dies under the worker (`sluice.runtime.jvm_watch`), the worker logs why and
exits with `JVM_GONE_EXIT` (70) within seconds, so that its supervisor starts it again: no
query can run without the JVM, and a worker answering REST over dead queries misleads everyone.

This module lives outside `sluice.runtime` because it wires `rest` to `runtime` (DESIGN §7:
`rest` depends on `runtime`, not the reverse).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import uvicorn

from sluice.rest import create_app
from sluice.rest._auth import RestSecurity
from sluice.runtime.assembly import Runtime, assemble
from sluice.runtime.jvm_watch import JvmWatch
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException

log = logging.getLogger("sluice.worker")

BOOT_MESSAGE = "The standalone worker boot success."
DISTRIBUTED_BOOT_MESSAGE = "The distributed worker boot success."
#: The exit code of a worker whose Spark JVM died (EX_SOFTWARE): its supervisor restarts it.
JVM_GONE_EXIT = 70
#: How long the shutdown after the JVM's death may take before the process exits regardless.
JVM_GONE_GRACE_S = 60.0


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
    """Run a worker until SIGTERM/SIGINT; the process exit code."""
    _configure_logging()
    try:
        config = WorkerConfig.load(config_path)
        security = RestSecurity.from_properties(config.raw)
        _expose_plugin_paths(config.plugin_paths)
        log.info("starting worker %s (store %s)", config.worker_id, config.store_root)
        runtime = assemble(config)
    except ConfigException as exc:
        print(f"error: worker config {config_path}: {exc}", file=sys.stderr)
        return 2
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(runtime.control, security),
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

    exit_code = 0

    def _jvm_gone(reason: str) -> None:
        nonlocal exit_code
        log.error(
            "%s: no connector can run without it; exiting with code %d so that the worker's "
            "supervisor starts it again (connectors resume from their checkpoints)",
            *(reason, JVM_GONE_EXIT),
        )
        exit_code = JVM_GONE_EXIT
        server.should_exit = True
        # the shutdown below calls into the dead JVM (and its stores) and should be quick; if
        # anything hangs there, the exit must happen all the same
        deadline = threading.Timer(JVM_GONE_GRACE_S, os._exit, args=(JVM_GONE_EXIT,))
        deadline.daemon = True
        deadline.start()

    # uvicorn handles these signals while it serves, then restores the handlers it found and
    # raises the signal again: with ours in place that ends in the clean shutdown below.
    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    watch = JvmWatch(runtime.spark, _jvm_gone).start()
    threading.Thread(
        target=_boot, args=(server, runtime, security.scheme), daemon=True, name="sluice-boot"
    ).start()
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind the port
        log.error("REST API could not start on %s:%s", config.http_host, config.http_port)
        return int(exc.code or 1)
    finally:
        watch.stop()  # Spark is stopped on purpose below
        log.info("stopping connectors")
        runtime.close()
        log.info("worker stopped")
    return exit_code


def _boot(server: uvicorn.Server, runtime: Runtime, scheme: str = "http") -> None:
    """Once the REST API listens, start the connectors (the API keeps answering meanwhile)."""
    config = runtime.config
    while not server.started and not server.should_exit:
        threading.Event().wait(0.05)
    if not server.started:
        return
    log.info("REST API on %s://%s:%s (docs at /docs)", scheme, config.http_host, config.http_port)
    try:
        runtime.start()
    except Exception:  # the API stays up: statuses say what did not start
        log.exception("starting the connectors failed")
        return
    log.info(DISTRIBUTED_BOOT_MESSAGE if config.cluster_store_url else BOOT_MESSAGE)
