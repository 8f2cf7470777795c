"""The stalled-target scenario of the push runtime, shared by the e2e test (small) and
`bench/push_stall.py` (1M records, 60 s): a backlog waits in a topic while the HTTP target hangs
every request; the worker's memory must stay bounded; when the target returns, every record
arrives.

Memory is sampled as the proportional set size of the worker's Python processes (the REST process
and Spark's Python workers, where the push tasks run), each sample summed over the process tree,
and separately the JVM's. The bound the runtime promises (docs/http.md) is per task: one micro-batch
(`read.max.rows` records) plus what is queued and in flight — independent of the backlog.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess
from tests.integration.push_target import Target


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _pss(pid: int) -> tuple[str, int]:
    """(command name, proportional set size in bytes) of one process; ("", 0) once it is gone.

    PSS, not RSS: Spark forks its Python workers from one daemon, and summing their RSS would
    count the pages they share once per process."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            name = f.read().strip()
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return name, int(line.split()[1]) * 1024
    except OSError:
        pass
    return "", 0


@dataclass
class MemorySampler:
    """Samples the worker's process tree every `every` s in a thread: peak Python and JVM RSS."""

    root: int
    every: float = 0.5
    python_peak: int = 0
    java_peak: int = 0
    samples: int = 0
    #: MiB of each Python process at the Python peak, largest first
    peak_detail: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> tuple[int, int]:
        python = java = 0
        detail = []
        for pid in _tree(self.root):
            name, rss = _pss(pid)
            if name == "java":
                java += rss
            elif name.startswith("python"):
                python += rss
                detail.append(rss >> 20)
        if python > self.python_peak:
            self.peak_detail = sorted(detail, reverse=True)
        return python, java

    def start(self) -> MemorySampler:
        def run() -> None:
            while not self._stop.wait(self.every):
                python, java = self.sample()
                self.python_peak = max(self.python_peak, python)
                self.java_peak = max(self.java_peak, java)
                self.samples += 1

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass
class StallResult:
    records: int
    backlog_bytes: int
    stall_s: float
    python_before: int
    python_peak: int
    java_before: int
    java_peak: int
    parked: int
    recover_s: float
    delivered: set[str]
    peak_detail: list[int]

    def describe(self) -> str:
        mb = 1 << 20
        return (
            f"{self.records:,} records ({self.backlog_bytes / mb:.0f} MiB) waited while the target "
            f"hung {self.stall_s:.0f} s: Python PSS {self.python_before / mb:.0f} → peak "
            f"{self.python_peak / mb:.0f} MiB, JVM {self.java_before / mb:.0f} → peak "
            f"{self.java_peak / mb:.0f} MiB; {self.parked:,} parked; every record delivered "
            f"{self.recover_s:.0f} s after the target returned (Python processes at the peak, MiB: "
            f"{self.peak_detail})"
        )


def _delivered(target: Target, prefix: str) -> set[str]:
    values: set[str] = set()
    for received in target.ok(prefix):
        values.update(json.loads(received.body))
    return values


def run_stall(
    worker: WorkerProcess,
    target: Target,
    tmp: Path,
    *,
    name: str,
    records: int,
    value_bytes: int,
    stall_s: float,
    read_max_rows: int = 5000,
    batch: int = 500,
    recover_timeout_s: float = 600,
) -> StallResult:
    """Fill topic `name` with `records` lines of ~`value_bytes`, push them to a target that hangs
    for `stall_s` seconds (then answers at once), and return what memory and delivery did."""
    pad = "x" * max(0, value_bytes - 12)
    source = tmp / f"{name}.txt"
    with open(source, "w", encoding="utf-8") as f:
        for i in range(records):
            f.write(f"{i:010d}{pad}\n")
    r = worker.request(
        "POST",
        "/v1/connectors",
        json={
            "name": f"src-{name}",
            "config": {
                "connector.class": "FileSourceConnector",
                "filename": str(source),
                "connect.topicname": name,
            },
        },
    )
    assert r.status_code == 201, r.text

    def in_topic() -> int:
        queues = worker.get(f"/v1/topics/{name}").json().get("queues", [])
        return sum(q["max_offset"] - q["min_offset"] for q in queues)

    wait_until(lambda: in_topic() == records, 300, f"{records} records in topic {name}")
    sampler = MemorySampler(worker.proc.pid)  # type: ignore[union-attr]
    python_before, java_before = sampler.sample()
    target.behaviour[name] = {"hang": 3600}
    config = {
        "connector.class": "HttpSinkConnector",
        "connect.topicnames": name,
        "url": f"{target.url}/{name}",
        "batch.max.records": str(batch),
        "timeout.ms": "1000",
        "push.flush.max.ms": "2000",
        "read.max.rows": str(read_max_rows),
        "retry.backoff.initial.ms": "200",
        "retry.backoff.max.ms": "1000",
        "retry.max.age.ms": "3600000",
        "retry.max.attempts": "100000",
    }
    r = worker.request("POST", "/v1/connectors", json={"name": name, "config": {**config}})
    assert r.status_code == 201, r.text
    sampler.start()
    stalled_at = time.monotonic()
    wait_until(lambda: len(target.arrived(name)) > 0, 120, "the first request to the hung target")
    wait_until(
        lambda: time.monotonic() - stalled_at >= stall_s, stall_s + 5, "the stall", every=0.2
    )
    assert not target.ok(name), "the hung target answered"
    target.behaviour[name] = {}  # the target is back: new requests are answered at once
    back_at = time.monotonic()
    wait_until(
        lambda: len(_delivered(target, name)) == records,
        recover_timeout_s,
        "every record after the target returned",
        every=1.0,
    )
    recover_s = time.monotonic() - back_at
    sampler.stop()
    parked = worker.get(f"/v1/connectors/{name}/push").json()["totals"].get("parked", 0)
    return StallResult(
        records=records,
        backlog_bytes=records * value_bytes,
        stall_s=stall_s,
        python_before=python_before,
        python_peak=sampler.python_peak,
        java_before=java_before,
        java_peak=sampler.java_peak,
        parked=parked,
        recover_s=recover_s,
        delivered=_delivered(target, name),
        peak_detail=sampler.peak_detail,
    )
