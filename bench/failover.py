"""Failover and rebalance of distributed workers (docs/distributed.md), both strategies.

For each `allocTaskStrategy` (round-robin, consistent hash) on a fresh PostgreSQL database and
shared store: start 3 workers, create 6 file pipelines (12 connectors), then

* baseline: one extra connector created on the idle cluster, POST -> RUNNING (what a single
  query start costs here, the floor of any failover);
* kill -9 the worker owning the most connectors: time until all of them are RUNNING on the
  survivors, and until the first record written after the kill reaches each moved pipeline's
  sink (lines are appended right after the kill); `timeline_s` says when each moved connector
  was RUNNING, each moved pipeline's topic end moved and its sink got the first new record;
* a 4th worker joins: connectors restarted and query starts (counted in the workers' logs)
  against the number the strategy moves;
* every sink byte-identical to its source and every topic holding each line exactly once.

    .venv/bin/python bench/failover.py [--session-timeout-ms 6000] [--interval-ms 1000]
                                       [--bus embedded|kafka]

`--bus kafka` runs the same on the Kafka bus (`scripts/servers.sh up kafka`, started if needed;
each run's topics get names of their own, the broker outlives it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.e2e.dist_cluster import topic_values  # noqa: E402
from tests.e2e.worker_process import DistWorker  # noqa: E402
from tests.servers import ensure  # noqa: E402

from sluice.runtime.allocation import allocate  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432"
STRATEGIES = {
    "round-robin": "org.apache.rocketmq.connect.runtime.service.strategy."
    "DefaultAllocateConnAndTaskStrategy",
    "consistent-hash": "org.apache.rocketmq.connect.runtime.service.strategy."
    "AllocateConnAndTaskStrategyByConsistentHash",
}


def _feed(data: Path, pipelines: int, lines: dict[int, int], count: int) -> None:
    for i in range(pipelines):
        start = lines.get(i, 0)
        with open(data / f"in-{i}.txt", "a", encoding="utf-8") as f:
            f.writelines(
                f"{i}:{n:08d} payload {'z' * (n % 30)}\n" for n in range(start, start + count)
            )
        lines[i] = start + count


def _topic_end(args: argparse.Namespace, shared: dict[str, str], topic: str) -> int:
    """The sum of the topic's end offsets as a reader sees them (Kafka: last stable offsets, so
    it moves when a transaction is committed or aborted)."""
    if args.bus == "kafka":
        from sluice.bus.kafka import KafkaLog

        log = KafkaLog(Path(shared["storePathRootDir"]) / "bench-probe", **args.kafka_log)
    else:
        from sluice.bus.embedded.log import EmbeddedLog

        log = EmbeddedLog(Path(shared["storePathRootDir"]) / "bus")
    return sum(r.max_offset for r in log.offsets(topic).values())


class _Watch:
    """Seconds after the kill at which each moved connector was RUNNING on a survivor, each moved
    pipeline's topic end moved (Kafka: a transaction committed or aborted) and its sink grew."""

    def __init__(
        self, args: argparse.Namespace, shared: dict[str, str], prefix: str, data: Path, t0: float
    ) -> None:
        self.args, self.shared, self.prefix, self.data, self.t0 = args, shared, prefix, data, t0
        self.marks: dict[str, float] = {}

    def _mark(self, what: str, happened: bool) -> None:
        if what not in self.marks and happened:
            self.marks[what] = round(time.monotonic() - self.t0, 1)

    def run(
        self,
        asker: DistWorker,
        moved: list[str],
        victim: str,
        sizes: dict[int, int],
        ends: dict[int, int],
    ) -> dict[str, float]:
        wanted = len(moved) + 2 * len(sizes)
        while time.monotonic() - self.t0 < 300 and len(self.marks) < wanted:
            for name, (state, owner) in asker.owners(moved).items():
                self._mark(f"{name} RUNNING", state == "RUNNING" and owner != victim)
            for i, size in sizes.items():
                topic = f"{self.prefix}{i}"
                if f"topic-{i} end moved" not in self.marks:
                    self._mark(
                        f"topic-{i} end moved", _topic_end(self.args, self.shared, topic) > ends[i]
                    )
                out = self.data / f"out-{i}.txt"
                self._mark(f"sink-{i} first record", out.stat().st_size > size)
            time.sleep(0.1)
        return self.marks


def run(strategy: str, args: argparse.Namespace, out: Path) -> dict[str, object]:
    db = f"sluice_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    root = out / strategy
    shutil.rmtree(root, ignore_errors=True)
    data = root / "data"
    data.mkdir(parents=True)
    shared = {
        "cluster.store.url": f"{PG}/{db}",
        "cluster.name": "bench",
        "storePathRootDir": str(root / "shared"),
        "allocTaskStrategy": STRATEGIES[strategy],
        "virtualNode": str(args.virtual_nodes),
        "rocketmq.runtime.cluster.rebalance.waitInterval": str(args.interval_ms),
        "cluster.session.timeout.ms": str(args.session_timeout_ms),
        "offsetCommitIntervalMsConfig": "1000",
        **args.bus_keys,
    }
    prefix = f"{args.topic_prefix}{strategy}-"
    workers = {
        f"w{i}": DistWorker(root / f"w{i}", worker_id=f"w{i}", shared=shared)
        for i in range(1, args.workers + 1)
    }
    lines: dict[int, int] = {}
    pipelines = args.connectors // 2
    names = [f"{k}-{i}" for i in range(pipelines) for k in ("src", "sink")]
    result: dict[str, object] = {"strategy": strategy}
    try:
        threads = [threading.Thread(target=w.start) for w in workers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a = workers["w1"]

        def owners(asker: DistWorker, which: list[str]) -> dict[str, tuple[str, str]]:
            return asker.owners(which)

        # baseline: one connector on the idle cluster
        (data / "in-probe.txt").write_text("probe\n")
        t = time.monotonic()
        a.post_connector(
            "probe",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(data / "in-probe.txt"),
                "connect.topicname": f"{prefix}probe",
            },
        )
        wait_until(lambda: owners(a, ["probe"])["probe"][0] == "RUNNING", what="probe")
        result["baseline_start_s"] = round(time.monotonic() - t, 2)
        a.request("DELETE", "/v1/connectors/probe")

        _feed(data, pipelines, lines, 2000)
        for i in range(pipelines):
            a.file_pipeline(data, i, topic=f"{prefix}{i}")
        live_ids = sorted(workers)
        expected = allocate(strategy, live_ids, names, virtual_nodes=args.virtual_nodes)
        wait_until(
            lambda: all(owners(a, names)[n] == ("RUNNING", expected[n]) for n in names),
            timeout=300,
            what="the first allocation",
        )
        for i in range(pipelines):
            wait_until(
                lambda i=i: (
                    (data / f"out-{i}.txt").exists()
                    and (data / f"out-{i}.txt").stat().st_size
                    == (data / f"in-{i}.txt").stat().st_size
                ),
                timeout=300,
                what=f"sink {i}",
            )
        victim = max(workers.values(), key=lambda w: list(expected.values()).count(w.worker_id))
        moved = sorted(n for n, o in expected.items() if o == victim.worker_id)
        moved_pipes = sorted({int(n.split("-")[1]) for n in moved})
        sizes = {i: (data / f"out-{i}.txt").stat().st_size for i in moved_pipes}
        survivor = next(w for w in workers.values() if w is not victim)
        ends = {i: _topic_end(args, shared, f"{prefix}{i}") for i in moved_pipes}
        victim.kill9()
        killed = time.monotonic()
        # wall clock, to line the timeline up with the workers' logs and the records' timestamps
        wall = time.time()
        result["killed_at"] = time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{wall % 1:.3f}"[2:]
        _feed(data, pipelines, lines, 500)
        watch = _Watch(args, shared, prefix, data, killed)
        marks = watch.run(survivor, moved, victim.worker_id, sizes, ends)
        first = {i: marks[f"sink-{i} first record"] for i in moved_pipes}
        running_at = max(marks[f"{n} RUNNING"] for n in moved)
        result["timeline_s"] = dict(sorted(marks.items(), key=lambda kv: kv[1]))
        result["moved_on_kill"] = len(moved)
        result["kill_to_running_s"] = round(running_at, 1)
        result["kill_to_first_record_s"] = round(max(first.values()), 1)

        # a 4th worker joins the two survivors
        live_ids = sorted(w for w in workers if w != victim.worker_id)
        before = allocate(strategy, live_ids, names, virtual_nodes=args.virtual_nodes)
        starts_before = {w: workers[w].starts() for w in live_ids}
        newcomer = DistWorker(root / "w-new", worker_id="w9", shared=shared)
        newcomer.start()
        workers["w9"] = newcomer
        after = allocate(strategy, [*live_ids, "w9"], names, virtual_nodes=args.virtual_nodes)
        wait_until(
            lambda: all(owners(survivor, names)[n] == ("RUNNING", after[n]) for n in names),
            timeout=300,
            what="the allocation after the join",
        )
        restarted = set(newcomer.starts())
        starts = sum(newcomer.starts().values())
        for w in live_ids:
            now_starts = workers[w].starts()
            restarted |= {n for n, c in now_starts.items() if c > starts_before[w].get(n, 0)}
            starts += sum(c - starts_before[w].get(n, 0) for n, c in now_starts.items())
        result["join_restarted"] = len(restarted)
        # query starts, not names: a connector that moved to the newcomer, back and there again
        # counts three times (a newcomer once counted live before it could run connectors)
        result["join_starts"] = starts
        result["join_predicted"] = sum(1 for n in names if before[n] != after[n])

        _feed(data, pipelines, lines, 200)
        for i in range(pipelines):
            src, dst = data / f"in-{i}.txt", data / f"out-{i}.txt"
            wait_until(
                lambda s=src, d=dst: d.stat().st_size >= s.stat().st_size,
                timeout=300,
                what=f"sink {i} to catch up",
            )
            assert dst.read_bytes() == src.read_bytes(), f"pipeline {i} differs"
            values = topic_values(shared, f"{prefix}{i}")
            assert len(values) == lines[i], f"topic {i}: {len(values)} != {lines[i]}"
            assert len(set(values)) == len(values), f"topic {i}: a line is there twice"
        result["exact"] = True
    finally:
        alive = [w for w in workers.values() if w.proc is not None and w.proc.poll() is None]
        for w in alive:
            assert w.proc is not None
            w.proc.send_signal(signal.SIGTERM)
        for w in alive:
            w.terminate(60)
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--connectors", type=int, default=12)
    parser.add_argument("--virtual-nodes", type=int, default=8)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--strategy", choices=[*STRATEGIES, "both"], default="both")
    parser.add_argument("--bus", choices=["embedded", "kafka"], default="embedded")
    args = parser.parse_args()
    ensure("postgres")
    args.bus_keys = {}
    args.topic_prefix = "topic-"
    if args.bus == "kafka":
        args.bus_keys = {"bus": "kafka", "bootstrap.servers": ensure("kafka")}
        args.kafka_log = {"bootstrap_servers": args.bus_keys["bootstrap.servers"]}
        args.topic_prefix = f"fo-{uuid.uuid4().hex[:6]}-"
    out = REPO / "bench" / "out" / "failover"
    out.mkdir(parents=True, exist_ok=True)
    strategies = list(STRATEGIES) if args.strategy == "both" else [args.strategy]
    print(
        f"{platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"{args.workers} workers, {args.connectors} connectors, bus {args.bus}, "
        f"heartbeat {args.interval_ms} ms, "
        f"session timeout {args.session_timeout_ms} ms"
    )
    for strategy in strategies:
        print(json.dumps(run(strategy, args, out)), flush=True)


if __name__ == "__main__":
    main()
