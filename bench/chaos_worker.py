"""Chaos rounds: kill -9 of a real standalone worker at random moments and during REST mutations.

One `sluice worker` process (embedded defaults: SQLite stores, embedded bus, local[2]) runs a file
source `src` (a file a feeder keeps appending to) → topic `lines` → file sink `dst`, plus a few
short-lived *scratch* file sources (a 100-line file each, each into a topic of its own). Each round
starts the worker on the same store root and kills its process group with SIGKILL:

* `startup`: 0.1-8 s after the process started, whatever it is doing (booting Spark, starting the
  queries, the first micro-batch);
* `running`: once every connector is back (RUNNING, PAUSED or STOPPED as asked) and, every other
  time, the sink grew again, 0.1-8 s later;
* `rest`: once every connector is back, while one REST mutation is in flight: `POST
  /v1/connectors`, `PUT …/config` (of a scratch connector, or of the main source or sink while
  records flow), `DELETE …`, `PUT …/pause`, `PUT …/resume`, or `DELETE
  …/offsets` (of a stopped connector), 0-1.5 s after the request left.

After every boot (every round but `startup` ones) it checks: each connector named in `GET
/v1/connectors?expand=status` reaches its state within `--running-timeout` s; a connector is
there with its old or its new config (never a third), absent only if a DELETE or an unanswered
POST allows it, a DELETE that was answered never comes back, no deleted connector's status is
readable nor its query started; a scratch source's topic holds its 100 lines once per offsets
reset the worker shows (`GET …/offsets` empty after the restart means the reset happened, so the
file is read again; otherwise it is not).

At the end the feeder stops, the worker runs until the sink holds the whole source, and: every line
is in topic `lines` exactly once (counted in the topic), the sink file is byte-identical to the
source (`FileSinkConnector` is exactly-once), every boot succeeded.

    .venv/bin/python bench/chaos_worker.py [--rounds 20] [--seed N] [--root DIR] [--jdbc]

`--jdbc` adds `jdbc-main`, a JDBC sink (upsert by `id`, exactly as if once) of topic `lines` into a
table of PostgreSQL (`scripts/servers.sh up postgres`, started if needed, stopped at the end if this
run started it): at the end it must hold each line once (the feeder writes JSON lines).

The worker's log is `<root>/w/worker.log`; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import psycopg  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.e2e.topics import topic_count, topic_rows  # noqa: E402
from tests.e2e.worker_process import WorkerProcess  # noqa: E402
from tests.servers import ensure, stop_started  # noqa: E402

SCRATCH_LINES = 100
IDLE = {"STARTED": "RUNNING", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}


@dataclass
class Scratch:
    """What a scratch connector may be after a restart: each allowed (config, target state),
    whether it may be absent, and how many times its offsets were reset."""

    name: str
    configs: list[dict[str, str]]
    targets: set[str] = field(default_factory=lambda: {"STARTED"})
    may_be_absent: bool = False
    must_be_absent: bool = False
    resets: int = 0
    reset_pending: bool = False


class Feeder(threading.Thread):
    """Appends lines to the source file until stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.lines, self.halt = path, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.25):
            with open(self.path, "a", encoding="utf-8") as f:
                for _ in range(500):
                    n = self.lines
                    f.write(f'{{"id": {n}, "line": "chaos ünïcode {"x" * (n % 40)}"}}\n')
                    self.lines += 1


class Chaos:
    """The rounds, the model of what each connector may be, and the failures seen."""

    def __init__(
        self, root: Path, rng: random.Random, running_timeout: float, pg: str | None = None
    ) -> None:
        self.root, self.rng, self.running_timeout = root, rng, running_timeout
        #: PostgreSQL schema the JDBC sink `jdbc-main` upserts topic `lines` into (None: no sink)
        self.pg, self.schema = pg, f"chaos_{os.getpid()}"
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerProcess(root / "w")
        self.scratch: dict[str, Scratch] = {}
        self.made = 0
        self.failures: list[str] = []
        self.log: list[str] = []
        self.back_s: list[float] = []

    # -- REST ---------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return self.worker.request(method, "/v1" + path, json=body)

    def fail(self, what: str) -> None:
        print("FAILURE:", what, flush=True)
        self.failures.append(what)

    def source_conf(self, name: str, topic_suffix: str = "") -> dict[str, str]:
        path = self.data / f"{name}.txt"
        if not path.exists():
            path.write_text("".join(f"{name} line {i}\n" for i in range(SCRATCH_LINES)))
        return {
            "connector.class": "FileSourceConnector",
            "filename": str(path),
            "connect.topicname": f"scratch-{name}{topic_suffix}",
        }

    def create_pipeline(self) -> None:
        self.worker.file_pipeline(self.data, "main", topic="lines")
        if self.pg is None:
            return
        with psycopg.connect(self.pg, autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {self.schema}")
            db.execute(f"CREATE TABLE {self.schema}.lines (id BIGINT PRIMARY KEY, line TEXT)")
        host = self.pg.split("@", 1)[1]
        self.worker.post_connector(
            "jdbc-main",
            {
                "connector.class": "JdbcSinkConnector",
                "connection.url": f"jdbc:postgresql://{host}?currentSchema={self.schema}",
                "connection.user": "postgres",
                "connect.topicnames": "lines",
                "insert.mode": "upsert",
                "pk.mode": "record_value",
                "pk.fields": "id",
            },
        )

    def table_rows(self) -> tuple[int, int, int]:
        """(rows, smallest id, largest id) of the JDBC sink's table."""
        with psycopg.connect(self.pg, autocommit=True) as db:
            row = db.execute(f"SELECT count(*), min(id), max(id) FROM {self.schema}.lines")
            return row.fetchone()

    def check_table(self, fed: int) -> None:
        """The JDBC sink (upsert: exactly as if once) holds every line once, no other."""
        try:
            wait_until(lambda: self.table_rows()[0] >= fed, 900, "the table to hold every line", 1)
        except AssertionError as exc:
            self.fail(f"{exc}: {self.table_rows()}")
            return
        rows = self.table_rows()
        print(f"table {self.schema}.lines: {rows[0]} rows, ids {rows[1]}..{rows[2]}")
        if rows != (fed, 0, fed - 1):
            self.fail(f"table holds {rows} (rows, min id, max id), want ({fed}, 0, {fed - 1})")

    # -- checks after a boot ------------------------------------------------------------------
    def check_back(self, round_no: int) -> None:
        started = time.monotonic()
        expected = {"src-main": "RUNNING", "sink-main": "RUNNING"}
        if self.pg is not None:
            expected["jdbc-main"] = "RUNNING"
        listed = self.call("GET", "/connectors?expand=status").json()
        for s in list(self.scratch.values()):
            self.check_scratch(s, listed, expected)
        try:
            wait_until(
                lambda: self.states() == expected,
                self.running_timeout,
                f"round {round_no}: every connector back in its state {expected}",
                every=0.25,
            )
        except AssertionError as exc:
            self.fail(f"{exc}; last seen {self.states()}")
            return
        self.back_s.append(time.monotonic() - started)
        for s in self.scratch.values():
            if not s.must_be_absent and s.targets == {"STARTED"}:
                self.check_scratch_topic(s, round_no)

    def states(self) -> dict[str, str]:
        listed = self.call("GET", "/connectors?expand=status").json()
        return {n: v["status"]["connector"]["state"] for n, v in listed.items()}

    def check_scratch(self, s: Scratch, listed: dict, expected: dict[str, str]) -> None:
        boot_log = self.worker.log.read_text().rsplit("starting worker", 1)[-1]
        if s.name not in listed:
            if not (s.may_be_absent or s.must_be_absent):
                self.fail(f"{s.name} vanished (a POST/DELETE was not in flight)")
            status = self.call("GET", f"/connectors/{s.name}/status")
            if status.status_code != 404:
                self.fail(f"{s.name} is absent but its status answers {status.status_code}")
            if f"connector {s.name} started (" in boot_log:
                self.fail(f"{s.name} is absent but its query was started at boot")
            s.must_be_absent, s.may_be_absent = True, True
            return
        if s.must_be_absent:
            self.fail(f"{s.name} was deleted (DELETE answered) and came back")
        config = self.call("GET", f"/connectors/{s.name}/config").json()
        if config not in s.configs:
            self.fail(f"{s.name} has a config it was never given: {config}")
        state = listed[s.name]["status"]["connector"]["state"]
        target = {v: k for k, v in IDLE.items()}.get(state)
        if target is None:  # still coming up (UNASSIGNED, RESTARTING): its target is STARTED
            target = "STARTED"
        if target not in s.targets:
            self.fail(f"{s.name} is {state}, its target may only be {sorted(s.targets)}")
        s.targets = {target}
        expected[s.name] = IDLE[target]
        s.configs = [config] if config in s.configs else s.configs
        s.may_be_absent = False
        if s.reset_pending:
            offsets = self.call("GET", f"/connectors/{s.name}/offsets").json()["offsets"]
            s.resets += not offsets
            s.reset_pending = False
            print(f"  {s.name}: offsets reset {'done' if not offsets else 'not done'}")

    def check_scratch_topic(self, s: Scratch, round_no: int) -> None:
        topic = s.configs[0]["connect.topicname"]
        want = SCRATCH_LINES * (1 + s.resets) if topic == f"scratch-{s.name}" else None
        if want is None:
            return  # its config moved it to another topic: nothing to count
        try:
            wait_until(
                lambda: topic_count(self.worker.tmp / "store", topic) >= want,
                60,
                f"round {round_no}: {topic} to hold {want} records",
                every=0.5,
            )
        except AssertionError as exc:
            got = topic_count(self.worker.tmp / "store", topic)
            self.fail(f"{exc} (it holds {got}, {s.resets} resets)")
            return
        got = topic_count(self.worker.tmp / "store", topic)
        if got != want:
            self.fail(f"round {round_no}: {topic} holds {got} records, want {want}")

    # -- REST mutations -----------------------------------------------------------------------
    def pick_mutation(self) -> tuple[str, str, str, Any]:
        """(verb, method, path, body) of one mutation on a scratch connector, and the model
        updated for it being in flight."""
        live = [s for s in self.scratch.values() if not s.must_be_absent]
        verbs = ["create"] if len(live) < 2 else []
        if live:
            verbs += ["update", "delete", "pause_or_resume", "reset"]
        verb = self.rng.choice([*verbs, "change_main"])
        if verb == "change_main":
            return self.change_main()
        if verb == "create":
            self.made += 1
            name = f"s{self.made}"
            conf = self.source_conf(name)
            self.scratch[name] = Scratch(name, [conf], may_be_absent=True)
            return verb, "POST", "/connectors", {"name": name, "config": conf}
        s = self.rng.choice(live)
        if verb == "update":
            old = s.configs[0]
            suffix = "" if old["connect.topicname"].endswith("-b") else "-b"
            new = self.source_conf(s.name, suffix)
            s.configs = [old, new]
            return verb, "PUT", f"/connectors/{s.name}/config", new
        if verb == "delete":
            s.may_be_absent = True
            return verb, "DELETE", f"/connectors/{s.name}", None
        if verb == "reset":
            self.call("PUT", f"/connectors/{s.name}/stop").raise_for_status()
            s.targets = {"STOPPED"}
            s.reset_pending = True
            return verb, "DELETE", f"/connectors/{s.name}/offsets", None
        if "STARTED" in s.targets:
            s.targets = {"STARTED", "PAUSED"}
            return "pause", "PUT", f"/connectors/{s.name}/pause", None
        s.targets |= {"STARTED"}
        return "resume", "PUT", f"/connectors/{s.name}/resume", None

    def change_main(self) -> tuple[str, str, str, Any]:
        """A PUT of the main source's or sink's config while records flow (a key that moves
        nothing: the read limit, the sink's task count): the topic and the sink must still hold
        each line once."""
        name = self.rng.choice(["src-main", "sink-main"])
        conf = self.call("GET", f"/connectors/{name}/config").json()
        key, values = ("read.max.rows", "5000") if name == "src-main" else ("max.tasks", "2")
        if key in conf:
            del conf[key]
        else:
            conf[key] = values
        return "change_main", "PUT", f"/connectors/{name}/config", conf

    def answered(self, verb: str, path: str, body: Any, status: int) -> None:
        """The mutation was answered before the kill: it must have happened."""
        name = path.split("/")[2] if verb != "create" else body["name"]
        if status >= 400:
            self.fail(f"{verb} {path} answered {status}")
            return
        if verb == "change_main":
            return
        s = self.scratch[name]
        if verb == "create":
            s.may_be_absent = False
        elif verb == "update":
            s.configs = s.configs[-1:]
        elif verb == "delete":
            s.must_be_absent = True
        elif verb in ("pause", "resume"):
            s.targets = {"PAUSED" if verb == "pause" else "STARTED"}
        elif verb == "reset":
            s.resets += 1
            s.reset_pending = False

    def mutate_and_kill(self) -> str:
        verb, method, path, body = self.pick_mutation()
        result: dict[str, int] = {}

        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the kill cut it off
                result["status"] = self.call(method, path, body).status_code

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        delay = self.rng.uniform(0, 1.5)
        thread.join(delay)
        self.worker.kill9()
        thread.join(10)
        if "status" in result:
            self.answered(verb, path, body, result["status"])
        return f"{verb} {path} killed {delay:.2f} s in ({result.get('status', 'no answer')})"

    # -- rounds -------------------------------------------------------------------------------
    def round(self, n: int, mode: str, feeder: Feeder) -> None:
        t0 = time.monotonic()
        boots = self.worker.launch()
        if mode == "startup":
            delay = self.rng.uniform(0.1, 8)
            wait_until(
                lambda: time.monotonic() - t0 >= delay or self.worker.proc.poll() is not None
            )
            if self.worker.proc.poll() is not None:
                self.fail(f"round {n}: the worker exited by itself:\n{self.tail()}")
            self.worker.kill9()
            what = f"{delay:.2f} s after the start"
        else:
            try:
                self.worker.wait_boot(boots)
            except AssertionError as exc:
                self.fail(f"round {n}: boot failed: {exc}\n{self.tail()}")
                self.worker.kill9()
                return
            if n == 0:
                self.create_pipeline()
                if not feeder.is_alive():
                    feeder.start()
            self.check_back(n)
            what = self.kill_while_running(n) if mode == "running" else self.mutate_and_kill()
        line = f"round {n:3d} {mode:8s} {what}; sink {self.size('out-main.txt')} bytes"
        print(line, flush=True)
        self.log.append(line)

    def kill_while_running(self, n: int) -> str:
        """Kill 0.1-8 s after every connector was back, or (every other time) after the sink
        grew since, so that the kill also lands in later micro-batches and their commits (the
        first one after a boot can take longer than 8 s on a loaded machine)."""
        after = "every connector was back"
        if self.rng.random() < 0.5:
            size = self.size("out-main.txt")
            try:
                wait_until(lambda: self.size("out-main.txt") > size, 120, "the sink to grow")
                after = "the sink grew"
            except AssertionError:
                self.fail(f"round {n}: the sink did not grow within 120 s")
        delay = self.rng.uniform(0.1, 8)
        time.sleep(delay)  # a random moment to kill at, not a wait for a condition
        self.worker.kill9()
        return f"{delay:.2f} s after {after}"

    def size(self, name: str) -> int:
        path = self.data / name
        return path.stat().st_size if path.exists() else 0

    def tail(self) -> str:
        return self.worker.log.read_text()[-3000:]

    def finish(self, feeder: Feeder) -> None:
        feeder.halt.set()
        feeder.join()
        boots = self.worker.launch()
        try:
            self.worker.wait_boot(boots)
            self.check_back(-1)
            src, dst = self.data / "in-main.txt", self.data / "out-main.txt"
            wait_until(
                lambda: self.size("out-main.txt") >= src.stat().st_size,
                900,
                "the sink to hold the whole source",
                every=1,
            )
            rows = topic_rows(self.worker.tmp / "store", "lines")
            counts = Counter(r["value"] for r in rows)
            doubled = sum(1 for c in counts.values() if c > 1)
            print(f"topic lines: {len(rows)} records, {feeder.lines} lines fed, {doubled} doubled")
            if len(rows) != feeder.lines or doubled or len(counts) != feeder.lines:
                self.fail(
                    f"topic holds {len(rows)} records ({len(counts)} distinct) of {feeder.lines}"
                )
            if self.pg is not None:
                self.check_table(feeder.lines)
            if dst.read_bytes() != src.read_bytes():
                self.fail(
                    f"sink ({dst.stat().st_size} B) differs from source ({src.stat().st_size} B)"
                )
        finally:
            self.worker.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--root", type=Path)
    parser.add_argument("--running-timeout", type=float, default=120)
    parser.add_argument(
        "--jdbc", action="store_true", help="also a JDBC sink into scripts/servers.sh's PostgreSQL"
    )
    args = parser.parse_args()
    pg = f"postgresql://postgres@{ensure('postgres').split()[-1]}/postgres" if args.jdbc else None
    root = args.root or Path(tempfile.mkdtemp(prefix="sluice-chaos-"))
    rng = random.Random(args.seed)
    print(f"seed {args.seed}, root {root}, {platform.machine()} {os.cpu_count()} cores")
    chaos = Chaos(root, rng, args.running_timeout, pg)
    feeder = Feeder(chaos.data / "in-main.txt")
    (chaos.data / "in-main.txt").touch()
    # round 0 creates the connectors; then startup, running and REST kills in a shuffled mix
    modes = [("startup", "running", "rest")[i % 3] for i in range(args.rounds - 1)]
    rng.shuffle(modes)
    started = time.monotonic()
    try:
        for n, mode in enumerate(["running", *modes]):
            chaos.round(n, mode, feeder)
        chaos.finish(feeder)
    finally:
        if chaos.worker.proc is not None and chaos.worker.proc.poll() is None:
            chaos.worker.kill9()
        stop_started()  # the PostgreSQL of --jdbc, if this run started it
    took = time.monotonic() - started
    back = sorted(chaos.back_s)
    print(
        f"{args.rounds} rounds in {took:.0f} s; back after a boot: "
        f"median {back[len(back) // 2] if back else 0:.1f} s, max {max(back, default=0):.1f} s; "
        f"{len(chaos.failures)} failures"
    )
    for failure in chaos.failures:
        print("  -", failure.splitlines()[0])
    if not chaos.failures and not args.root:
        shutil.rmtree(root, ignore_errors=True)
    if not chaos.failures and pg is not None:
        with psycopg.connect(pg, autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS {chaos.schema} CASCADE")
    sys.exit(1 if chaos.failures else 0)


if __name__ == "__main__":
    main()
