"""Benchmark: what metrics cost.

1. The file pipeline of bench/file_pipeline.py (file source → topic → file sink, both at once),
   with metrics off (a bare ConnectorRunner) and on (the worker's ProgressTracker listening to
   every query, and a `/metrics` scrape every second), alternating off/on `--rounds` times on one
   SparkSession. The per-commit record counting (one SQLite upsert per micro-batch, like the error
   counters) is part of the runner and runs in both.
2. One `GET /metrics` with `--connectors` running connectors (half file sources, half file sinks),
   through the FastAPI app (routing, herder snapshot, lag per queue, text rendering): median and
   max of 20 scrapes.

   Baseline in the same run: a prometheus-client registry with as many series, rendered alone.

Usage: python bench/metrics.py [--lines 2000000] [--rounds 2] [--connectors 50] [--scrape-only]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sluice.engine.session import build_session
from sluice.rest import create_app
from sluice.rest.metrics import render
from sluice.runtime.assembly import assemble
from sluice.runtime.metrics.figures import report_of
from sluice.runtime.metrics.progress import ProgressTracker
from sluice.runtime.runner import ConnectorRunner
from sluice.runtime.worker_config import WorkerConfig

sys.path.insert(0, os.path.dirname(__file__))
from file_pipeline import make_file, wait


def pipeline(spark, src: str, out: str, lines: int, metrics: bool) -> float:
    root = os.path.join(out, "store")
    shutil.rmtree(root, ignore_errors=True)
    dst = os.path.join(out, "out.txt")
    if os.path.exists(dst):
        os.remove(dst)
    shutil.rmtree(os.path.join(out, ".out.txt.sluice"), ignore_errors=True)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    stop = threading.Event()
    tracker = None
    if metrics:
        tracker = ProgressTracker(runner.counters, runner.counts_itself.__contains__)
        tracker.attach(spark)

        def scrape() -> None:  # what /metrics reads per connector, once a second
            while not stop.wait(1.0):
                snapshot = {"worker": {"worker_id": "bench"}, "connectors": []}
                for name in list(runner.running):
                    p = tracker.progress(name)
                    snapshot["connectors"].append(
                        {
                            "name": name,
                            "type": runner.running[name].kind,
                            "state": "RUNNING",
                            "tasks": {"RUNNING": 2},
                            "counters": runner.counters.get(name),
                            "progress": None
                            if p is None
                            else {
                                "num_input_rows": p.num_input_rows,
                                "input_rows_per_second": p.input_rows_per_second,
                                "processed_rows_per_second": p.processed_rows_per_second,
                                "batch_duration_ms": p.batch_duration_ms,
                                "avg_batch_ms": p.avg_batch_ms,
                                "max_batch_ms": p.max_batch_ms,
                            },
                            "lag": [],
                        }
                    )
                    runner.committed_positions(name)
                render(report_of(snapshot))

        threading.Thread(target=scrape, daemon=True).start()
    size = os.path.getsize(src)
    common = {"max.tasks": "2"}
    t = time.perf_counter()
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": src,
            "connect.topicname": "bench",
            **common,
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "FileSinkConnector",
            "filename": dst,
            "connect.topicnames": "bench",
            **common,
        },
    )
    wait(lambda: os.path.exists(dst) and os.path.getsize(dst) >= size)
    elapsed = time.perf_counter() - t
    stop.set()
    runner.close()
    if tracker is not None:
        spark.streams.removeListener(tracker)
        assert runner.counters.get("dst").get("records-total") == lines, "sink total wrong"
    return elapsed


def scrapes(out: str, connectors: int, count: int, settle_s: float) -> tuple[list[float], int]:
    """`count` timed `GET /metrics` of a worker running `connectors` connectors (built by the
    composition root, like a real worker; its Spark session is the one already running)."""
    root = os.path.join(out, "store-many")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for i in range(connectors):  # an earlier run's copies: a sink appends to them
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, f"many-{i}.txt"))
    src = os.path.join(out, "small.txt")
    with open(src, "w") as f:
        f.writelines(f"line {i}\n" for i in range(1000))
    config = WorkerConfig.from_properties(
        {"storePathRootDir": root, "offsetCommitIntervalMsConfig": "2000"}
    )
    herder = assemble(config).herder
    herder.start()
    half = connectors // 2
    for i in range(half):
        herder.put_connector(
            f"src{i}",
            {
                "connector.class": "FileSourceConnector",
                "filename": src,
                "connect.topicname": f"t{i}",
            },
        )
        herder.put_connector(
            f"dst{i}",
            {
                "connector.class": "FileSinkConnector",
                "filename": os.path.join(out, f"many-{i}.txt"),
                "connect.topicnames": f"t{i}",
            },
        )
    client = TestClient(create_app(herder))
    # every sink has copied its 1,000 lines: the scrapes below see a settled worker (on a busy
    # machine a query may fail to start: the scrapes then go on, and the count says so)
    deadline = time.monotonic() + settle_s

    def done() -> int:
        return sum(_lines(os.path.join(out, f"many-{i}.txt")) == 1000 for i in range(half))

    while done() < half and time.monotonic() < deadline:
        time.sleep(0.5)
    text = client.get("/metrics").text  # warm up
    running = sum(
        1
        for line in text.splitlines()
        if line.startswith("sluice_connector_state{") and line.endswith('state="RUNNING"} 1.0')
    )
    print(f"{done()} of {half} sinks copied their file; {running} connectors RUNNING")
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    times = []
    for _ in range(count):
        t = time.perf_counter()
        response = client.get("/metrics")
        times.append((time.perf_counter() - t) * 1000)
        assert response.status_code == 200
    herder.close()
    return times, series


def _lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def baseline_render(series: int, count: int) -> list[float]:
    """The floor: a prometheus-client registry holding `series` gauge samples (in families of
    50 labelled children, like a scrape's per-connector families) rendered alone."""
    registry = CollectorRegistry()
    families = (series + 49) // 50
    left = series
    for f in range(families):
        gauge = Gauge(f"bench_family_{f}", "a family", ["connector"], registry=registry)
        for c in range(min(50, left)):
            gauge.labels(f"connector{c}").set(c)
        left -= 50
    times = []
    for _ in range(count):
        t = time.perf_counter()
        generate_latest(registry)
        times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connectors", type=int, default=50)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--settle-s", type=float, default=600, help="wait for the sinks' copies")
    parser.add_argument("--scrape-only", action="store_true", help="skip the pipeline runs")
    parser.add_argument(
        "--out", default=os.path.join(tempfile.gettempdir(), "sluice-bench-metrics")
    )
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, "input.txt")
    make_file(src, args.lines)
    spark = build_session(log_level="ERROR")
    off, on = [], []
    if not args.scrape_only:  # warm-up (JIT, Python workers)
        pipeline(spark, src, out, args.lines, metrics=False)
    for _ in range(0 if args.scrape_only else args.rounds):
        off.append(pipeline(spark, src, out, args.lines, metrics=False))
        on.append(pipeline(spark, src, out, args.lines, metrics=True))
    if args.scrape_only:
        off = on = [float("nan")]
    times, series = scrapes(out, args.connectors, args.scrapes, args.settle_s)
    floor = baseline_render(series, args.scrapes)
    load = os.getloadavg()[0]
    print(
        f"\n{args.lines:,} lines; {platform.machine()}, {os.cpu_count()} cores, load {load:.1f}, "
        f"Python {sys.version.split()[0]}, Spark {spark.version}"
    )
    print(f"metrics off (s): {', '.join(f'{t:.2f}' for t in off)}  best {min(off):.2f}")
    print(f"metrics on  (s): {', '.join(f'{t:.2f}' for t in on)}  best {min(on):.2f}")
    print(f"on/off (best of each): {min(on) / min(off):.3f}")
    print(
        f"GET /metrics with {args.connectors} running connectors ({series} series): median "
        f"{statistics.median(times):.1f} ms, max {max(times):.1f} ms"
    )
    print(
        f"baseline, a registry of {series} series rendered alone: median "
        f"{statistics.median(floor):.1f} ms, max {max(floor):.1f} ms"
    )
    spark.stop()


if __name__ == "__main__":
    main()
