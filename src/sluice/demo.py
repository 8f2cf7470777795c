"""`make demo`: a standalone worker on the embedded defaults, driven through its REST API.

Starts `sluice worker` (REST API on port 8082, or `SLUICE_DEMO_PORT`) with its store under
`.demo/`, creates the sample file source and file sink with the same requests as RocketMQ
Connect's README, writes a few lines a second to `.demo/input.txt`, and shows `.demo/output.txt`
filling up and the connectors' status until you press Ctrl-C. No broker, no database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx

DEMO_DIR = os.path.abspath(".demo")
BOOT = "The standalone worker boot success."


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


def _write_conf(port: int) -> str:
    path = os.path.join(DEMO_DIR, "connect-standalone.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"workerId=demo-worker\nhttpHost=127.0.0.1\nhttpPort={port}\n"
            f"storePathRootDir={os.path.join(DEMO_DIR, 'store')}\n"
            "offsetCommitIntervalMsConfig=500\nbus=embedded\n"
        )
    return path


def _start_worker(conf: str, log_path: str) -> subprocess.Popen:
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it
    start = os.path.getsize(log_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "worker", "-c", conf],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the demo only; it stops the worker cleanly
    )
    while worker.poll() is None:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            if BOOT in f.read():
                return worker
        time.sleep(0.2)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-2000:]
    raise SystemExit(f"the worker exited during start-up (log {log_path}):\n{tail}")


def main() -> None:
    os.makedirs(DEMO_DIR, exist_ok=True)
    port = int(os.environ.get("SLUICE_DEMO_PORT", "8082"))
    url = f"http://127.0.0.1:{port}"
    source_file = os.path.join(DEMO_DIR, "input.txt")
    sink_file = os.path.join(DEMO_DIR, "output.txt")
    open(source_file, "a").close()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # "Ctrl-C stops" holds even when started from a shell that ignores SIGINT (`cmd &` in a
    # script), where Python would otherwise keep ignoring it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    log_path = os.path.join(DEMO_DIR, "worker.log")
    print(f"Starting a standalone worker on {url} (log: {log_path})…", flush=True)
    worker = _start_worker(_write_conf(port), log_path)
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            for name, config in (
                (
                    "fileSourceConnector",
                    {
                        "connector.class": "org.apache.rocketmq.connect.file.FileSourceConnector",
                        "filename": source_file,
                        "connect.topicname": "fileTopic",
                    },
                ),
                (
                    "fileSinkConnector",
                    {
                        "connector.class": "org.apache.rocketmq.connect.file.FileSinkConnector",
                        "filename": sink_file,
                        "connect.topicnames": "fileTopic",
                    },
                ),
            ):
                body = json.dumps(config)
                print(f"curl -X POST {url}/connectors/{name} -d '{body}'", flush=True)
                response = http.post(f"/connectors/{name}", content=body)
                if response.status_code != 200:
                    raise SystemExit(f"creating {name} failed: {response.text}")
            feeder = threading.Thread(target=_feed, args=(source_file, stop), daemon=True)
            feeder.start()
            print(
                f"Streaming {source_file} → topic fileTopic → {sink_file}.\n"
                f"Try: curl {url}/connectors/list   or   sluice --url {url} connectors list\n"
                "Ctrl-C stops.",
                flush=True,
            )
            while not stop.wait(2.0):
                listed = http.get("/connectors/list").json()["body"]
                states = ", ".join(
                    f"{name}={entry['status']['connector']['state']}"
                    for name, entry in sorted(listed.items())
                )
                lines_in, lines_out = _count_lines(source_file), _count_lines(sink_file)
                print(f"source lines={lines_in:>6}  sink lines={lines_out:>6}  [{states}]")
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        print("Stopping the worker…", flush=True)
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        print(f"Stopped. {_count_lines(sink_file)} lines in {sink_file}; run again to resume.")


if __name__ == "__main__":
    main()
