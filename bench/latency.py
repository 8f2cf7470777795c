"""Benchmark: where a trickled record's time and a worker's memory go (issue 29's instrument).

One real `sluice worker` (conf/connect-standalone.conf's values, embedded bus) runs `--pairs`
file pairs (`src-i`: in-i.txt → topic-i-<run>, `sink-i`: that topic → out-i.txt). Measured, in
order:
  boot          the worker's start until its REST API answers (`GET /`), and until it serves
                connectors (Spark, stores and herder built);
  create        how long each `POST /connectors/{name}` blocks;
  first record  for each pair, from its source's create until the line its input already held
                is in its output (pair 0 is created last: a pair created on a running worker);
  PSS           of the worker's process tree after each pair delivered (the cost per connector),
                and again after the 10 idle seconds of the idle CPU;
  census        every process of the tree, what it is, and its PSS;
  idle CPU      CPU seconds per second of the whole tree while nothing flows (and, below, while
                the trickle runs);
  trickle       one stamped line every `--every` s into pair 0 for `--seconds`: p50/p99/max of
                the delay until it is in out-0.txt; and from the connectors' Spark progress
                (`GET /v1/connectors/{name}/progress`): each phase of the micro-batches that
                carried lines (`durationMs`), and the split of each line's delay into waiting
                for the source's trigger, the source batch, waiting for the sink's trigger and
                the sink batch; with `--warmup S`, after S s of the same trickle not
                measured (the driver JVM compiles Spark's streaming path for about a minute
                after the first pairs start, and its compiler threads take a core meanwhile);
  restart       (--restart) kill -9 of the worker's process group, a new worker on the same
                store: until every connector is RUNNING, and until a line written to every
                pair after the kill is in every output.

Usage: .venv/bin/python bench/latency.py [--pairs 5] [--seconds 30] [--every 0.2] [--warmup 0]
       [--conf key=value ...] [--restart] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import (  # noqa: E402
    cpu_seconds,
    percentile,
    pss_bytes,
    shipped_trigger_ms,
    size,
    tree,
    trickle_lines,
)
from tests.e2e.worker_process import WorkerProcess  # noqa: E402

PHASES = (
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
MIB = 1 << 20


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# -- the process census ---------------------------------------------------------------------------
def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def what(pid: int, parent_kind: str | None) -> str:
    """What a process of a worker's tree is, from its command line."""
    args = cmdline(pid)
    text = " ".join(args)
    if "java" in (args[0] if args else "") or "org.apache.spark.deploy.SparkSubmit" in text:
        return "Spark driver JVM"
    if "sluice.cli" in text and "worker" in args:
        return "worker (Python: REST, control loop, py4j)"
    if "python_streaming_source_runner" in text:
        return "stream reader planner (one per Python source of a query)"
    if "python_streaming_sink_runner" in text:
        return "stream writer commit runner"
    if "worker_daemon" in text or "pyspark.daemon" in text:
        return "Python worker daemon"
    if parent_kind == "Python worker daemon":
        return "Python task worker (forked by the daemon)"
    if "pyspark.sql.worker" in text or "pyspark.worker" in text:
        return "Python planner/worker (" + text.split()[-1][:60] + ")"
    return text[:80] or "?"


def census(root: int) -> list[tuple[str, int, int]]:
    """`(kind, processes, PSS bytes)` per kind of process in the tree under `root`."""
    kinds: dict[int, str] = {}
    parents: dict[int, int] = {}
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
        except OSError:
            continue
    for pid in sorted(parents):  # parents have lower pids here, mostly: second pass fixes it
        kinds[pid] = what(pid, None)
    for pid in sorted(parents):
        kinds[pid] = what(pid, kinds.get(parents[pid]))
    out: dict[str, list[int]] = {}
    for pid, kind in kinds.items():
        entry = out.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += pss_bytes([pid])
    return sorted(((k, n, b) for k, (n, b) in out.items()), key=lambda r: -r[2])


# -- the worker -----------------------------------------------------------------------------------


class Bench:
    """One worker with `pairs` file pairs under `work`."""

    def __init__(self, work: Path, pairs: int, conf: dict[str, str]) -> None:
        self.work, self.pairs = work, pairs
        self.data = work / "data"
        self.worker = WorkerProcess(work / "worker")
        self.conf = conf

    def write_conf(self) -> None:
        values = {
            "workerId": "bench-worker",
            "httpHost": "127.0.0.1",
            "httpPort": str(self.worker.port),
            "config.providers": "env,file",
            "storePathRootDir": str(self.worker.tmp / "store"),
            "offsetCommitIntervalMsConfig": shipped_trigger_ms(),
            "bus": "embedded",
            "bus.default.queues": "8",
            "spark.master": "local[*]",
            **self.conf,
        }
        self.worker.tmp.mkdir(parents=True, exist_ok=True)
        self.worker.conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def boot(self) -> tuple[float, float]:
        """Start the worker; seconds until its REST API answers (`GET /`), and until it serves
        connectors (`GET /v1/connectors` 200: Spark, stores and herder built)."""
        started = time.monotonic()
        self.worker.launch()
        answered = None
        while True:
            if self.worker.proc.poll() is not None:
                raise SystemExit(f"worker exited:\n{self.worker.log.read_text()[-3000:]}")
            try:
                if answered is None and httpx.get(self.worker.url + "/", timeout=1).is_success:
                    answered = time.monotonic() - started
                if httpx.get(self.worker.url + "/v1/connectors", timeout=1).status_code == 200:
                    now = time.monotonic() - started
                    return (answered if answered is not None else now), now
            except httpx.HTTPError:
                pass
            time.sleep(0.02)

    def post(self, name: str, config: dict[str, str]) -> float:
        started = time.monotonic()
        response = self.worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
        took = time.monotonic() - started
        if response.status_code != 200:
            raise SystemExit(f"{name} refused: {response.text}")
        return took

    def create_pair(self, i: int) -> tuple[float, float, float]:
        """Create pair `i` over an input holding one line; (source POST s, sink POST s, first
        record s from the source's POST)."""
        src, dst = self.data / f"in-{i}.txt", self.data / f"out-{i}.txt"
        src.write_text(f"first line of pair {i}\n")
        # a broker bus keeps its topics between runs: each run reads and writes its own
        topic = f"topic-{i}-{self.data.parent.name[-8:]}"
        started = time.monotonic()
        took_src = self.post(
            f"src-{i}",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": topic,
            },
        )
        took_sink = self.post(
            f"sink-{i}",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": topic,
            },
        )
        self.wait(lambda: size(dst) >= size(src), f"pair {i}'s first record")
        return took_src, took_sink, time.monotonic() - started

    def wait(self, done, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        checked = 0.0
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            if now - checked > 1:
                checked = now
                reason = self.failed()
                if reason:
                    raise SystemExit(f"waiting for {what}: {reason}")
            time.sleep(0.005)

    def failed(self) -> str | None:
        if self.worker.proc.poll() is not None:
            return f"the worker exited with {self.worker.proc.returncode}"
        for i in range(self.pairs):
            for name in (f"src-{i}", f"sink-{i}"):
                try:
                    response = self.worker.request("GET", f"/v1/connectors/{name}/status")
                except httpx.HTTPError:
                    return None  # not listening yet (a restart)
                if response.status_code != 200:  # 404: not created yet; 503: still starting
                    continue
                connector = response.json()["connector"]
                if connector["state"] == "FAILED":
                    return f"{name}: {connector.get('trace', '')[:2000]}"
        return None

    def v1(self, path: str) -> Any:
        """The JSON of a successful GET on the Kafka Connect face (no envelope there)."""
        response = self.worker.get(f"/v1{path}")
        assert response.status_code == 200, response.text
        return response.json()

    def progress(self, name: str) -> list[dict]:
        return self.v1(f"/connectors/{name}/progress")["batches"]

    def states(self) -> list[str]:
        body = self.v1("/connectors?expand=status")
        return [c["status"]["connector"]["state"] for c in body.values()]


def trickle(bench: Bench, seconds: float, every: float) -> list[tuple[float, float]]:
    """Append one stamped line to in-0.txt every `every` s; `(written at, delay)` per line."""
    src, dst = bench.data / "in-0.txt", bench.data / "out-0.txt"
    return trickle_lines(src, dst, seconds, every, bench.failed, "pair 0")


def mismatch(src: Path, dst: Path) -> str:
    """Where two line files part: line counts, the first differing line, lines seen twice."""
    a, b = src.read_bytes().splitlines(), dst.read_bytes().splitlines()
    pairs = enumerate(zip(a, b, strict=False))
    first = next((n for n, (x, y) in pairs if x != y), min(len(a), len(b)))
    twice = len(b) - len(set(b))
    return (
        f"{len(a)} lines in, {len(b)} out, {twice} repeated; first difference at line {first}: "
        f"{a[first] if first < len(a) else None!r} vs {b[first] if first < len(b) else None!r} "
        f"(work folder kept: {src.parent.parent})"
    )


def batch_times(batches: list[dict]) -> list[tuple[float, float, float, int]]:
    """`(trigger start, offsets decided, trigger end, rows)` (epoch seconds) of each batch that
    carried rows. The offsets are decided when `latestOffset` returns: an idle reader waits in
    it for its input's wake-up, so a batch may start before the records it carries arrive."""
    out = []
    for b in batches:
        if not b["numInputRows"]:
            continue
        start = datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")).timestamp()
        durations = b["durationMs"]
        decided = start + durations.get("latestOffset", 0) / 1000
        out.append(
            (start, decided, start + durations.get("triggerExecution", 0) / 1000, b["numInputRows"])
        )
    return out


def split_delays(
    lines: list[tuple[float, float]], source: list[dict], sink: list[dict]
) -> dict[str, float]:
    """Median split of the lines' delays: until the source's batch decided the offsets that
    carry the line (its trigger's wait, or nothing when it was waiting for input), the rest of
    that batch, then the same two for the sink batch that wrote the line: the last one started
    before the line was seen in the output. The sink's wait is negative when the topic's commit
    woke it before the source's batch ended (Spark writes its commit log after the batch's
    data is committed)."""
    src, dst = batch_times(source), batch_times(sink)
    parts: dict[str, list[float]] = {
        k: [] for k in ("source wait", "source batch", "sink wait", "sink batch")
    }
    for written, delay in lines:
        # Spark keeps the last 100 progresses: a line older than them has no batch to look at
        if not src or not dst or written < src[0][0] or written < dst[0][0]:
            continue
        s = next((b for b in src if b[1] >= written), None)
        if s is None:
            continue
        k = next((b for b in reversed(dst) if b[0] <= written + delay), None)
        if k is None or k[2] < s[1]:
            continue
        parts["source wait"].append(s[1] - written)
        parts["source batch"].append(s[2] - s[1])
        parts["sink wait"].append(k[1] - s[2])
        parts["sink batch"].append(k[2] - k[1])
    return {k: statistics.median(v) * 1000 for k, v in parts.items() if v}


def phase_medians(batches: list[dict]) -> dict[str, float]:
    carried = [b for b in batches if b["numInputRows"]]
    return {
        p: statistics.median(b["durationMs"].get(p, 0) for b in carried) for p in PHASES if carried
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=0.2)
    parser.add_argument("--warmup", type=float, default=0.0, help="s of trickle not measured")
    parser.add_argument("--conf", action="append", default=[], help="extra worker key=value")
    parser.add_argument("--restart", action="store_true", help="also kill -9 and restart")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    work = Path(tempfile.mkdtemp(prefix="sluice-latency-"))
    bench = Bench(work, args.pairs, conf)
    bench.data.mkdir(parents=True)
    result: dict = {
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}",
        "pairs": args.pairs,
        "conf": conf,
        "warmup_s": args.warmup,
        "load_before": loadavg(),
    }
    print(f"load before: {result['load_before']}; {args.pairs} pairs; conf {conf}", flush=True)
    bench.write_conf()
    try:
        result["boot_s"], result["ready_s"] = bench.boot()
        print(
            f"boot: REST answers {result['boot_s']:.1f} s, serves connectors "
            f"{result['ready_s']:.1f} s",
            flush=True,
        )
        root = bench.worker.proc.pid
        creates, firsts, pss = [], [], []
        for i in [*range(1, args.pairs), 0]:  # pair 0 last: created on a running worker
            took_src, took_sink, first = bench.create_pair(i)
            creates += [took_src, took_sink]
            firsts.append(first)
            time.sleep(1)  # let the pair's processes settle before the sample
            pss.append(pss_bytes(tree(root)))
            print(
                f"pair {i}: POST src {took_src:.2f} s, sink {took_sink:.2f} s; first record "
                f"{first:.2f} s; tree PSS {pss[-1] / MIB:.0f} MiB",
                flush=True,
            )
        result["create_s"] = {"median": statistics.median(creates), "max": max(creates)}
        result["first_record_s"] = {"pair 0 (last)": firsts[-1], "all": firsts}
        result["pss_mib_by_connectors"] = {2 * (n + 1): round(b / MIB) for n, b in enumerate(pss)}
        if len(pss) > 1:
            result["pss_mib_per_connector"] = round((pss[-1] - pss[0]) / MIB / (2 * (len(pss) - 1)))
        rows = census(root)
        result["census"] = [
            {"kind": k, "processes": n, "pss_mib": round(b / MIB)} for k, n, b in rows
        ]
        print("census:")
        for k, n, b in rows:
            print(f"  {n:3d} x {k}: {b / MIB:.0f} MiB")
        pids = tree(root)
        before, started = cpu_seconds(pids), time.monotonic()
        time.sleep(10)
        result["idle_cpu_per_s"] = (cpu_seconds(tree(root)) - before) / (time.monotonic() - started)
        result["pss_mib_after_idle"] = round(pss_bytes(tree(root)) / MIB)
        print(
            f"idle CPU: {result['idle_cpu_per_s']:.3f} CPU-s/s; tree PSS after those 10 s "
            f"{result['pss_mib_after_idle']} MiB",
            flush=True,
        )

        if args.warmup:
            trickle(bench, args.warmup, args.every)
            print(f"warm-up: {args.warmup:.0f} s of the trickle, not measured", flush=True)
        before, started = cpu_seconds(tree(root)), time.monotonic()
        lines = trickle(bench, args.seconds, args.every)
        spent = cpu_seconds(tree(root)) - before
        result["trickle_cpu_per_s"] = spent / (time.monotonic() - started)
        delays = [d for _, d in lines]
        result["trickle_ms"] = {
            "p50": percentile(delays, 50) * 1000,
            "p99": percentile(delays, 99) * 1000,
            "max": max(delays) * 1000,
            "lines": len(delays),
        }
        source, sink = bench.progress("src-0"), bench.progress("sink-0")
        result["phases_ms"] = {"src-0": phase_medians(source), "sink-0": phase_medians(sink)}
        result["split_ms"] = split_delays(lines, source, sink)
        t = result["trickle_ms"]
        print(
            f"trickle: p50 {t['p50']:.0f} ms, p99 {t['p99']:.0f} ms, max {t['max']:.0f} ms; "
            f"{result['trickle_cpu_per_s']:.2f} CPU-s/s for the tree meanwhile"
        )
        print(
            f"  split (median): {json.dumps({k: round(v) for k, v in result['split_ms'].items()})}"
        )
        for name, phases in result["phases_ms"].items():
            print(f"  {name} phases (median ms): {json.dumps(phases)}")

        if args.restart:
            bench.worker.kill9()
            killed = time.monotonic()
            for i in range(args.pairs):
                with open(bench.data / f"in-{i}.txt", "a") as f:
                    f.write(f"after the kill {i}\n")
            bench.worker.launch()
            names = 2 * args.pairs

            def running() -> bool:
                try:
                    states = bench.states()
                except (httpx.HTTPError, AssertionError):  # not listening yet, or 503 starting
                    return False
                return len(states) == names and all(s == "RUNNING" for s in states)

            bench.wait(running, "every connector RUNNING after the restart")
            result["restart_running_s"] = time.monotonic() - killed
            bench.wait(
                lambda: all(
                    size(bench.data / f"out-{i}.txt") >= size(bench.data / f"in-{i}.txt")
                    for i in range(args.pairs)
                ),
                "every pair delivering after the restart",
            )
            result["restart_delivering_s"] = time.monotonic() - killed
            print(
                f"kill -9 → all RUNNING {result['restart_running_s']:.1f} s, all delivering "
                f"{result['restart_delivering_s']:.1f} s"
            )
        for i in range(args.pairs):
            src, dst = bench.data / f"in-{i}.txt", bench.data / f"out-{i}.txt"
            if src.read_bytes() != dst.read_bytes():
                args.keep = True  # the evidence stays for a look
                raise SystemExit(f"pair {i}: output differs from input: {mismatch(src, dst)}")
    finally:
        if bench.worker.proc is not None and bench.worker.proc.poll() is None:
            bench.worker.terminate()
        result["load_after"] = loadavg()
        print(f"load after: {result['load_after']}")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
