"""Distributed mode with its cluster store away for 20 s: two worker processes reach PostgreSQL
through a tcp_proxy, which the test cuts and restores (the shared server stays up).

A file pipeline runs, plus one whose sink's query dies inside the outage (a trip wire). While
the store is away no worker says RUNNING for that sink; once it answers, nothing has moved (every
heartbeat went stale with the outage: the workers live before it still count for one session),
the sink is running again under the lease it held, its status says so, and every copy is exact,
each line once in its topic. Today's code forgot the dead query: RUNNING for good, nothing copied.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.dist_cluster import Cluster, running_cluster, topic_values
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.trip_sink import PLUGIN
from tests.servers import ensure

pytestmark = pytest.mark.slow

OUTAGE_S = 20.0
TRIP = ("src-trip", "sink-trip")


@pytest.fixture(scope="module")
def proxy() -> Iterator[TcpProxy]:
    ensure("postgres")
    p = TcpProxy(("127.0.0.1", 5432))
    yield p
    p.cut()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, proxy: TcpProxy) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("dist-outage")
    plugins = root / "plugins"
    plugins.mkdir()
    (plugins / "tripping_sink.py").write_text(PLUGIN)
    with running_cluster(
        root,
        name="outage",
        workers=2,
        pipelines=1,
        virtual_nodes=8,
        extra={"pluginPaths": str(plugins)},
        store_port=proxy.port,
        boot_timeout=600,  # two JVMs booting at once
    ) as c:
        yield c


def _feed(path: Path, first: int, last: int) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(f"trip {n:05d}\n" for n in range(first, last))


def _state(cluster: Cluster, name: str) -> set[str]:
    """The states the live workers answer for `name`; `error` for a worker that cannot."""
    seen = set()
    for w in cluster.live():
        try:
            response = w.request("GET", f"/v1/connectors/{name}/status")
        except httpx.HTTPError:
            seen.add("error")
            continue
        ok = response.status_code == 200
        seen.add(response.json()["connector"]["state"] if ok else "error")
    return seen


def test_a_store_outage_restarts_the_query_that_died_and_moves_nothing(
    cluster: Cluster, proxy: TcpProxy
) -> None:
    data = cluster.data
    src, out, trip = data / "in-trip.txt", data / "out-trip.txt", data / "trip"
    _feed(src, 0, 200)
    via = cluster.workers["w1"]
    via.post_connector(
        TRIP[0],
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "topic-trip",
        },
    )
    via.post_connector(
        TRIP[1],
        {
            "connector.class": "TrippingFileSink",
            "filename": str(out),
            "connect.topicnames": "topic-trip",
            "trip.file": str(trip),
        },
    )
    before = cluster.wait_allocated()
    wait_until(
        lambda: {s for s, _ in via.owners(list(TRIP)).values()} == {"RUNNING"},
        120,
        "the trip pipeline RUNNING",
    )
    wait_until(lambda: out.exists() and out.read_bytes() == src.read_bytes(), 120, "the trip copy")
    names = [*cluster.names(), *TRIP]
    owners = via.owners(names)
    sink_owner = cluster.workers[owners[TRIP[1]][1]]
    starts = sink_owner.starts().get(TRIP[1], 0)
    marks = {w.worker_id: len(w.log.read_text()) for w in cluster.live()}

    # The sink's query dies as the outage begins: its trip fires on the batch of the lines fed
    # now (a source cannot publish while the store is away: its positions live there), and the
    # store goes away right after, so its restart (1 s later) meets the outage.
    trip.touch()
    _feed(src, 200, 400)
    wait_until(lambda: trip.with_name("trip.tripped").exists(), 120, "the sink's query to die")
    proxy.cut()
    cut = time.monotonic()
    try:
        cluster.feed(100)

        def outage_over() -> bool:
            # nobody may say RUNNING for the dead query (the store does not answer: no one can)
            assert "RUNNING" not in _state(cluster, TRIP[1])
            return time.monotonic() - cut >= OUTAGE_S

        wait_until(outage_over, OUTAGE_S + 60, "the end of the outage", every=1.0)
    finally:
        proxy.restore()

    after = cluster.wait_allocated()
    assert after == before, "a connector moved because of the outage"
    wait_until(
        lambda: {s for s, _ in via.owners(list(TRIP)).values()} == {"RUNNING"}, 120, "RUNNING"
    )
    assert via.owners(names) == owners, "a connector moved because of the outage"
    wait_until(lambda: out.read_bytes() == src.read_bytes(), 120, "the trip copy to catch up")
    assert sink_owner.starts().get(TRIP[1], 0) > starts, "the dead query was not started again"
    values = topic_values(cluster.shared, "topic-trip")
    assert len(values) == 400 and len(set(values)) == 400
    cluster.assert_exact()
    lost = re.compile(r"lease generation \d+ lost|moved to")
    for w in cluster.live():
        assert not lost.search(w.log.read_text()[marks[w.worker_id] :]), w.worker_id
