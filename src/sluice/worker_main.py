"""`sluice worker -c conf/connect-*.conf`: the entry point that runs a worker process.

One process: the REST API (uvicorn), the herder and one SparkSession, built by
`sluice.runtime.assembly.assemble`. The REST API comes up first, within a second or two: while
Spark and the stores are being built it answers `GET /` and 503 `worker.starting` (with
`Retry-After`) to the rest; then the herder starts the connectors in the background (their
statuses go UNASSIGNED -> RUNNING as they come up); the boot message is logged when both are
done. A port that cannot be listened on is refused before anything starts, naming `httpPort`.
SIGTERM or SIGINT stops the HTTP server, then every query gracefully (positions synced), then
Spark (a worker stopped while Spark starts waits for it, then stops it).

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
import socket
import sys
import threading
from collections.abc import Callable
from typing import cast

import uvicorn

from sluice.rest import create_app
from sluice.rest._auth import RestSecurity
from sluice.runtime.assembly import Runtime, assemble
from sluice.runtime.herder import Herder
from sluice.runtime.herder.booting import BootingHerder
from sluice.runtime.jvm_watch import JvmWatch
from sluice.runtime.properties_file import read_properties
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


def _port_taken(host: str, port: int) -> str | None:
    """Why the REST API cannot listen on host:port (None if it can): checked before anything
    else starts, so a second worker on the same port fails at once, naming `httpPort`."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as uvicorn binds: a port in TIME_WAIT after a restart is free, one listened on is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


class _Boot:
    """The worker's boot, once the REST API listens: assemble the runtime (Spark, stores,
    herder), hand the herder to the API, watch the JVM, then start the connectors. The REST API
    answers meanwhile (503 `worker.starting` until the herder is there)."""

    def __init__(
        self,
        config: WorkerConfig,
        server: uvicorn.Server,
        herder: BootingHerder,
        scheme: str,
        on_jvm_gone: Callable[[str], None],
    ) -> None:
        self.config = config
        self.server = server
        self.herder = herder
        self.scheme = scheme
        self.on_jvm_gone = on_jvm_gone
        self.runtime: Runtime | None = None
        self.watch: JvmWatch | None = None
        self.config_error: ConfigException | None = None
        self.failed = False
        #: set once assembly is over, whether it built a runtime or not
        self.assembled = threading.Event()

    def run(self) -> None:
        config = self.config
        while not self.server.started and not self.server.should_exit:
            threading.Event().wait(0.02)
        if not self.server.started:
            self.assembled.set()  # the port could not be bound: nothing was started
            return
        log.info("REST API on %s://%s:%s (docs at /docs)", self.scheme, config.rest.host,
                 config.rest.port)  # fmt: skip
        try:
            runtime = assemble(config)
        except ConfigException as exc:
            self.config_error = exc
            self.server.should_exit = True
            self.assembled.set()
            return
        except Exception:
            log.exception("the worker could not be built")
            self.failed = True
            self.server.should_exit = True
            self.assembled.set()
            return
        self.runtime = runtime
        self.watch = JvmWatch(runtime.spark, self.on_jvm_gone).start()
        self.herder.ready(runtime.control)
        self.assembled.set()
        if self.server.should_exit:
            return  # stopped while Spark started: the shutdown closes the runtime
        try:
            runtime.start()
        except Exception:  # the API stays up: statuses say what did not start
            log.exception("starting the connectors failed")
            return
        log.info(DISTRIBUTED_BOOT_MESSAGE if config.cluster.store_url else BOOT_MESSAGE)
        runtime.prepare_next_start()


def run_worker(config_path: str) -> int:
    """Run a worker until SIGTERM/SIGINT; the process exit code."""
    _configure_logging()
    try:
        props = read_properties(config_path)
        config = WorkerConfig.from_properties(props)
        security = RestSecurity.from_properties(props)
    except ConfigException as exc:
        print(f"error: worker config {config_path}: {exc}", file=sys.stderr)
        return 2
    taken = _port_taken(config.rest.host, config.rest.port)
    if taken is not None:
        print(
            f"error: worker config {config_path}: httpPort: {config.rest.host}:"
            f"{config.rest.port} cannot be listened on ({taken}); is another worker running "
            "there? Pick a free port with httpPort",
            file=sys.stderr,
        )
        return 2
    _expose_plugin_paths(config.plugin_paths)
    log.info("starting worker %s (store %s)", config.worker_id, config.store_root)
    herder = BootingHerder(config.worker_id)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(cast(Herder, herder), security),
            host=config.rest.host,
            port=config.rest.port,
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
    boot = _Boot(config, server, herder, security.scheme, _jvm_gone)
    threading.Thread(target=boot.run, daemon=True, name="sluice-boot").start()
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind the port
        log.error("REST API could not start on %s:%s", config.rest.host, config.rest.port)
        exit_code = int(exc.code or 1)
    finally:
        # a runtime still being built is waited for, then closed like a running one
        boot.assembled.wait()
        if boot.watch is not None:
            boot.watch.stop()  # Spark is stopped on purpose below
        if boot.runtime is not None:
            log.info("stopping connectors")
            boot.runtime.close()
        log.info("worker stopped")
    if boot.config_error is not None:
        print(f"error: worker config {config_path}: {boot.config_error}", file=sys.stderr)
        return 2
    if boot.failed:
        return 1
    return exit_code
