"""The commit-path stores in SQLite (standalone) and PostgreSQL (distributed): time per call.

What a micro-batch commit does to the stores: one fenced position save (a source's or a sink's
end offsets), one counter add, and, on a broker bus, two commit-journal steps (`pending` and
`done`, each checked against the writer's fence). Each is timed `--calls` times on both backends
in one run; SQLite is the baseline (files under a temporary directory, WAL, synchronous=FULL).

    scripts/servers.sh up postgres
    .venv/bin/python bench/pg_stores.py [--calls 500] [--url postgresql://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from sluice.bus._external import CommitJournal
from sluice.runtime.stores import WorkerStores


def _per_call_ms(calls: int, step: Callable[[int], None]) -> float:
    step(-1)  # the first call opens the connection: not timed
    began = time.perf_counter()
    for i in range(calls):
        step(i)
    return (time.perf_counter() - began) * 1000 / calls


def _measure(stores: WorkerStores, journal: Any, calls: int) -> dict[str, float]:
    stores.positions.fence("c", 1)
    journal.fence("c", 1)
    positions = {f'{{"q":"{q}"}}': {"queueOffset": 0} for q in range(8)}

    def save(i: int) -> None:
        stores.positions.save("c", {k: {"queueOffset": i} for k in positions}, generation=1)

    def journal_steps(i: int) -> None:
        journal.put("c/run", i + 1, "t", "pending", {0: i}, ("c", 1))
        journal.put("c/run", i + 1, "t", "done", {0: i}, ("c", 1))

    return {
        "fenced position save (8 queues)": _per_call_ms(calls, save),
        "counter add (3 counters)": _per_call_ms(
            calls, lambda i: stores.counters.add("c", {"a": 1, "b": 2, "c": 3})
        ),
        "journal pending + done (fenced)": _per_call_ms(calls, journal_steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    db = f"sluice_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{args.url}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = WorkerStores.sqlite(tmp)
            journal = CommitJournal(str(Path(tmp) / "bus" / "writes.sqlite"))
            base = _measure(sqlite, journal, args.calls)
        pg = WorkerStores.postgres(f"{args.url}/{db}")
        measured = _measure(pg, pg.journal, args.calls)
    finally:
        with psycopg.connect(f"{args.url}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    print(f"| step ({args.calls} calls) | SQLite ms/call | PostgreSQL ms/call | ratio |")
    print("|---|---:|---:|---:|")
    for step, ms in base.items():
        print(f"| {step} | {ms:.3f} | {measured[step]:.3f} | {measured[step] / ms:.2f} |")


if __name__ == "__main__":
    main()
