"""Distributed mode on the Kafka bus with real processes: 2 workers sharing a PostgreSQL cluster
store, 2 file pipelines (file source -> Kafka topic -> file sink = 4 connectors).

kill -9 of a worker moves its connectors to the other; every sink ends byte-identical to its
source and each line is in its Kafka topic exactly once (counted as a read_committed consumer).
The zombie case of this bus (a worker paused past its lease whose producer and commits must be
refused) is covered at the bus level in tests/integration/test_bus_kafka.py and the contract
test; test_distributed.py covers the rest of distributed mode on the embedded bus.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import wait_until
from tests.e2e.dist_cluster import Cluster
from tests.servers import ensure

pytestmark = pytest.mark.slow

PG = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ensure("postgres")
    bootstraps = ensure("kafka")
    run = uuid.uuid4().hex[:8]
    db = f"sluice_distk_{run}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    root = tmp_path_factory.mktemp("distk")
    data = root / "data"
    data.mkdir()
    shared = {
        "cluster.store.url": f"{PG}/{db}",
        "cluster.name": "e2e-kafka",
        "storePathRootDir": str(root / "shared"),
        "bus": "kafka",
        "bootstrap.servers": bootstraps,
        "bus.default.queues": "2",
        "allocTaskStrategy": "consistent-hash",
        "virtualNode": "8",
        "rocketmq.runtime.cluster.rebalance.waitInterval": "500",
        "cluster.session.timeout.ms": "3000",
    }
    # the broker outlives the run: topics of this run get names of their own
    c = Cluster(root, f"{PG}/{db}", shared, {}, data, 2, 8, topic_prefix=f"dk-{run}-")
    for wid in ("w1", "w2"):
        c.workers[wid] = c.new_worker(wid)
    try:
        threads = [threading.Thread(target=w.start) for w in c.workers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(c.live()) == 2, "a worker did not boot"
        for i in range(c.pipelines):
            (data / f"in-{i}.txt").write_text("")
        c.feed(300)
        c.create_pipelines(c.workers["w1"])
        yield c
    finally:
        running = c.live()
        for w in running:
            assert w.proc is not None
            os.killpg(w.proc.pid, signal.SIGCONT)
            w.proc.send_signal(signal.SIGTERM)
        for w in running:
            w.terminate(60)
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def test_kill_9_on_the_kafka_bus_moves_the_connectors_and_loses_nothing(cluster: Cluster) -> None:
    before = cluster.wait_allocated(timeout=180)
    cluster.assert_exact()
    victim = max(cluster.live(), key=lambda w: sum(1 for o in before.values() if o == w.worker_id))
    moved = sorted(n for n, o in before.items() if o == victim.worker_id)
    assert moved
    cluster.feed(200)  # partly published by the victim, the rest by the survivor
    victim.kill9()
    killed = time.monotonic()
    survivor = cluster.live()[0]

    def running_elsewhere() -> bool:
        seen = survivor.owners(moved)
        return all(s == "RUNNING" and o == survivor.worker_id for s, o in seen.values())

    wait_until(running_elsewhere, timeout=90, every=0.2, what=f"{moved} to move")
    took = time.monotonic() - killed
    print(f"\nkafka bus, kill -9: {len(moved)} connectors RUNNING elsewhere in {took:.1f} s")
    assert took <= 40, f"failover took {took:.1f} s"  # the figure itself: bench/failover.py
    assert survivor.body("/getClusterInfo") == [survivor.worker_id]
    cluster.feed(200)
    cluster.assert_exact()
