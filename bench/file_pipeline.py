"""Benchmark: a 10M-line file through file source → topic → file sink, against plain PySpark.

Runs in one process on one SparkSession:
  baseline   plain Structured Streaming `readStream.text → writeStream.text` on the same file;
  hop 1      file source → topic (embedded log);
  hop 2      topic → file sink (the topic already full);
  end to end both connectors at once on a fresh store, source file → sink file.
Prints a table (lines/s, MB/s, ratio to the baseline) and checks the sink file is byte-identical.

With `--master` given more than once (e.g. `--master local[2] --master spark://127.0.0.1:7077`,
the cluster of `scripts/servers.sh up spark-cluster`) it runs every step on each master in turn,
one SparkSession after the other in this process, and prints a last table of each step's time
relative to the first master.

Usage: python bench/file_pipeline.py [--lines 10000000] [--out bench/out] [--master M]...
"""

from __future__ import annotations

import argparse
import filecmp
import os
import platform
import shutil
import sys
import time

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner


def make_file(path: str, lines: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as f:
            if sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b"")) == lines:
                return
    block = 100_000
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, lines, block):
            f.write(
                "".join(
                    f"{i:010d} sluice benchmark line, some text to reach ~50 B\n"
                    for i in range(start, min(start + block, lines))
                )
            )


def wait(predicate, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step did not finish")
        time.sleep(0.05)


def baseline(spark, src: str, out: str) -> float:
    in_dir = os.path.join(out, "baseline-in")
    os.makedirs(in_dir, exist_ok=True)
    link = os.path.join(in_dir, "input.txt")
    # The folder outlives a run: a link left by a run of another size would be read instead.
    if os.path.exists(link) and not os.path.samefile(link, src):
        os.remove(link)
    if not os.path.exists(link):
        os.link(src, link)
    dst = os.path.join(out, "baseline-out")
    shutil.rmtree(dst, ignore_errors=True)
    start = time.perf_counter()
    query = (
        spark.readStream.text(in_dir)
        .writeStream.format("text")
        .option("path", dst)
        .option("checkpointLocation", dst + "-ck")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    shutil.rmtree(dst + "-ck", ignore_errors=True)
    return elapsed


def failed(runner: ConnectorRunner) -> None:
    for r in runner.running.values():
        if r.query.exception() is not None:
            raise SystemExit(f"{r.name} failed: {r.query.exception()}")


def run(spark, args: argparse.Namespace, src: str, out: str) -> dict[str, float]:
    """Every step on `spark`; seconds per step."""
    size = os.path.getsize(src)
    source = {
        "connector.class": "FileSourceConnector",
        "filename": src,
        "connect.topicname": "bench",
        "max.tasks": args.tasks,
    }

    def sink(path: str) -> dict:
        return {
            "connector.class": "FileSinkConnector",
            "filename": path,
            "connect.topicnames": "bench",
            "max.tasks": args.tasks,
        }

    results: dict[str, float] = {}
    results["baseline"] = baseline(spark, src, out)

    # hop 1 and hop 2, one after the other
    root = os.path.join(out, "store-hops")
    shutil.rmtree(root, ignore_errors=True)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    t = time.perf_counter()
    runner.start("src", source)
    wait(lambda: failed(runner) or runner.bus.count("bench") >= args.lines)
    results["hop 1: file source → topic"] = time.perf_counter() - t
    runner.stop("src")
    dst = os.path.join(out, "hop2.txt")
    for p in (dst,):
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(os.path.join(out, ".hop2.txt.sluice"), ignore_errors=True)
    t = time.perf_counter()
    runner.start("dst", sink(dst))
    wait(lambda: failed(runner) or (os.path.exists(dst) and os.path.getsize(dst) >= size))
    results["hop 2: topic → file sink"] = time.perf_counter() - t
    runner.close()
    assert filecmp.cmp(src, dst, shallow=False), "hop 2 output differs from the input"

    # end to end, both queries at once
    root = os.path.join(out, "store-e2e")
    shutil.rmtree(root, ignore_errors=True)
    dst = os.path.join(out, "e2e.txt")
    if os.path.exists(dst):
        os.remove(dst)
    shutil.rmtree(os.path.join(out, ".e2e.txt.sluice"), ignore_errors=True)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    t = time.perf_counter()
    runner.start("src", source)
    runner.start("dst", sink(dst))
    wait(lambda: failed(runner) or (os.path.exists(dst) and os.path.getsize(dst) >= size))
    results["end to end: file → topic → file"] = time.perf_counter() - t
    runner.close()
    assert filecmp.cmp(src, dst, shallow=False), "end-to-end output differs from the input"
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    parser.add_argument("--tasks", default="2", help="max.tasks of both connectors (2 cores here)")
    parser.add_argument(
        "--master",
        action="append",
        help="spark.master (repeat to compare; default local[*])",
    )
    args = parser.parse_args()
    masters = args.master or ["local[*]"]
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, "input.txt")
    make_file(src, args.lines)
    size = os.path.getsize(src)
    cpu = platform.processor() or platform.machine()
    by_master: dict[str, dict[str, float]] = {}
    for master in masters:
        conf = {"spark.master": master}
        if not master.startswith("local"):
            conf["spark.executor.memory"] = "1g"
        spark = build_session(conf, log_level="ERROR")
        results = by_master[master] = run(spark, args, src, out)
        base = results["baseline"]
        print(
            f"\n{master}: {args.lines:,} lines, {size / 1e6:.0f} MB; {cpu}, "
            f"{os.cpu_count()} cores, "
            f"load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, Spark {spark.version}"
        )
        print(f"{'step':<36}{'seconds':>9}{'lines/s':>14}{'MB/s':>9}{'x baseline':>12}")
        for name, seconds in results.items():
            print(
                f"{name:<36}{seconds:>9.2f}{args.lines / seconds:>14,.0f}"
                f"{size / 1e6 / seconds:>9.1f}{seconds / base:>12.2f}"
            )
        print("sink files byte-identical to the source: yes")
        spark.stop()
    if len(masters) > 1:
        first = by_master[masters[0]]
        print(f"\nseconds relative to {masters[0]} (same steps, same file):")
        print(f"{'step':<36}" + "".join(f"{m:>28}" for m in masters[1:]))
        for name in first:
            print(
                f"{name:<36}"
                + "".join(f"{by_master[m][name] / first[name]:>28.2f}" for m in masters[1:])
            )


if __name__ == "__main__":
    main()
