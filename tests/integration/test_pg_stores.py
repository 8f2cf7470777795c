"""The stores of distributed mode in PostgreSQL against a real server, beside their SQLite twins:
positions with fences, counters, the schema registry and the broker buses' commit journal.

Each behaviour is checked on both backends (one interface, two backends); then what only the
PostgreSQL ones must show: a fence committed while a fenced save waits on the fence row's lock
refuses that save (the check and the write are one transaction), the stores pickle into other
processes (spawned and forked after use), and counters added by several processes at once sum
exactly.
"""

from __future__ import annotations

import multiprocessing
import pickle
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sluice.bus._external import CommitJournal
from sluice.bus.base import WriterFenced
from sluice.runtime.stores import WorkerStores
from sluice.store.positions import Fenced, FencedPositions
from tests.conftest import wait_until
from tests.servers import ensure

PG = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A fresh database with the stores' tables."""
    ensure("postgres")
    db = f"sluice_st_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        WorkerStores.postgres(f"{PG}/{db}")
        yield f"{PG}/{db}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> WorkerStores:
    if request.param == "sqlite":
        return WorkerStores.sqlite(tmp_path)
    stores = WorkerStores.postgres(request.getfixturevalue("pg_url"))
    return stores


@pytest.fixture
def journal(stores: WorkerStores, tmp_path: Path) -> Any:
    return stores.journal or CommitJournal(str(tmp_path / "bus" / "writes.sqlite"))


def _name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is shared by the module


def test_positions_and_fences(stores: WorkerStores) -> None:
    store, c, d = stores.positions, _name(), _name()
    store.save(c, {"p0": {"offset": 1}, "p1": {"offset": 2}})
    store.save(d, {"q": {"queueOffset": 7}})
    assert store.load(c) == {"p0": {"offset": 1}, "p1": {"offset": 2}}
    assert {c: store.load(c), d: store.load(d)}.items() <= store.load_all().items()
    store.remove(c, ["p1"])
    assert store.load(c) == {"p0": {"offset": 1}}
    store.replace(d, {"q2": {"queueOffset": 1}})
    assert store.load(d) == {"q2": {"queueOffset": 1}}

    old = FencedPositions(store, 1)
    store.fence(c, 1)
    old.save(c, {"p0": {"offset": 3}})
    old.check(c)
    store.fence(c, 2)  # another worker took the lease
    with pytest.raises(Fenced, match="generation 1 may no longer commit positions"):
        old.save(c, {"p0": {"offset": 99}})
    with pytest.raises(Fenced, match="sink batch 7"):
        old.check(c, "sink batch 7")
    assert store.load(c) == {"p0": {"offset": 3}}  # the refused save changed nothing
    store.fence(c, 1)  # fencing never goes back
    FencedPositions(store, 2).save(c, {"p0": {"offset": 4}})
    store.delete(c)
    assert store.load(c) == {}


def test_counters(stores: WorkerStores) -> None:
    counters, a, b = stores.counters, _name(), _name()
    counters.add(a, {"records-total": 3, "zero": 0})
    counters.add(a, {"records-total": 2, "batches-total": 1})
    counters.add(b, {"total-retries": 1})
    counters.add(b, {})
    assert counters.get(a) == {"records-total": 5, "batches-total": 1}
    assert {a: counters.get(a), b: {"total-retries": 1}}.items() <= counters.all().items()


def test_retry_notes(stores: WorkerStores) -> None:
    counters, a, b = stores.counters, _name(), _name()
    note = {"since_ms": 1_000, "attempts": 1, "error": "refused", "until_ms": 10_000}
    counters.note_retrying(a, 0, note, retries=1)
    counters.note_retrying(a, 0, {**note, "attempts": 3, "error": "still refused"}, retries=2)
    counters.note_retrying(a, 1, {**note, "until_ms": 2_000})
    counters.note_retrying(b, 0, note)
    notes = counters.retrying(5_000)
    assert notes[a] == {0: {"since_ms": 1_000, "attempts": 3, "error": "still refused"}}
    assert 1 not in notes[a]  # its writer went quiet: expired
    assert counters.get(a) == {"total-retries": 3}
    counters.clear_retrying(a, 0, retries=1)
    assert a not in counters.retrying(5_000) and b in counters.retrying(5_000)
    counters.clear_retrying(b)
    assert b not in counters.retrying(0)
    assert counters.get(a) == {"total-retries": 4}


def test_schema_registry(stores: WorkerStores) -> None:
    registry, subject = stores.schemas, f"{_name()}-value"
    assert registry.latest(subject) is None
    first = registry.register(subject, '{"type":"string"}')
    assert (first.version, registry.register(subject, '{"type":"string"}')) == (1, first)
    long_schema = '{"type":"struct","fields":[' + ",".join(["{}"] * 2000) + "]}"
    second = registry.register(subject, long_schema)  # longer than a btree index entry
    assert (second.version, second.id) == (2, registry.schema_id(long_schema))
    assert registry.latest(subject) == second
    assert [v.version for v in registry.versions(subject)] == [1, 2]
    assert registry.by_id(first.id) == '{"type":"string"}'
    assert registry.by_id(10**9) is None
    assert subject in registry.subjects()
    again = registry.register(subject, '{"type":"string"}')  # back to an older schema
    assert (again.version, again.id) == (3, first.id)


def test_commit_journal_rows_and_fences(journal: Any) -> None:
    writer, key = f"{_name()}/run", _name()
    assert journal.get(writer, 0, "t") is None
    journal.put(writer, 0, "t", "pending", {0: 5, 1: 0}, (key, 1))
    assert journal.get(writer, 0, "t") == ("pending", {0: 5, 1: 0})
    journal.put(writer, 0, "t", "done", {0: 5, 1: 0}, (key, 1))
    assert journal.get(writer, 0, "t") == ("done", {0: 5, 1: 0})
    journal.fence(key, 2)
    journal.check_fence((key, 2), "t")
    journal.check_fence(None, "t")
    with pytest.raises(WriterFenced, match="epoch 1 may no longer commit to topic 't'"):
        journal.check_fence((key, 1), "t")
    with pytest.raises(WriterFenced):
        journal.put(writer, 1, "t", "pending", {}, (key, 1))
    assert journal.get(writer, 1, "t") is None  # refused: nothing written
    journal.put(writer, 1, "t", "pending", {}, (key, 3))  # a newer epoch records itself
    with pytest.raises(WriterFenced):
        journal.put(writer, 2, "t", "pending", {}, (key, 2))
    journal.put(writer, 1, "t", "done", {})
    assert journal.prune(older_than_s=0) >= 1  # batch 0 goes, the writer's newest stays
    assert journal.get(writer, 0, "t") is None and journal.get(writer, 1, "t") is not None


_KEY = {"sluice_position_fences": "connector", "sluice_writer_fences": "fence_key"}


def _refused_while_fenced(url: str, table: str, column: str, key: str, commit: Any) -> None:
    """Start `commit` while another transaction holds the fence row with a newer value, then
    commit that transaction: `commit` waited for it and is refused (not let through)."""
    holder = psycopg.connect(url)
    key_column = _KEY[table]
    holder.execute(f"UPDATE {table} SET {column} = 2 WHERE {key_column} = %s", (key,))
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            commit()
            outcome["error"] = None
        except BaseException as exc:  # reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()

    def waiting_on_the_lock() -> bool:
        with psycopg.connect(url, autocommit=True) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
        return bool(row and row[0])

    wait_until(waiting_on_the_lock, timeout=10, what="the fenced commit to wait on the row lock")
    assert "error" not in outcome
    holder.commit()
    holder.close()
    thread.join(10)
    assert isinstance(outcome["error"], Fenced | WriterFenced), outcome


def test_pg_fence_check_and_write_are_one_transaction(pg_url: str) -> None:
    stores = WorkerStores.postgres(pg_url)
    c = _name()
    stores.positions.fence(c, 1)
    _refused_while_fenced(
        pg_url,
        "sluice_position_fences",
        "generation",
        c,
        lambda: stores.positions.save(c, {"p": {"offset": 1}}, generation=1),
    )
    assert stores.positions.load(c) == {}
    key = _name()
    stores.journal.fence(key, 1)
    _refused_while_fenced(
        pg_url,
        "sluice_writer_fences",
        "epoch",
        key,
        lambda: stores.journal.put("w", 0, "t", "pending", {}, (key, 1)),
    )
    assert stores.journal.get("w", 0, "t") is None


_CHILD = """
import pickle, sys
stores = pickle.loads(sys.stdin.buffer.read())
c = sys.argv[1]
stores.positions.save(c, {"p": {"offset": 41}}, generation=1)
stores.counters.add(c, {"n": 1})
print(stores.schemas.register(c + "-value", '{"type":"int"}').id)
try:
    stores.positions.save(c, {"p": {"offset": 99}}, generation=0)
except Exception as exc:
    print(type(exc).__name__)
"""


def _add_many(stores: WorkerStores, connector: str, n: int) -> None:
    for _ in range(n):
        stores.counters.add(connector, {"records": 1, "batches": 2})


def test_pg_stores_pickle_into_other_processes_and_add_exactly(pg_url: str) -> None:
    stores = WorkerStores.postgres(pg_url)
    c = _name()
    stores.positions.fence(c, 1)
    stores.counters.get(c)  # this process has its engine now: forked children must not share it
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, c],
        input=pickle.dumps(stores),
        capture_output=True,
        timeout=60,
        check=True,
    )
    schema_id, refusal = child.stdout.decode().split()
    assert stores.positions.load(c) == {"p": {"offset": 41}}
    assert refusal == "Fenced"
    assert stores.schemas.by_id(int(schema_id)) == '{"type":"int"}'

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(stores, c, 50)) for _ in range(4)]
    for p in procs:
        p.start()
    _add_many(stores, c, 50)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert stores.counters.get(c) == {"n": 1, "records": 250, "batches": 500}
