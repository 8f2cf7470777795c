"""Benchmark: file source → topic → file sink on each bus backend, in one run.

For every bus named on the command line (`embedded`, `rocketmq`, `kafka`) it starts both file
connectors together on a fresh store and a fresh topic, and times:
  hop 1       connector start → the topic holds every line (file source → topic);
  end to end  connector start → the sink file holds every byte (then checks it byte-identical).
Prints lines/s for each, after an untimed warm-up run of 100k lines on every bus, beside the
plain-PySpark file → file baseline of `bench/file_pipeline.py` timed in the same run and session,
and each bus's ratio to the embedded bus and to that baseline.

RocketMQ needs a broker (`--namesrv`, default $SLUICE_ROCKETMQ_NAMESRV or 127.0.0.1:9876, e.g.
`scripts/servers.sh up rocketmq`). Kafka runs on the real Kafka 4 broker: `--bootstrap`, default
the one `scripts/servers.sh up kafka` brings up (started if needed, left running). Its topic
writes are Kafka transactions (one per micro-batch) and its reads read_committed; hop 1 counts
offsets there, which include one commit marker per micro-batch and partition (a few hundred).

With `--bus kafka` it also times the copy by confluent-kafka alone, without Spark or sluice
(`kafka client`: a transactional producer, then a `read_committed` consumer, one after the
other): what a Python program moves through the same broker on the same cores.

Besides the rates, it prints the CPU each run took: of this process's tree (the worker: its Spark
JVM and Python workers) and of the broker's processes (Kafka's server, RocketMQ's name server and
broker, read from the pid files of `scripts/servers.sh`), in µs per line.

BENCH_PROGRESS=1 prints, per query, its micro-batches' mean Spark phase durations (`durationMs`).

Usage: python bench/bus_pipeline.py [--lines 5000000] [--bus embedded --bus rocketmq --bus kafka]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.file_pipeline import baseline, failed, make_file
from bench.peers import cpu_seconds, tree

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner


def make_bus(kind: str, state: str, namesrv: str, kafka: Any) -> Any:
    if kind == "embedded":
        from sluice.bus.embedded import EmbeddedBus

        return EmbeddedBus(state, default_queues=8)
    if kind == "rocketmq":
        from sluice.bus.rocketmq import RocketMQBus

        return RocketMQBus(state, namesrv_addr=namesrv, default_queues=8)
    from sluice.bus.kafka import KafkaBus

    return KafkaBus(state, bootstrap_servers=kafka.bootstraps, default_queues=8)


def kafka_broker(bootstrap: str | None) -> Any:
    """The broker at `bootstrap`, or the one of `scripts/servers.sh up kafka` (started if need
    be; the benchmark leaves it running)."""
    from tests.integration.bus_helpers import RealKafka

    if not bootstrap:
        script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "servers.sh")
        up = subprocess.run(["bash", script, "up", "kafka"], capture_output=True, text=True)
        if up.returncode != 0:
            raise SystemExit(f"scripts/servers.sh up kafka failed:\n{up.stderr}")
        bootstrap = next(x.split()[2] for x in up.stdout.splitlines() if x.startswith("kafka up"))
    return RealKafka(bootstrap)


SERVERS = os.environ.get("SLUICE_SERVERS_DIR", "/tmp/sluice-servers")
BROKER_PIDFILES = {
    "kafka": ["kafka/run/kafka.pid"],
    "rocketmq": ["rocketmq/run/namesrv.pid", "rocketmq/run/broker.pid"],
}


def broker_pids(kind: str) -> list[int]:
    """The broker processes of `kind` that `scripts/servers.sh` runs (none for embedded)."""
    pids = []
    for name in BROKER_PIDFILES.get(kind, []):
        try:
            with open(os.path.join(SERVERS, name)) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return pids


def run(spark: Any, kind: str, src: str, out: str, lines: int, args: argparse.Namespace) -> dict:
    root = os.path.join(out, f"store-{kind}")
    shutil.rmtree(root, ignore_errors=True)
    dst = os.path.join(out, f"out-{kind}.txt")
    if os.path.exists(dst):
        os.remove(dst)
    bus = make_bus(kind, os.path.join(root, "bus"), args.namesrv, args.kafka)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    if kind == "kafka":
        args.kafka.create_topic(topic, 8)
    else:
        bus.create_topic(topic, 8)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0, bus=bus)
    size = os.path.getsize(src)
    brokers = broker_pids(kind)
    try:
        worker0, broker0 = cpu_seconds(tree(os.getpid())), cpu_seconds(brokers)
        start = time.perf_counter()
        runner.start(
            "src",
            {
                "connector.class": "FileSourceConnector",
                "filename": src,
                "connect.topicname": topic,
                "max.tasks": str(args.tasks),
            },
        )
        runner.start(
            "dst",
            {
                "connector.class": "FileSinkConnector",
                "filename": dst,
                "connect.topicnames": topic,
                "max.tasks": str(args.tasks),
            },
        )
        hop1 = None
        while True:
            failed(runner)
            now = time.perf_counter()
            if hop1 is None and bus.count(topic) >= lines:
                hop1 = now - start
            if os.path.exists(dst) and os.path.getsize(dst) >= size:
                end = now - start
                worker_cpu = cpu_seconds(tree(os.getpid())) - worker0
                broker_cpu = cpu_seconds(brokers) - broker0 if brokers else float("nan")
                break
            time.sleep(0.05)
        if hop1 is None:
            hop1 = end
        if os.environ.get("BENCH_PROGRESS"):
            from bench.cdc import _print_progress

            for name in ("src", "dst"):
                _print_progress(f"{kind} {name}", runner.running[name].query)
    finally:
        runner.close()
        bus.close()
    identical = filecmp.cmp(src, dst, shallow=False)
    return {
        "bus": kind,
        "hop1": hop1,
        "end": end,
        "identical": identical,
        "worker_cpu": worker_cpu,
        "broker_cpu": broker_cpu,
    }


def kafka_client_copy(src: str, out: str, kafka: Any, lines: int) -> dict:
    """The same copy by confluent-kafka alone, no Spark: one transactional producer sends every
    line of `src` to one partition (as sluice's file source does: one file, one queue) in one
    transaction per 1M lines, then one `read_committed` consumer reads them back into a file.
    The hops run one after the other, so `end` is their sum (sluice runs them side by side)."""
    import itertools

    import confluent_kafka

    topic = f"bench-client-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 8)
    dst = os.path.join(out, "out-kafka-client.txt")
    with open(src, "rb") as f:
        values = f.read().split(b"\n")[:-1]
    brokers = broker_pids("kafka")
    worker0, broker0 = cpu_seconds([os.getpid()]), cpu_seconds(brokers)
    start = time.perf_counter()
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": kafka.bootstraps,
            "transactional.id": topic,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(30)
    produce, repeat = producer.produce, itertools.repeat
    for first in range(0, len(values), 1_000_000):
        producer.begin_transaction()
        for part in range(first, min(first + 1_000_000, len(values)), 250_000):
            chunk = values[part : min(part + 250_000, first + 1_000_000, len(values))]
            while len(producer) > 500_000:
                producer.poll(0.01)
            for _ in map(produce, repeat(topic), chunk, repeat(None), repeat(0)):
                pass
        producer.commit_transaction(60)
    hop1 = time.perf_counter() - start
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka.bootstraps,
            "group.id": topic,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,  # fetch sizes as shipped: larger ones were slower
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    with open(dst, "wb") as f:
        while got < lines:
            messages = consumer.consume(100_000, 5.0)
            f.write(b"".join(m.value() + b"\n" for m in messages if not m.error()))
            got += len(messages)
    consumer.close()
    end = time.perf_counter() - start
    return {
        "bus": "kafka client",
        "hop1": hop1,
        "end": end,
        "identical": filecmp.cmp(src, dst, shallow=False),
        "worker_cpu": cpu_seconds([os.getpid()]) - worker0,
        "broker_cpu": cpu_seconds(brokers) - broker0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--bus", action="append", choices=("embedded", "rocketmq", "kafka"))
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument(
        "--namesrv", default=os.environ.get("SLUICE_ROCKETMQ_NAMESRV", "127.0.0.1:9876")
    )
    parser.add_argument("--bootstrap", default="", help="Kafka; default: scripts/servers.sh's")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    args = parser.parse_args()
    buses = args.bus or ["embedded", "rocketmq"]
    os.makedirs(args.out, exist_ok=True)
    src = os.path.join(args.out, f"input-{args.lines}.txt")
    make_file(src, args.lines)
    args.kafka = None
    if "kafka" in buses:
        args.kafka = kafka_broker(args.bootstrap)
    start_load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    spark = build_session({"spark.driver.memory": "4g"}, log_level="ERROR")
    # The first queries of a session pay for JVM warm-up (~10 s here): run a small file first.
    warm = os.path.join(args.out, "input-warmup.txt")
    make_file(warm, 100_000)
    for kind in dict.fromkeys(buses):
        run(spark, kind, warm, args.out, 100_000, args)
    base = baseline(spark, src, args.out)
    results = [run(spark, kind, src, args.out, args.lines, args) for kind in buses]
    spark.stop()
    if args.kafka is not None:
        results.append(kafka_client_copy(src, args.out, args.kafka, args.lines))
    mb = os.path.getsize(src) / 1e6
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{args.lines:,} lines ({mb:.0f} MB), max.tasks={args.tasks}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load} at the end (started at {start_load})"
    )
    print(
        f"{'bus':<10} {'hop 1 s':>8} {'hop 1 lines/s':>14} {'end s':>8} {'lines/s':>12}  "
        f"{'÷embedded':>9} {'÷baseline':>9}  same  {'worker µs/line':>14} {'broker µs/line':>14}"
    )
    print(f"{'PySpark':<10} {'':>8} {'':>14} {base:>8.2f} {args.lines / base:>12,.0f}")
    embedded = next((r["end"] for r in results if r["bus"] == "embedded"), None)
    for r in results:
        vs_embedded = f"{r['end'] / embedded:>8.2f}x" if embedded else f"{'-':>9}"
        print(
            f"{r['bus']:<10} {r['hop1']:>8.2f} {args.lines / r['hop1']:>14,.0f} "
            f"{r['end']:>8.2f} {args.lines / r['end']:>12,.0f}  {vs_embedded} "
            f"{r['end'] / base:>8.2f}x  {r['identical']!s:<5} "
            f"{r['worker_cpu'] / args.lines * 1e6:>14.2f} "
            f"{r['broker_cpu'] / args.lines * 1e6:>14.2f}"
        )
    if not all(r["identical"] for r in results):
        raise SystemExit("a sink file differs from its input")


if __name__ == "__main__":
    main()
