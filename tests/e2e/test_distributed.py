"""Distributed mode with real processes: 3 (then 4) workers sharing a PostgreSQL cluster store and
one storePathRootDir, 6 file pipelines (file source -> embedded topic -> file sink = 12
connectors) allocated by the consistent hash. Positions, schemas and counters are in the cluster
store.

One cluster for the whole module (tests run in file order and share it): allocation matches the
strategy, and the console's cluster page (in Chromium) shows it; kill -9 of a worker moves its
connectors with nothing lost or doubled (in the sinks and counted in the topics; the failover time
is reported, bench/failover.py measures it), one more rebalance in the survivor's metrics; only a
source's owner reports its lag; a 4th worker restarts only the connectors the ring moves to it; a
SIGSTOPped worker loses its leases, and after SIGCONT its late commits are refused and its queries
stopped; REST writes through any worker reach the owner; a push sink's live settings change through
its owner only (another worker answers 404 naming it and writes nothing); bad cluster configs fail
naming the key and a malformed store row crashes nothing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from sluice.bus.embedded.log import EmbeddedLog
from sluice.push import PushBoard
from sluice.runtime.allocation import consistent_hash
from tests.conftest import wait_until
from tests.e2e.browser import chromium, new_page, screenshot
from tests.e2e.dist_cluster import Cluster, running_cluster
from tests.e2e.test_ops_metrics import scrape, value
from tests.e2e.worker_process import REPO, DistWorker
from tests.integration.push_target import serve

# more than the default 300 s on a loaded 2-core machine: a cluster of 3-4 worker processes booted
# by the module's first test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PIPELINES = 6
VNODES = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("dist")
    with running_cluster(
        root, name="e2e", workers=3, pipelines=PIPELINES, virtual_nodes=VNODES
    ) as c:
        yield c


def test_allocation_follows_the_ring_and_every_worker_agrees(cluster: Cluster) -> None:
    expected = cluster.wait_allocated()
    names = sorted(cluster.names())
    for w in cluster.live():
        assert sorted(w.body("/connectors/list")) == names
        assert w.body("/getClusterInfo") == ["w1", "w2", "w3"]
        mine = sorted(n for n, owner in expected.items() if owner == w.worker_id)
        assert sorted(w.body("/allocated/connectors")) == mine
        tasks = w.body("/allocated/tasks")["runningTasks"]
        assert {t["workerId"] for t in tasks} <= {w.worker_id}
        assert sorted({t["connector"] for t in tasks}) == mine
    cluster.assert_exact()


def test_the_console_cluster_page_shows_every_worker_and_what_runs_there(
    cluster: Cluster,
) -> None:
    """The console's cluster page, in Chromium, on any worker: one row per live worker with the
    connectors the ring gave it (each a link to its page)."""
    from playwright.sync_api import expect

    expected = cluster.wait_allocated()
    first, *_ = cluster.live()
    with chromium() as browser:
        page = new_page(browser)
        page.goto(first.url + "/ui/#/cluster")
        expect(page.locator("#main")).to_contain_text("3 live workers (distributed mode)")
        rows = page.locator("#workers tbody tr")
        expect(rows).to_have_count(3)
        for w in cluster.live():
            mine = sorted(n for n, owner in expected.items() if owner == w.worker_id)
            row = rows.filter(has=page.locator("td:first-child", has_text=w.worker_id))
            expect(row.locator("td").nth(1)).to_have_text("live")
            expect(row.locator("td").nth(2)).to_have_text(str(len(mine)))
            expect(row.locator("td").nth(4).locator("a")).to_have_text(mine)
        screenshot(page, "13-cluster-of-three")


def test_kill_9_moves_its_connectors_and_loses_nothing(
    cluster: Cluster, record_property: Callable[[str, object], None]
) -> None:
    before = cluster.wait_allocated()
    victim = max(cluster.live(), key=lambda w: sum(1 for o in before.values() if o == w.worker_id))
    moved = sorted(n for n, o in before.items() if o == victim.worker_id)
    assert moved
    cluster.feed(200)
    survivor = next(w for w in cluster.live() if w is not victim)
    rebalanced = _rebalance(survivor)
    victim.kill9()
    killed = time.monotonic()

    def running_elsewhere() -> bool:
        seen = survivor.owners(moved)
        return all(s == "RUNNING" and o != victim.worker_id for s, o in seen.values())

    # The 15 s target is measured by bench/failover.py on a quiet machine; here the time is
    # reported (the junit XML's `failover_s` property), not asserted: the load decides it.
    wait_until(running_elsewhere, timeout=120, every=0.2, what=f"{moved} to move")
    took = time.monotonic() - killed
    record_property("failover_s", round(took, 1))
    print(
        f"\nkill -9 of {victim.worker_id}: {len(moved)} connectors RUNNING elsewhere "
        f"in {took:.1f} s"
    )
    assert sorted(survivor.body("/getClusterInfo")) == sorted(w.worker_id for w in cluster.live())
    # Kafka Connect's worker rebalance metrics: the leave was one more rebalance, done
    after = _rebalance(survivor)
    # (at least one: a worker starved past the session timeout on a loaded machine sees more)
    assert after["completed_rebalances_total"] >= rebalanced["completed_rebalances_total"] + 1
    assert after["epoch"] == after["completed_rebalances_total"] + after["rebalancing"]
    assert 0 <= after["time_since_last_rebalance_ms"] <= (time.monotonic() - killed) * 1000
    assert 0 < after["rebalance_avg_time_ms"] <= after["rebalance_max_time_ms"]
    cluster.feed(200)
    cluster.assert_exact()


def _rebalance(worker: DistWorker) -> dict[str, float]:
    """The worker's rebalance metrics, by their Prometheus names without `sluice_`."""
    samples = scrape(worker)
    names = (
        "completed_rebalances_total",
        "rebalancing",
        "epoch",
        "time_since_last_rebalance_ms",
        "rebalance_avg_time_ms",
        "rebalance_max_time_ms",
    )
    return {n: value(samples, f"sluice_{n}") for n in names}


def test_only_the_owner_probes_a_sources_lag(cluster: Cluster) -> None:
    owners = cluster.wait_allocated()
    sources = {n for n in cluster.names() if n.startswith("src-")}

    def lag_reported() -> dict[str, set[str]]:
        return {
            w.worker_id: {
                dict(labels)["connector"]
                for (name, labels) in scrape(w)
                if name == "sluice_source_lag_bytes"
            }
            for w in cluster.live()
        }

    def each_by_its_owner() -> bool:
        seen = lag_reported()
        return all(seen[w] == {n for n in sources if owners[n] == w} for w in seen)

    wait_until(each_by_its_owner, timeout=30, what="each source's lag from its owner only")
    assert sorted(n for ns in lag_reported().values() for n in ns) == sorted(sources)


def test_a_fourth_worker_restarts_only_what_the_ring_moves(cluster: Cluster) -> None:
    before = cluster.wait_allocated()
    starts_before = [w.starts() for w in cluster.workers.values()]
    w4 = cluster.new_worker("w4")
    cluster.workers["w4"] = w4
    w4.start()
    after = cluster.wait_allocated()
    predicted = {n for n in cluster.names() if before[n] != after[n]}
    assert all(after[n] == "w4" for n in predicted)
    starts_after = [w.starts() for w in cluster.workers.values() if w is not w4]
    restarted = {
        n
        for old, new in zip(starts_before, starts_after, strict=True)
        for n in new
        if new[n] > old.get(n, 0)
    } | set(w4.starts())
    print(f"\njoin of w4: restarted {sorted(restarted)}, ring predicted {sorted(predicted)}")
    assert restarted == predicted
    # each moved connector started once, on w4, and no survivor started any again: a worker
    # that counted as live while its Spark session was still starting (longer than the session
    # timeout) made them move to it, back when it looked dead, and to it again
    assert w4.starts() == dict.fromkeys(predicted, 1)
    assert starts_after == starts_before
    cluster.feed(100)
    cluster.assert_exact()


def test_a_stopped_worker_is_fenced_and_stops_its_queries(cluster: Cluster) -> None:
    before = cluster.wait_allocated()
    zombie = max(cluster.live(), key=lambda w: sum(1 for o in before.values() if o == w.worker_id))
    moved = sorted(n for n, o in before.items() if o == zombie.worker_id)
    others = [w for w in cluster.live() if w is not zombie]
    after = consistent_hash([w.worker_id for w in others], cluster.names(), VNODES)
    assert zombie.proc is not None
    os.killpg(zombie.proc.pid, signal.SIGSTOP)
    try:
        cluster.feed(300)  # data the zombie's queries will see when they wake up

        def taken_over() -> bool:
            seen = others[0].owners(moved)
            return all(seen[n] == ("RUNNING", after[n]) for n in moved)

        wait_until(taken_over, timeout=60, every=0.3, what=f"{moved} to move to {after}")
    finally:
        os.killpg(zombie.proc.pid, signal.SIGCONT)
    # Each moved query is stopped once, one way or the other: its herder saw the lease gone
    # first, or the query tried a late commit first, which was refused (and stopped it).
    pattern = re.compile(r"connector (\S+): (lease generation \d+ lost|a late commit)")

    def noticed() -> list[tuple[str, str]]:
        return [(m.group(1), m.group(2)) for m in pattern.finditer(zombie.log.read_text())]

    wait_until(
        lambda: {n for n, _ in noticed()} >= set(moved), timeout=60, what="the zombie to notice"
    )
    seen = noticed()
    lost = [n for n, how in seen if how.startswith("lease")]
    refused = [n for n, how in seen if how == "a late commit"]
    print(f"\nzombie {zombie.worker_id}: {len(moved)} queries stopped, {len(refused)} refused")
    assert sorted(lost + refused) == moved, seen  # each moved one once, nothing else
    # every refusal in the log (late commits, final positions of a stopped query) is of one of
    # those queries: nothing the zombie still owns was fenced
    fenced = re.findall(r"fenced: (?:writer|connector) '([^'/]+)", zombie.log.read_text())
    assert set(fenced) <= set(moved), (fenced, moved)
    cluster.feed(200)
    cluster.wait_allocated()  # it is live again: the ring gives it its connectors back
    cluster.assert_exact()


def test_rest_writes_through_any_worker_reach_the_owner(cluster: Cluster) -> None:
    owners = cluster.wait_allocated()
    live = cluster.live()
    name = "sink-0"
    owner = next(w for w in live if w.worker_id == owners[name])
    a = next(w for w in live if w is not owner)
    assert a.request("PUT", f"/v1/connectors/{name}/pause").status_code < 300
    wait_until(
        lambda: all(w.owners([name])[name] == ("PAUSED", owner.worker_id) for w in live),
        what="PAUSED everywhere",
    )
    assert name not in owner.body("/allocated/connectors")
    a.body(f"/connectors/{name}/resume")
    wait_until(lambda: owner.owners([name])[name] == ("RUNNING", owner.worker_id), what="resume")
    # a new connector created through A, stopped, offsets changed and deleted through A
    extra = cluster.data / "extra.txt"
    extra.write_text("".join(f"extra {n}\n" for n in range(50)))
    a.post_connector(
        "extra-src",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(extra),
            "connect.topicname": "topic-extra",
        },
    )
    live_ids = [w.worker_id for w in live]
    extra_owner_id = consistent_hash(live_ids, [*cluster.names(), "extra-src"], VNODES)["extra-src"]
    extra_owner = next(w for w in live if w.worker_id == extra_owner_id)
    asker = next(w for w in live if w is not extra_owner)
    wait_until(
        lambda: asker.owners(["extra-src"])["extra-src"] == ("RUNNING", extra_owner_id),
        what="extra-src RUNNING on its owner",
    )
    assert "extra-src" in extra_owner.body("/allocated/connectors")
    bus = EmbeddedLog(cluster.root / "shared" / "bus")
    wait_until(
        lambda: (
            bus.topic_exists("topic-extra")
            and sum(r.max_offset for r in bus.offsets("topic-extra").values()) == 50
        ),
        what="extra lines in the topic",
    )
    conflict = asker.request("PATCH", "/v1/connectors/extra-src/offsets", json={"offsets": []})
    assert conflict.status_code == 409, conflict.text  # running: must be stopped first
    assert asker.request("PUT", "/v1/connectors/extra-src/stop").status_code < 300
    wait_until(
        lambda: asker.owners(["extra-src"])["extra-src"][0] == "STOPPED", what="extra stopped"
    )
    offsets = asker.get("/v1/connectors/extra-src/offsets").json()["offsets"]
    assert offsets == extra_owner.get("/v1/connectors/extra-src/offsets").json()["offsets"]
    assert offsets, "the source committed a position"
    reset = [{"partition": o["partition"], "offset": None} for o in offsets]
    patched = asker.request("PATCH", "/v1/connectors/extra-src/offsets", json={"offsets": reset})
    assert patched.status_code == 200, patched.text
    assert extra_owner.get("/v1/connectors/extra-src/offsets").json()["offsets"] == []
    asker.body("/connectors/extra-src/resume")
    wait_until(  # from the beginning again: the 50 lines a second time
        lambda: sum(r.max_offset for r in bus.offsets("topic-extra").values()) == 100,
        what="the re-read after the offsets reset",
    )
    assert asker.request("DELETE", "/v1/connectors/extra-src").status_code < 300
    wait_until(
        lambda: "extra-src" not in extra_owner.body("/allocated/connectors"),
        what="the owner to stop the deleted connector",
    )
    for w in live:
        assert sorted(w.body("/connectors/list")) == sorted(cluster.names())


def test_push_settings_change_only_through_the_owner(cluster: Cluster) -> None:
    """A push sink's live settings live on the board its owner's tasks read: a worker that does
    not run the connector answers 404 naming the owner (as `GET …/push` does) and writes
    nothing; the owner applies the change."""
    live = cluster.live()
    name = "push-0"
    owner_id = consistent_hash([w.worker_id for w in live], [*cluster.names(), name], VNODES)[name]
    owner = next(w for w in live if w.worker_id == owner_id)
    other = next(w for w in live if w is not owner)
    target, server, thread = serve()
    try:
        other.post_connector(
            name,
            {
                "connector.class": "HttpSinkConnector",
                "connect.topicnames": "topic-0",
                "url": target.url + "/p",
            },
        )
        wait_until(
            lambda: (
                other.owners([name])[name] == ("RUNNING", owner_id)
                and name in owner.body("/allocated/connectors")
            ),
            what="the push sink RUNNING on its owner",
        )
        # the workers share storePathRootDir here, so a write on any of them lands on this board
        board = PushBoard(str(cluster.root / "shared" / "push.sqlite"))
        for method, path, kwargs in (
            ("PATCH", f"/v1/connectors/{name}/push", {"json": {"concurrency": 3}}),
            ("POST", f"/v1/connectors/{name}/task/adjust", {"params": {"maxThreadSize": 3}}),
        ):
            r = other.request(method, path, **kwargs)
            assert r.status_code == 404, r.text
            assert owner_id in r.json()["message"], r.text
            assert board.settings(name) == {}, f"{path} through a non-owner wrote settings"
        assert owner.get(f"/v1/connectors/{name}/push").json()["settings"] == {}
        r = owner.request("PATCH", f"/v1/connectors/{name}/push", json={"concurrency": 3})
        assert r.status_code == 200, r.text
        assert r.json()["settings"] == {"concurrency": 3}
        assert board.settings(name) == {"concurrency": 3}
    finally:
        # before the target goes: a push sink left running against a dead target is slow to stop
        assert other.request("DELETE", f"/v1/connectors/{name}").status_code < 300
        wait_until(
            lambda: name not in owner.body("/allocated/connectors"),
            what="the owner to stop the deleted push sink",
        )
        server.should_exit = True
        thread.join(timeout=10)


def _run_worker_expecting_error(cluster: Cluster, worker_id: str, **extra: str) -> str:
    w = cluster.new_worker(worker_id, **extra)
    w.tmp.mkdir(parents=True, exist_ok=True)
    w.write_conf()
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "worker", "-c", str(w.conf)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return done.stderr


def test_bad_cluster_configs_are_refused_naming_the_key(cluster: Cluster) -> None:
    taken = cluster.live()[0].worker_id
    err = _run_worker_expecting_error(cluster, taken)
    assert f"workerId: {taken!r} is already used by a live worker" in err
    err = _run_worker_expecting_error(cluster, "w9", **{"cluster.name": "other"})
    assert "cluster.name: the cluster store belongs to cluster 'e2e'" in err
    err = _run_worker_expecting_error(cluster, "w9", storePathRootDir=str(cluster.root / "x"))
    assert "storePathRootDir:" in err and "shared" in err
    # the cluster's path, but not its shared directory (a local disk of another host): the
    # marker the first worker left there is missing
    marker = cluster.root / "shared" / ".sluice-cluster"
    marker.rename(marker.with_suffix(".away"))
    try:
        err = _run_worker_expecting_error(cluster, "w9")
    finally:
        marker.unlink()  # the refused worker left its own
        marker.with_suffix(".away").rename(marker)
    assert "storePathRootDir: " in err and "is not the cluster's shared directory" in err
    err = _run_worker_expecting_error(
        cluster, "w9", **{"cluster.store.url": "postgresql://postgres@127.0.0.1:1/nope"}
    )
    assert "cluster.store.url: cannot open the cluster store" in err
    # a malformed row: logged by every worker, none crashes, the rest goes on
    with psycopg.connect(cluster.db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sluice_connectors(name, config, target_state, task_configs, updated_at)"
            " VALUES ('broken', '{not json', 'STARTED', '[]', 0)"
        )
    try:
        for w in cluster.live():
            wait_until(
                lambda w=w: "connector row 'broken' is malformed" in w.log.read_text(),
                what=f"{w.worker_id} to report the malformed row",
            )
            assert w.get("/getClusterInfo").status_code == 200
        assert all(w.proc is not None and w.proc.poll() is None for w in cluster.live())
    finally:
        with psycopg.connect(cluster.db_url, autocommit=True) as conn:
            conn.execute("DELETE FROM sluice_connectors WHERE name = 'broken'")
    cluster.wait_allocated()
