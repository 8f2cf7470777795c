"""`make demo`: a standalone worker on the embedded defaults, driven through its REST API.

Starts `sluice worker` (REST API on port 8082, or `SLUICE_DEMO_PORT`) with its store under
`.demo/`, creates the sample file source and file sink with the same requests as RocketMQ
Connect's README as soon as the REST API answers, writes five lines a second to
`.demo/input.txt`, and shows the lines arriving in `.demo/output.txt` and the connectors' status
until you press Ctrl-C. No broker, no database.

It says what it waits for at each stage (Spark and the REST API starting, the connectors being
created, the first micro-batch), so a sink that is still empty is never a mystery. Nothing waits
for a fixed time: every wait polls its condition every 0.1 s.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

DEMO_DIR = os.path.abspath(".demo")
PORT_VARIABLE = "SLUICE_DEMO_PORT"
POLL_S = 0.1
STATUS_EVERY_S = 5.0
SHOWN_PER_POLL = 8  # sink lines printed per poll; more are counted, not printed
TOPIC = "fileTopic"


class DemoError(Exception):
    """Why the demo cannot go on: printed as one message, without a stack trace."""


def _feed(path: str, stop: threading.Event) -> None:
    n = _count_lines(path)
    while not stop.is_set():
        with open(path, "a", encoding="utf-8") as f:
            for _ in range(5):
                n += 1
                f.write(f"{time.strftime('%H:%M:%S')} line {n} — héllo from sluice\n")
        stop.wait(1.0)


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def demo_port(environ: Mapping[str, str]) -> int:
    """The port of `SLUICE_DEMO_PORT` (default 8082); DemoError naming the variable when it is
    not a port number or the port is taken (by an earlier demo, a worker, anything)."""
    raw = environ.get(PORT_VARIABLE, "8082").strip()
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise DemoError(f"{PORT_VARIABLE}={raw!r} is not a port number (1-65535)")
    port = int(raw)
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise DemoError(
                f"port {port} is in use ({exc.strerror}): another demo or worker may be "
                f"running there. Stop it, or pick a free port with {PORT_VARIABLE}, e.g. "
                f"{PORT_VARIABLE}={port + 10} make demo"
            ) from None
    return port


def _write_conf(port: int) -> str:
    path = os.path.join(DEMO_DIR, "connect-standalone.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"workerId=demo-worker\nhttpHost=127.0.0.1\nhttpPort={port}\n"
            f"storePathRootDir={os.path.join(DEMO_DIR, 'store')}\n"
            "offsetCommitIntervalMsConfig=500\nbus=embedded\n"
        )
    return path


def _start_worker(conf: str, log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "worker", "-c", conf],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the demo only; it stops the worker cleanly
        )


def _log_tail(log_path: str, start: int) -> str:
    with open(log_path, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        return f.read()[-2000:]


class Clock:
    """Seconds since the demo started, for the stage messages."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __str__(self) -> str:
        return f"{time.monotonic() - self.started:.1f} s"


def say(message: str) -> None:
    print(message, flush=True)


def _connector_configs(source_file: str, sink_file: str) -> dict[str, dict[str, str]]:
    return {
        "fileSourceConnector": {
            "connector.class": "org.apache.rocketmq.connect.file.FileSourceConnector",
            "filename": source_file,
            "connect.topicname": TOPIC,
        },
        "fileSinkConnector": {
            "connector.class": "org.apache.rocketmq.connect.file.FileSinkConnector",
            "filename": sink_file,
            "connect.topicnames": TOPIC,
        },
    }


def _wait_for_rest(
    http: httpx.Client, worker: subprocess.Popen[bytes], log_path: str, log_start: int
) -> None:
    """Until the REST API answers; DemoError with the log's tail if the worker exits first."""
    while True:
        if worker.poll() is not None:
            raise DemoError(
                f"the worker exited during start-up (code {worker.returncode}; log "
                f"{log_path}):\n{_log_tail(log_path, log_start)}"
            )
        try:
            if http.get("/connectors/list", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:  # not listening yet
            pass
        time.sleep(POLL_S)


def _states(http: httpx.Client) -> dict[str, dict[str, Any]]:
    """Each connector's status (`{"connector": {"state", "trace"}, "tasks": […]}`) by name."""
    listed = http.get("/connectors/list").json()["body"]
    return {name: entry["status"] for name, entry in sorted(listed.items())}


def _shown(states: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{name}={status['connector']['state']}" for name, status in states.items())


def _failures(states: dict[str, dict[str, Any]]) -> list[str]:
    """One line per failed connector or task: its name and the first line of its trace."""
    out = []
    for name, status in states.items():
        for what, entry in [(name, status["connector"])] + [
            (f"{name} task {t.get('id', i)}", t) for i, t in enumerate(status.get("tasks", []))
        ]:
            if entry.get("state") == "FAILED":
                trace = (entry.get("trace") or "").strip().splitlines()
                out.append(f"{what} FAILED: {trace[0] if trace else 'no trace'}")
    return out


class SinkTail:
    """The lines appended to the sink file since the last look."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0
        self.seen = 0

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = complete.decode("utf-8", errors="replace").splitlines()
        self.seen += len(lines)
        return lines


def _stream(http: httpx.Client, clock: Clock, source_file: str, sink_file: str) -> None:
    """Show the sink's new lines and, every few seconds, the counts and states; until Ctrl-C."""
    tail = SinkTail(sink_file)
    say(
        "  first micro-batch… (Spark plans each connector's query, then the lines go "
        f"{os.path.basename(source_file)} → topic {TOPIC} → {os.path.basename(sink_file)})"
    )
    reported: set[str] = set()
    next_status = time.monotonic() + STATUS_EVERY_S
    while True:
        lines = tail.new_lines()
        if lines and tail.seen == len(lines):
            say(f"  first lines in {sink_file} after {clock}:")
        for line in lines[:SHOWN_PER_POLL]:
            say(f"  | {line}")
        if len(lines) > SHOWN_PER_POLL:
            say(f"  | … and {len(lines) - SHOWN_PER_POLL} more")
        if time.monotonic() >= next_status:
            next_status += STATUS_EVERY_S
            try:
                states = _states(http)
            except httpx.HTTPError as exc:  # busy or restarting: say so, look again later
                say(f"  (the REST API did not answer: {exc!r})")
                continue
            for failure in _failures(states):
                if failure not in reported:  # once each, with where to read more
                    reported.add(failure)
                    say(f"  {failure} (more in GET /connectors/<name>/status)")
            waiting = "  still waiting for the first micro-batch" if not tail.seen else ""
            say(
                f"source lines={_count_lines(source_file):>6}  sink lines="
                f"{_count_lines(sink_file):>6}  [{_shown(states)}]{waiting}"
            )
        time.sleep(POLL_S)


def _create(http: httpx.Client, url: str, configs: dict[str, dict[str, str]]) -> None:
    for name, config in configs.items():
        body = json.dumps(config)
        say(f"curl -X POST {url}/connectors/{name} -d '{body}'")
        response = http.post(f"/connectors/{name}", content=body)
        if response.status_code != 200:
            raise DemoError(f"creating {name} failed: {response.text}")


def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM: the worker stops its queries gracefully. If that takes over 2 minutes, or a
    second Ctrl-C asks not to wait, its whole process group (JVM, Python workers) is killed."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(120)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        say("Killing the worker (its positions are safe: the next run resumes from them)…")
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def run(clock: Clock, port: int) -> None:
    """Start the worker, create the connectors, stream until Ctrl-C, stop the worker."""
    url = f"http://127.0.0.1:{port}"
    source_file = os.path.join(DEMO_DIR, "input.txt")
    sink_file = os.path.join(DEMO_DIR, "output.txt")
    open(source_file, "a").close()
    log_path = os.path.join(DEMO_DIR, "worker.log")
    log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    say(f"Starting a standalone worker on {url} (log: {log_path})…")
    say("  starting Spark… (then the REST API; a first start takes longest)")
    worker = _start_worker(_write_conf(port), log_path)
    stop = threading.Event()
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            _wait_for_rest(http, worker, log_path, log_start)
            say(f"  REST API up on {url} after {clock}")
            threading.Thread(target=_feed, args=(source_file, stop), daemon=True).start()
            _create(http, url, _connector_configs(source_file, sink_file))
            say(f"  connectors created after {clock}: {_shown(_states(http))}")
            say(
                f"Streaming {source_file} → topic {TOPIC} → {sink_file}, 5 lines a second.\n"
                f"Try: curl {url}/connectors/list   or   sluice --url {url} connectors list\n"
                "Ctrl-C stops."
            )
            _stream(http, clock, source_file, sink_file)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        say("Stopping the worker…")
        _stop_worker(worker)
        say(f"Stopped. {_count_lines(sink_file)} lines in {sink_file}; run again to resume.")


def main() -> None:
    clock = Clock()
    # Ctrl-C and `kill` both stop the demo the same way. "Ctrl-C stops" holds even when started
    # from a shell that ignores SIGINT (`cmd &` in a script), where Python would keep ignoring it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.makedirs(DEMO_DIR, exist_ok=True)
    try:
        run(clock, demo_port(os.environ))
    except DemoError as exc:
        raise SystemExit(f"demo: {exc}") from None
    except KeyboardInterrupt:  # before the worker was started
        pass


if __name__ == "__main__":
    main()
