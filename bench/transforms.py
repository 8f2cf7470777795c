"""Benchmark: what transforms cost on the source → topic hop (issue 4's transform part).

Same file, same SparkSession, four runs of file source → topic:
  fused          no transforms: records never enter the JVM (the default for such a pipeline);
  jvm            no transforms, `pipeline.fused=false`: records cross into Spark rows and back;
  3-step chain   RegexRouter, then a SQL filter, then a SQL reshape (all compiled to Spark SQL);
  sql            one `sql` transform doing the filter and the reshape at once.
The chain runs on the JVM path, so its cost is measured against `jvm` (the transforms themselves)
and against `fused` (what a user sees when adding the first transform).

Usage: python bench/transforms.py [--lines 5000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

from file_pipeline import make_file, wait
from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

QUERY = (
    "SELECT topic, key, concat(upper(value), '!') AS value, timestamp, headers, partition_hash "
    "FROM records WHERE value NOT LIKE '%9 sluice%'"
)


def run(spark, out: str, src: str, lines: int, extra: dict[str, str], topic: str) -> float:
    root = os.path.join(out, "store-transforms")
    shutil.rmtree(root, ignore_errors=True)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    expected = lines - lines // 10 if "transforms" in extra else lines
    start = time.perf_counter()
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": src,
            "connect.topicname": "bench",
            "max.tasks": "2",
            **extra,
        },
    )

    def rows() -> int:
        for r in runner.running.values():
            if r.failure():
                raise SystemExit(r.failure()[0])
        return runner.bus.count(topic)

    wait(lambda: rows() >= expected)
    elapsed = time.perf_counter() - start
    runner.close()
    assert rows() == expected, (rows(), expected)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, f"input-{args.lines}.txt")
    make_file(src, args.lines)
    spark = build_session(log_level="ERROR")
    chain = {
        "transforms": "route,keep,shape",
        "transforms.route.class": "RegexRouter",
        "transforms.route.regex": "bench",
        "transforms.route.replacement": "bench-out",
        "transforms.keep.class": "sql",
        "transforms.keep.query": "SELECT * FROM records WHERE value NOT LIKE '%9 sluice%'",
        "transforms.shape.class": "sql",
        "transforms.shape.query": QUERY.replace(" WHERE value NOT LIKE '%9 sluice%'", ""),
    }
    single = {"transforms": "s", "transforms.s.class": "sql", "transforms.s.query": QUERY}
    run(spark, out, src, args.lines, {}, "bench")  # warm-up: Python workers, JIT
    results = {
        "fused (no transforms)": run(spark, out, src, args.lines, {}, "bench"),
        "jvm path (no transforms)": run(
            spark, out, src, args.lines, {"pipeline.fused": "false"}, "bench"
        ),
        "3-step chain": run(spark, out, src, args.lines, chain, "bench-out"),
        "one sql transform": run(spark, out, src, args.lines, single, "bench"),
    }
    fused, jvm = results["fused (no transforms)"], results["jvm path (no transforms)"]
    print(f"\n{args.lines:,} lines, file source -> topic, max.tasks=2, {os.cpu_count()} cores")
    print(f"{'run':<28}{'seconds':>9}{'lines/s':>12}{'x fused':>9}{'x jvm':>8}")
    for name, seconds in results.items():
        print(
            f"{name:<28}{seconds:>9.2f}{args.lines / seconds:>12,.0f}"
            f"{seconds / fused:>9.2f}{seconds / jvm:>8.2f}"
        )
    spark.stop()


if __name__ == "__main__":
    main()
