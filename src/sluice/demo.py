"""`make demo`: a file source → topic → file sink pipeline on the embedded defaults.

Writes a few lines a second to `.demo/input.txt`, streams them through the topic `demo-lines` into
`.demo/output.txt`, and prints what has arrived until you press Ctrl-C. No broker, no database.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
import time

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

DEMO_DIR = os.path.abspath(".demo")


def _feed(path: str, stop: threading.Event) -> None:
    n = 0
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


def main() -> None:
    os.makedirs(DEMO_DIR, exist_ok=True)
    source_file = os.path.join(DEMO_DIR, "input.txt")
    sink_file = os.path.join(DEMO_DIR, "output.txt")
    open(source_file, "a").close()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("Starting Spark (local mode)…", flush=True)
    spark = build_session(log_level="ERROR")
    runner = ConnectorRunner(spark, os.path.join(DEMO_DIR, "store"))
    runner.start(
        "fileSourceConnector",
        {
            "connector.class": "FileSourceConnector",
            "filename": source_file,
            "connect.topicname": "demo-lines",
        },
    )
    runner.start(
        "fileSinkConnector",
        {
            "connector.class": "FileSinkConnector",
            "filename": sink_file,
            "connect.topicnames": "demo-lines",
        },
    )
    feeder = threading.Thread(target=_feed, args=(source_file, stop), daemon=True)
    feeder.start()
    print(f"Streaming {source_file} → topic demo-lines → {sink_file}. Ctrl-C stops.", flush=True)
    try:
        while not stop.wait(2.0):
            for running in runner.running.values():
                failed = running.failure()
                if failed is not None:
                    raise SystemExit(f"{running.name} failed: {failed[0]}")
            status = ", ".join(
                f"{r.name}={'RUNNING' if r.query.isActive else 'STOPPED'}"
                for r in runner.running.values()
            )
            lines_in, lines_out = _count_lines(source_file), _count_lines(sink_file)
            print(f"source lines={lines_in:>6}  sink lines={lines_out:>6}  [{status}]", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        print("Stopping…", flush=True)
        # Stopping a query cancels its running micro-batch; Spark reports each cancellation at
        # ERROR level. Nothing is lost (the next run resumes from the checkpoints), so keep the
        # terminal readable.
        spark.sparkContext.setLogLevel("OFF")
        with contextlib.redirect_stderr(io.StringIO()):
            runner.close()
            spark.stop()
        print(f"Stopped. {_count_lines(sink_file)} lines in {sink_file}; run again to resume.")


if __name__ == "__main__":
    main()
