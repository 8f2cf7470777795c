"""A distributed cluster of real worker processes for the e2e tests and bench/failover.py: the
workers, their file pipelines (file -> topic -> file) and the exactly-once check, whatever the
bus (embedded on the shared store root, or Kafka)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sluice.bus.embedded.log import EmbeddedLog
from sluice.runtime.allocation import consistent_hash
from tests.conftest import wait_until
from tests.e2e.worker_process import DistWorker


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
