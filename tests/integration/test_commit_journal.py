"""The broker buses' commit journal on both of its stores — the SQLite file of standalone mode and
the PostgreSQL cluster store of distributed mode (a real server) — for what the executors keep
in it: a part's row (claimed by an attempt, taken over by a newer one, refused to the older one),
the row that says a task finished its part, the lease check that goes with them, and the
clean-up after a batch committed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sluice.bus._external import CommitJournal, PartTakenOver
from sluice.bus.base import WriterFenced
from tests.servers import ensure

PG = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    ensure("postgres")
    db = f"sluice_journal_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        yield f"{PG}/{db}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        j: Any = CommitJournal(str(tmp_path / "writes.sqlite"))
    else:
        from sluice.bus._pg_journal import PgCommitJournal

        j = PgCommitJournal(request.getfixturevalue("pg_url"))
        j.create_tables()
    yield j
    j.close()


def test_a_part_is_claimed_taken_over_and_finished(journal: Any) -> None:
    w = f"c/{uuid.uuid4().hex[:6]}"
    assert journal.part_owner(w, 3, 0, "t") is None
    assert journal.claim_part(w, 3, 0, "t", "a1", {0: 10, 1: 20}) == ("new", {0: 10, 1: 20})
    assert journal.part_owner(w, 3, 0, "t") == "a1"
    # a newer attempt of the task finds what the first one recorded, and owns the part now
    assert journal.claim_part(w, 3, 0, "t", "a2", {0: 99, 1: 99}) == ("pending", {0: 10, 1: 20})
    assert journal.part_owner(w, 3, 0, "t") == "a2"
    with pytest.raises(PartTakenOver, match="taken over by a newer attempt"):
        journal.finish_part(w, 3, 0, "t", "a1")
    journal.finish_part(w, 3, 0, "t", "a2")
    assert journal.claim_part(w, 3, 0, "t", "a3", {}) == ("sent", {0: 10, 1: 20})
    assert journal.part_owner(w, 3, 0, "t") == "a2"  # a finished part keeps its owner
    # other tasks, batches and topics are parts of their own
    assert journal.claim_part(w, 3, 1, "t", "b1", {0: 5})[0] == "new"
    assert journal.claim_part(w, 4, 0, "t", "b1", {0: 5})[0] == "new"
    assert journal.claim_part(w, 3, 0, "u", "b1", {0: 5})[0] == "new"


def test_a_task_finished_its_part_and_old_batches_are_forgotten(journal: Any) -> None:
    w = f"c/{uuid.uuid4().hex[:6]}"
    assert not journal.task_finished(w, 0, 0)
    journal.finish_part(w, 0, 0, "", "a1")
    journal.finish_part(w, 1, 0, "", "a1")
    assert journal.task_finished(w, 0, 0) and journal.task_finished(w, 1, 0)
    assert not journal.task_finished(w, 0, 1) and not journal.task_finished(w + "x", 0, 0)
    journal.finish_part(w, 0, 0, "", "a2")  # a replay of a finished task: still finished
    journal.claim_part(w, 1, 0, "t", "a1", {0: 1})
    journal.forget_parts(w, 1)  # batch 1 committed: batch 0 is never replayed again
    assert not journal.task_finished(w, 0, 0)
    assert journal.task_finished(w, 1, 0) and journal.part_owner(w, 1, 0, "t") == "a1"


def test_a_superseded_lease_generation_claims_and_finishes_nothing(journal: Any) -> None:
    w = f"c/{uuid.uuid4().hex[:6]}"
    key = f"conn-{uuid.uuid4().hex[:6]}"
    journal.claim_part(w, 0, 0, "t", "a1", {0: 0}, (key, 1))
    journal.fence(key, 2)
    with pytest.raises(WriterFenced, match=f"fenced: writer '{key}' epoch 1"):
        journal.claim_part(w, 1, 0, "t", "a1", {0: 0}, (key, 1))
    with pytest.raises(WriterFenced):
        journal.finish_part(w, 0, 0, "t", "a1", (key, 1))
    assert journal.part_owner(w, 1, 0, "t") is None
    assert journal.claim_part(w, 1, 0, "t", "a2", {0: 0}, (key, 2))[0] == "new"
    journal.finish_part(w, 0, 0, "t", "a1", (key, 2))
