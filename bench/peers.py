"""Benchmark: Kafka Connect itself and sluice side by side, file → Kafka topic → file.

Both run as a user would run them, one after the other in one run, on the same Kafka broker and
the same input file:
  kafka-connect  Apache Kafka Connect in standalone mode (`ConnectStandalone`, jars from Maven
                 Central through scripts/kafka-connect.sh) with the worker properties of Kafka's
                 quickstart (JsonConverter with schemas, file offsets), `FileStreamSource` →
                 topic → `FileStreamSink` created over its REST API with their default settings;
  sluice         a `sluice worker` process (bus=kafka, the shipped conf's defaults) with
                 `FileSourceConnector` → topic → `FileSinkConnector` created over its REST API;
  kafka-connect-tuned (only when asked with --peer) Kafka Connect with `batch.size` of the source
                 and the converters changed (--tuned-batch-size, --tuned-converter).
For each it measures, from the moment the first connector is created:
  first line   until the sink file holds its first byte;
  lines/s      until the sink file holds the whole input (then checks it byte-identical);
  trickle      then, the connectors still running, one line every 100 ms for --trickle-seconds,
               each stamped with the time it was written: p50/p99/max of the delay until it is
               in the sink file;
  memory       the largest PSS (/proc/PID/smaps_rollup) of the worker's process tree, sampled
               every 2 s from its start to its stop; CPU seconds of the tree and of the broker
               during the bulk copy.
Each peer gets its own copy of the input file (the trickle appends to it) and its own topic.

The broker is `scripts/servers.sh up kafka` (127.0.0.1:9092) unless --bootstrap names another.

Usage: .venv/bin/python bench/peers.py [--lines 5000000] [--trickle-seconds 30]
       [--peer kafka-connect --peer sluice --peer kafka-connect-tuned]
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.file_pipeline import make_file, wait  # noqa: E402
from tests.e2e.worker_process import WorkerProcess, free_port  # noqa: E402

KAFKA_CONNECT = REPO / "scripts" / "kafka-connect.sh"
BROKER_PIDFILE = (
    Path(os.environ.get("SLUICE_SERVERS_DIR", "/tmp/sluice-servers")) / "kafka/run/kafka.pid"
)
CONVERTERS = {
    "json": "org.apache.kafka.connect.json.JsonConverter",
    "string": "org.apache.kafka.connect.storage.StringConverter",
}


# -- process trees: memory and CPU ----------------------------------------------------------------
def tree(root: int) -> list[int]:
    """`root` and every process below it (by parent pid, read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields start after the last ')'
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def pss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:  # the process ended between the listing and the read
            continue
    return total


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and of their children already reaped."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


class MemorySampler(threading.Thread):
    """The largest PSS of a process tree, sampled every `every` seconds until stopped.

    Reading smaps_rollup makes the kernel walk the page tables: ~80 ms of CPU for the sluice
    tree (~1.8 GiB), so sampling more often than every 2 s takes a visible share of 2 cores."""

    def __init__(self, root: int, every: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.root, self.every = root, every
        self.max_pss = 0
        self.processes = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            pids = tree(self.root)
            pss = pss_bytes(pids)
            if pss > self.max_pss:
                self.max_pss, self.processes = pss, len(pids)
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join()


# -- the two workers ------------------------------------------------------------------------------
@dataclass
class Peer:
    """One worker process: how to start it, create the two connectors, and stop it."""

    name: str
    work: Path
    bootstrap: str
    proc: subprocess.Popen | None = None
    port: int = field(default_factory=free_port)

    def start(self) -> None:
        raise NotImplementedError

    def create(self, src: Path, dst: Path, topic: str) -> None:
        raise NotImplementedError

    def failed(self) -> str | None:
        """A reason when the worker or a connector failed, else None."""
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(120)
        with contextlib.suppress(ProcessLookupError):  # nothing of the tree may outlive it
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class KafkaConnect(Peer):
    """Kafka Connect in standalone mode, from its Maven Central jars."""

    def __init__(self, name: str, work: Path, bootstrap: str, connector: dict, converter: str):
        super().__init__(name, work, bootstrap)
        self.connector = connector  # extra source connector keys (the tuned round)
        self.converter = CONVERTERS[converter]
        self.log = work / "connect.log"

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        # Kafka's config/connect-standalone.properties, with loopback REST and our own paths.
        props = self.work / "connect-standalone.properties"
        schemas = "true" if self.converter == CONVERTERS["json"] else "false"
        props.write_text(
            f"bootstrap.servers={self.bootstrap}\n"
            f"key.converter={self.converter}\n"
            f"value.converter={self.converter}\n"
            f"key.converter.schemas.enable={schemas}\n"
            f"value.converter.schemas.enable={schemas}\n"
            f"offset.storage.file.filename={self.work / 'connect.offsets'}\n"
            "offset.flush.interval.ms=10000\n"
            f"listeners=http://127.0.0.1:{self.port}\n"
        )
        self.proc = subprocess.Popen(
            ["bash", str(KAFKA_CONNECT), "standalone", str(props)],
            stdout=open(self.log, "ab"),  # noqa: SIM115 - handed to the child
            stderr=subprocess.STDOUT,
            cwd=self.work,
            start_new_session=True,
        )
        wait(
            lambda: (
                self.proc.poll() is not None
                or "Kafka Connect started" in self.log.read_text(errors="replace")
            ),
            timeout=300,
        )
        if self.proc.poll() is not None:
            raise SystemExit(f"Kafka Connect exited:\n{self.log.read_text()[-3000:]}")

    def _post(self, name: str, config: dict[str, str]) -> None:
        url = f"http://127.0.0.1:{self.port}/connectors"
        response = httpx.post(url, json={"name": name, "config": config}, timeout=60)
        if response.status_code != 201:
            raise SystemExit(f"Kafka Connect refused {name}: {response.text}")

    def create(self, src: Path, dst: Path, topic: str) -> None:
        # the quickstart's connect-file-source/sink.properties, with our file and topic names
        source = {"connector.class": "FileStreamSource", "tasks.max": "1"}
        source |= {"file": str(src), "topic": topic, **self.connector}
        self._post("local-file-source", source)
        sink = {"connector.class": "FileStreamSink", "tasks.max": "1"}
        self._post("local-file-sink", sink | {"file": str(dst), "topics": topic})

    def failed(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"Kafka Connect exited with {self.proc.returncode}"
        for name in ("local-file-source", "local-file-sink"):
            url = f"http://127.0.0.1:{self.port}/connectors/{name}/status"
            status = httpx.get(url, timeout=30).json()
            for part in [status["connector"], *status["tasks"]]:
                if part["state"] == "FAILED":
                    return f"{name}: {part.get('trace', '')[:2000]}"
        return None


def shipped_trigger_ms() -> str:
    """The trigger interval conf/connect-standalone.conf ships (what a user runs with)."""
    conf = REPO / "conf" / "connect-standalone.conf"
    for line in conf.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "offsetCommitIntervalMsConfig":
            return value.strip()
    raise SystemExit(f"{conf}: no offsetCommitIntervalMsConfig")


class Sluice(Peer):
    """A `sluice worker` process on bus=kafka, driven over its REST API."""

    def __init__(self, name: str, work: Path, bootstrap: str):
        super().__init__(name, work, bootstrap)
        self.worker = WorkerProcess(work, port=self.port)

    def start(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        # conf/connect-standalone.conf's values, on Kafka and on loopback
        self.worker.conf.write_text(
            "workerId=bench-worker\n"
            "httpHost=127.0.0.1\n"
            f"httpPort={self.port}\n"
            f"storePathRootDir={self.work / 'store'}\n"
            f"offsetCommitIntervalMsConfig={shipped_trigger_ms()}\n"
            "bus=kafka\n"
            f"bootstrap.servers={self.bootstrap}\n"
            "spark.master=local[*]\n"
        )
        self.worker.start()
        self.proc = self.worker.proc

    def _post(self, name: str, config: dict[str, str]) -> None:
        response = self.worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
        if response.status_code != 200:
            raise SystemExit(f"sluice refused {name}: {response.text}")

    def create(self, src: Path, dst: Path, topic: str) -> None:
        # README's "quickstart on a broker", with our file and topic names
        source = {"connector.class": "FileSourceConnector", "filename": str(src)}
        self._post("fileSourceConnector", source | {"connect.topicname": topic})
        sink = {"connector.class": "FileSinkConnector", "filename": str(dst)}
        self._post("fileSinkConnector", sink | {"connect.topicnames": topic})

    def failed(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"the sluice worker exited with {self.proc.returncode}"
        for name in ("fileSourceConnector", "fileSinkConnector"):
            status = self.worker.request("GET", f"/v1/connectors/{name}/status").json()
            if status["connector"]["state"] == "FAILED":
                return f"{name}: {status['connector'].get('trace', '')[:2000]}"
        return None


# -- one round ------------------------------------------------------------------------------------
def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def watch(peer: Peer, predicate, timeout: float = 3600, every: float = 0.05) -> float:
    """Wait for `predicate`, checking the peer's health once a second; the time it held."""
    deadline = time.monotonic() + timeout
    checked = time.monotonic()
    while not predicate():
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"{peer.name}: timed out")
        if now - checked > 1:
            checked = now
            reason = peer.failed()
            if reason:
                raise SystemExit(f"{peer.name} failed: {reason}")
        time.sleep(every)
    return time.perf_counter()


def trickle_lines(
    src: Path, dst: Path, seconds: float, every: float, failed: Callable[[], str | None], name: str
) -> list[tuple[float, float]]:
    """Append one stamped line to `src` every `every` s for `seconds`; `(written at, delay until
    it is in dst)` of each line, in order. `failed` (checked every second) ends the wait early
    with its reason."""
    count = int(seconds / every)
    seen: dict[int, tuple[float, float]] = {}

    def feed() -> None:
        start = time.monotonic()
        with open(src, "a", encoding="utf-8") as f:
            for i in range(count):
                # pace on the clock, not by sleeping a fixed time after each write
                time.sleep(max(0.0, start + i * every - time.monotonic()))
                f.write(f"trickle {i:06d} written at {time.time():.6f}\n")
                f.flush()

    feeder = threading.Thread(target=feed, daemon=True)
    offset, tail = size(dst), b""
    feeder.start()
    deadline = time.monotonic() + seconds + 120
    checked = time.monotonic()
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: {count - len(seen)} trickle lines never arrived")
        with open(dst, "rb") as f:
            f.seek(offset)
            chunk = f.read()
        now = time.time()
        offset += len(chunk)
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            if line.startswith(b"trickle "):
                written = float(line.split()[-1])
                seen[int(line.split()[1])] = (written, now - written)
        if time.monotonic() - checked > 1:
            checked = time.monotonic()
            reason = failed()
            if reason:
                raise SystemExit(f"{name} failed: {reason}")
        time.sleep(0.002)
    feeder.join()
    return [seen[i] for i in range(count)]


def trickle(src: Path, dst: Path, seconds: float, every: float, peer: Peer) -> list[float]:
    """Append one stamped line every `every` s; the delay of each until it is in `dst`."""
    return [delay for _, delay in trickle_lines(src, dst, seconds, every, peer.failed, peer.name)]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def create_topic(bootstrap: str, topic: str) -> None:
    """Create `topic` with one partition (the broker's `num.partitions`, what Kafka Connect's
    producer gets by auto-creation) and wait until its partition has a leader."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        spec = {TopicPartition(topic, 0): OffsetSpec.latest()}
        try:
            next(iter(admin.list_offsets(spec).values())).result(10)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def broker_pid() -> int | None:
    try:
        return int(BROKER_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None


def run(peer: Peer, input_file: Path, lines: int, args: argparse.Namespace) -> dict:
    src, dst = peer.work.parent / f"{peer.name}-in.txt", peer.work.parent / f"{peer.name}-out.txt"
    shutil.copyfile(input_file, src)  # the trickle appends to it
    dst.unlink(missing_ok=True)
    topic = f"peers-{peer.name}-{uuid.uuid4().hex[:8]}"
    if args.create_topic:
        create_topic(args.bootstrap, topic)
    boot_start = time.perf_counter()
    peer.start()
    boot = time.perf_counter() - boot_start
    sampler = MemorySampler(peer.proc.pid)
    sampler.start()
    broker = broker_pid()
    try:
        cpu0 = cpu_seconds(tree(peer.proc.pid))
        broker0 = cpu_seconds([broker]) if broker else 0.0
        total = size(src)
        start = time.perf_counter()
        peer.create(src, dst, topic)
        first = watch(peer, lambda: size(dst) > 0, every=0.01) - start
        end = watch(peer, lambda: size(dst) >= total) - start
        cpu = cpu_seconds(tree(peer.proc.pid)) - cpu0
        broker_cpu = cpu_seconds([broker]) - broker0 if broker else float("nan")
        identical = size(dst) == total and filecmp.cmp(src, dst, shallow=False)
        delays = trickle(src, dst, args.trickle_seconds, args.trickle_every, peer)
    finally:
        sampler.stop()
        peer.stop()
    return {
        "peer": peer.name,
        "boot": boot,
        "first": first,
        "end": end,
        "rate": lines / end,
        "identical": identical,
        "cpu": cpu,
        "broker_cpu": broker_cpu,
        "p50": percentile(delays, 50),
        "p99": percentile(delays, 99),
        "max": max(delays),
        "mean": statistics.fmean(delays),
        "pss": sampler.max_pss,
        "processes": sampler.processes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--trickle-seconds", type=float, default=30.0)
    parser.add_argument("--trickle-every", type=float, default=0.1, help="seconds between lines")
    parser.add_argument(
        "--peer", action="append", choices=("kafka-connect", "sluice", "kafka-connect-tuned")
    )
    parser.add_argument("--tuned-batch-size", default="20000", help="FileStreamSource batch.size")
    parser.add_argument("--tuned-converter", choices=sorted(CONVERTERS), default="string")
    parser.add_argument(
        "--bootstrap", help="a running broker; default: scripts/servers.sh up kafka, 127.0.0.1:9092"
    )
    parser.add_argument(
        "--no-create-topic",
        dest="create_topic",
        action="store_false",
        help="let the workers create their topic (sluice's connector fails on a fresh topic: "
        "NOT_LEADER_FOR_PARTITION)",
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "out"))
    args = parser.parse_args()
    peers = args.peer or ["kafka-connect", "sluice"]
    if args.bootstrap is None:
        subprocess.run([str(REPO / "scripts" / "servers.sh"), "up", "kafka"], check=True)
        args.bootstrap = "127.0.0.1:9092"
    subprocess.run(["bash", str(KAFKA_CONNECT), "jars"], check=True, stdout=subprocess.DEVNULL)
    out = Path(args.out).resolve() / "peers"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    input_file = Path(args.out).resolve() / f"input-{args.lines}.txt"
    make_file(str(input_file), args.lines)
    start_load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    results = []
    for name in peers:
        work = out / name
        if name == "sluice":
            peer: Peer = Sluice(name, work, args.bootstrap)
        elif name == "kafka-connect":
            peer = KafkaConnect(name, work, args.bootstrap, {}, "json")
        else:
            tuned = {"batch.size": args.tuned_batch_size}
            peer = KafkaConnect(name, work, args.bootstrap, tuned, args.tuned_converter)
        results.append(run(peer, input_file, args.lines, args))
        r = results[-1]
        print(f"{name}: {r['rate']:,.0f} lines/s, first line {r['first']:.2f} s", flush=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    mb = os.path.getsize(input_file) / 1e6
    print(
        f"\n{args.lines:,} lines ({mb:.0f} MB), trickle {args.trickle_seconds:g} s every "
        f"{args.trickle_every:g} s; {platform.machine()}, {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}; load average {start_load} at the start, "
        f"{load} at the end"
    )
    print(
        f"{'peer':<20} {'boot s':>7} {'first s':>8} {'end s':>7} {'lines/s':>10} "
        f"{'CPU s':>6} {'broker CPU s':>12} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'PSS MiB':>8} {'procs':>5}  same"
    )
    for r in results:
        print(
            f"{r['peer']:<20} {r['boot']:>7.1f} {r['first']:>8.2f} {r['end']:>7.1f} "
            f"{r['rate']:>10,.0f} {r['cpu']:>6.1f} {r['broker_cpu']:>12.1f} "
            f"{r['p50'] * 1e3:>7.0f} {r['p99'] * 1e3:>7.0f} {r['max'] * 1e3:>7.0f} "
            f"{r['pss'] / 2**20:>8.0f} {r['processes']:>5}  {r['identical']}"
        )
    if not all(r["identical"] for r in results):
        raise SystemExit("a sink file differs from its input")


if __name__ == "__main__":
    main()
