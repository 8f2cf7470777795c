"""A distributed cluster of real worker processes for the e2e tests and bench/failover.py: the
workers, their file pipelines (file -> topic -> file) and the exactly-once check, whatever the
bus (embedded on the shared store root, or Kafka)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from sluice.bus.embedded.log import EmbeddedLog
from sluice.runtime.allocation import consistent_hash
from tests.conftest import wait_until
from tests.e2e.worker_process import DistWorker
from tests.servers import ensure

PG = "postgresql://postgres@127.0.0.1:5432"


def topic_values(shared: dict[str, str], topic: str) -> list[bytes]:
    """Every value in ``topic`` on the bus the workers' ``shared`` keys name (Kafka: as a
    read_committed consumer sees it), so a test counts records in the topic itself."""
    if shared.get("bus", "embedded") == "kafka":
        from tests.integration.bus_helpers import RealKafka

        return RealKafka(shared["bootstrap.servers"]).committed_values(topic)
    log = EmbeddedLog(Path(shared["storePathRootDir"]) / "bus")
    if not log.topic_exists(topic):
        return []
    return [
        value
        for q, rng in log.offsets(topic).items()
        for _, batch in log.read(topic, q, rng.min_offset, rng.max_offset)
        for value in batch.column("value").to_pylist()
    ]


@dataclass
class Cluster:
    """Workers sharing one cluster store and store root; `pipelines` file pipelines fed with
    unique lines, their topics named `<topic_prefix><i>`."""

    root: Path
    db_url: str
    shared: dict[str, str]
    workers: dict[str, DistWorker]
    data: Path
    pipelines: int
    virtual_nodes: int
    topic_prefix: str = "topic-"
    lines: dict[int, int] = field(default_factory=dict)

    def new_worker(self, worker_id: str, **extra: str) -> DistWorker:
        return DistWorker(
            self.root / worker_id, worker_id=worker_id, shared=self.shared, extra_conf=extra
        )

    def live(self) -> list[DistWorker]:
        return [w for w in self.workers.values() if w.proc is not None and w.proc.poll() is None]

    def names(self) -> list[str]:
        return [f"{kind}-{i}" for i in range(self.pipelines) for kind in ("src", "sink")]

    def create_pipelines(self, via: DistWorker) -> None:
        for i in range(self.pipelines):
            via.file_pipeline(self.data, i, topic=f"{self.topic_prefix}{i}")

    def feed(self, count: int) -> None:
        """Append `count` lines to every pipeline's input file."""
        for i in range(self.pipelines):
            start = self.lines.get(i, 0)
            with open(self.data / f"in-{i}.txt", "a", encoding="utf-8") as f:
                for n in range(start, start + count):
                    f.write(f"{i}:{n:07d} ünïcödé {'y' * (n % 40)}\n")
            self.lines[i] = start + count

    def assert_exact(self, timeout: float = 120) -> None:
        """Every sink byte-identical to its source; every topic holds each line exactly once."""
        for i in range(self.pipelines):
            src, dst = self.data / f"in-{i}.txt", self.data / f"out-{i}.txt"
            wait_until(
                lambda s=src, d=dst: d.exists() and d.stat().st_size >= s.stat().st_size,
                timeout=timeout,
                what=f"sink {i} to catch up",
            )
            assert dst.read_bytes() == src.read_bytes(), f"pipeline {i}: sink differs"
            values = topic_values(self.shared, f"{self.topic_prefix}{i}")
            assert len(values) == self.lines[i], f"topic {i}: {len(values)} != {self.lines[i]}"
            assert len(set(values)) == len(values), f"topic {i}: a line is there twice"

    def wait_allocated(self, timeout: float = 120) -> dict[str, str]:
        """Wait until every connector is RUNNING on the worker the ring predicts; return it."""
        live = self.live()
        expected = consistent_hash([w.worker_id for w in live], self.names(), self.virtual_nodes)
        asker = live[0]

        def settled() -> bool:
            seen = asker.owners(self.names())
            return all(seen[n] == ("RUNNING", expected[n]) for n in self.names())

        wait_until(settled, timeout=timeout, every=0.3, what=f"allocation {expected}")
        return expected


@contextlib.contextmanager
def running_cluster(
    root: Path,
    *,
    name: str,
    workers: int,
    pipelines: int,
    virtual_nodes: int,
    extra: dict[str, str] | None = None,
    topic_prefix: str = "topic-",
    store_port: int = 5432,
    boot_timeout: float = 180,
) -> Iterator[Cluster]:
    """`workers` distributed workers on a fresh PostgreSQL database (consistent hash, 500 ms
    rounds, 3 s session timeout, plus `extra` keys), started together (their Spark sessions boot
    in parallel), with `pipelines` file pipelines of 300 lines each created through the first;
    at the end every worker is stopped and the database dropped. The workers reach the store on
    `store_port` (a tcp_proxy's, to cut it), the test on the server's own."""
    ensure("postgres")
    db = f"sluice_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    data = root / "data"
    data.mkdir()
    shared = {
        "cluster.store.url": f"{PG.rsplit(':', 1)[0]}:{store_port}/{db}",
        "cluster.name": name,
        "storePathRootDir": str(root / "shared"),
        "allocTaskStrategy": "org.apache.rocketmq.connect.runtime.service.strategy."
        "AllocateConnAndTaskStrategyByConsistentHash",
        "virtualNode": str(virtual_nodes),
        "rocketmq.runtime.cluster.rebalance.waitInterval": "500",
        "cluster.session.timeout.ms": "3000",
        **(extra or {}),
    }
    c = Cluster(
        root, f"{PG}/{db}", shared, {}, data, pipelines, virtual_nodes, topic_prefix=topic_prefix
    )
    for i in range(1, workers + 1):
        c.workers[f"w{i}"] = c.new_worker(f"w{i}")
        c.workers[f"w{i}"].boot_timeout = boot_timeout
    try:
        threads = [threading.Thread(target=w.start) for w in c.workers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(c.live()) == workers, "a worker did not boot"
        for i in range(pipelines):
            (data / f"in-{i}.txt").write_text("")
        c.feed(300)
        c.create_pipelines(c.workers["w1"])
        yield c
    finally:
        running = c.live()
        for w in running:  # all at once: each stops its queries gracefully
            assert w.proc is not None
            os.killpg(w.proc.pid, signal.SIGCONT)
            w.proc.send_signal(signal.SIGTERM)
        for w in running:
            w.terminate(60)
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
