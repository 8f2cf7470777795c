"""The PostgreSQL cluster store (distributed mode) against a real server: identity checks,
membership, and the lease rules that fencing relies on (a takeover always bumps the generation;
a live holder keeps its lease; a released lease is taken with a newer generation)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException
from sluice.store.cluster import ClusterStore
from tests.servers import ensure

PG = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A fresh database and the shared root its cluster is bound to."""
    ensure("postgres")
    db = f"sluice_cs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        yield f"{PG}/{db}", tmp_path_factory.mktemp("shared")
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _config(url: str, root: Path, worker: str, **extra: str) -> WorkerConfig:
    props = {
        "workerId": worker,
        "cluster.store.url": url,
        "cluster.name": "it",
        "storePathRootDir": str(root),
        **extra,
    }
    return WorkerConfig.from_properties(props)


def test_identity_membership_and_leases(cluster: tuple[str, Path]) -> None:
    db_url, tmp_path = cluster
    a = ClusterStore.open(_config(db_url, tmp_path, "a"))
    b = ClusterStore.open(_config(db_url, tmp_path, "b"))
    with pytest.raises(ConfigException, match=r"cluster\.name: the cluster store belongs to"):
        ClusterStore.open(_config(db_url, tmp_path, "c", **{"cluster.name": "other"}))
    with pytest.raises(ConfigException, match=r"storePathRootDir: .* differs"):
        ClusterStore.open(_config(db_url, tmp_path / "elsewhere", "c"))

    # the same path, but not the shared directory (another host's local disk)
    marker = tmp_path / ".sluice-cluster"
    token = marker.read_text()
    marker.unlink()
    with pytest.raises(ConfigException, match=r"storePathRootDir: .* is not the cluster's shared"):
        ClusterStore.open(_config(db_url, tmp_path, "c"))
    marker.write_text(token)

    a.join("a", "http://a", 6000)
    b.join("b", "http://b", 6000)
    again = ClusterStore.open(_config(db_url, tmp_path, "a"))
    with pytest.raises(ConfigException, match="workerId: 'a' is already used by a live worker"):
        again.join("a", "http://a2", 6000)
    assert a.heartbeat("a") and not again.heartbeat("a")  # only the session that joined
    assert a.live_workers(6000) == {"a": "http://a", "b": "http://b"}

    live = {"a", "b"}
    assert a.acquire("c1", "a", live) == 1
    assert a.acquire("c1", "a", live) == 1  # held: same generation
    assert b.acquire("c1", "b", live) is None  # a live holder keeps it
    assert a.holds("c1", 1) and not b.holds("c1", 1)
    assert b.acquire("c1", "b", {"b"}) == 2  # holder dead: taken, generation bumped
    assert not a.holds("c1", 1)
    a.release("c1", 1)  # a stale release changes nothing
    assert b.holds("c1", 2)
    b.release("c1", 2)
    assert a.acquire("c1", "a", live) == 3  # released: taken with a newer generation
    assert a.leases()["c1"].worker_id == "a"

    b.leave("b")
    assert set(a.live_workers(6000)) == {"a"}
    for store in (a, b, again):
        store.close()


def test_malformed_rows_are_skipped_and_logged_once(
    cluster: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    db_url, tmp_path = cluster
    store = ClusterStore.open(_config(db_url, tmp_path, "m"))
    store.configs.put("good", {"connector.class": "X"})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sluice_connectors(name, config, target_state, task_configs, updated_at)"
            " VALUES ('bad', '{not json', 'STARTED', '[]', 1), "
            "('odd', '{}', 'SLEEPING', '[]', 1)"
        )
    assert [c.name for c in store.configs.all()] == ["good"]
    assert [c.name for c in store.configs.all()] == ["good"]
    assert store.configs.get("bad") is None
    messages = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(messages) == 2, messages  # once per row, not once per read
    assert any("'odd'" in m and "SLEEPING" in m for m in messages)
    store.close()


def test_statuses_of_every_connector_in_one_read(cluster: tuple[str, Path]) -> None:
    db_url, tmp_path = cluster
    store = ClusterStore.open(_config(db_url, tmp_path, "s"))
    try:
        store.statuses.put("st-x", "RUNNING", "s", tasks=2)
        store.statuses.put("st-y", "FAILED", "s", trace="Boom", tasks=1)
        every = store.statuses.all()
        assert {k: v for k, v in every.items() if k.startswith("st-")} == {
            "st-x": store.statuses.get("st-x"),
            "st-y": store.statuses.get("st-y"),
        }
        own, tasks = every["st-x"]
        assert own is not None and own.state == "RUNNING" and [t.task for t in tasks] == [0, 1]
    finally:
        store.close()
