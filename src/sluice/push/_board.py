"""The push board: how live limits reach running tasks and how their progress gets out.

Push tasks run in Spark's Python workers, not in the process that answers REST, so the two meet in
one small SQLite file under the worker's `storePathRootDir` (`push.sqlite`; the runtime hands its
path to sink tasks in their context, `SinkTaskContext.push_board_path`):

* `push_settings(connector, limits)` — the limits an operator set (`PATCH …/push`); each running
  task reads it every second and applies its share at once (no restart: the query keeps its id).
  The limits are the connector's budget: a task takes `Limits.share(n)` for the `n` tasks that
  reported progress in the last 5 s;
* `push_progress(connector, task, progress, updated)` — each task's live snapshot (its current
  micro-batch: pool sizes, queue depths, latency percentiles), written every second;
* `push_totals(connector, name, value)` — counters added by every task every second and at the end
  of each micro-batch: records read, succeeded, failed, retried, dead-lettered, parked. They count
  attempts as they happen (as the target sees them), not commits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from typing import Any

from sluice._private import private_dir
from sluice._sqlite import create_database
from sluice.sdk import ConfigException

#: Tunable limits: their names over REST (as `sluice.push.Limits` fields) and the EventBridge
#: proposal's `/task/adjust` parameter names accepted as aliases.
TUNABLE = {
    "concurrency": int,
    "core_concurrency": int,
    "per_target_concurrency": int,
    "queue_limit": int,
    "rate_limit": float,
}
ALIASES = {
    "maxThreadSize": "concurrency",
    "coreThreadSize": "core_concurrency",
    "consumerCurrentQueueSizeLimit": "queue_limit",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS push_settings (connector TEXT PRIMARY KEY, limits TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS push_progress (
    connector TEXT NOT NULL, task INTEGER NOT NULL, progress TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (connector, task));
CREATE TABLE IF NOT EXISTS push_totals (
    connector TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (connector, name));
"""


def parse_limits(changes: Mapping[str, Any]) -> dict[str, int | float]:
    """Validate a change of limits (REST names or the proposal's aliases): typed values, or
    `ConfigException` naming the first bad key."""
    out: dict[str, int | float] = {}
    for key, raw in changes.items():
        name = ALIASES.get(key, key)
        if name not in TUNABLE:
            raise ConfigException(
                key, "unknown push setting", suggestion=f"one of {', '.join(sorted(TUNABLE))}"
            )
        kind = TUNABLE[name]
        try:
            value = kind(raw) if not isinstance(raw, bool) else None
        except (TypeError, ValueError):
            value = None
        if value is None:
            raise ConfigException(key, f"expected a number, got {raw!r}")
        if (name == "rate_limit" and value < 0) or (name != "rate_limit" and value < 1):
            raise ConfigException(key, f"must be {'≥ 0' if name == 'rate_limit' else '≥ 1'}")
        out[name] = value
    return out


class PushBoard:
    """The SQLite file above; picklable (the connection opens lazily in each process)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local: threading.local | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _db(self) -> sqlite3.Connection:
        if self._local is None:
            self._local = threading.local()
        db = getattr(self._local, "db", None)
        if db is None:
            private_dir(os.path.dirname(os.path.abspath(self.path)))
            create_database(self.path, _SCHEMA)  # 0600, never without its tables
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            self._local.db = db
        return db

    def settings(self, connector: str) -> dict[str, int | float]:
        row = (
            self._db()
            .execute("SELECT limits FROM push_settings WHERE connector = ?", (connector,))
            .fetchone()
        )
        return json.loads(row[0]) if row else {}

    def set_settings(self, connector: str, changes: Mapping[str, Any]) -> dict[str, int | float]:
        """Merge validated `changes` into the connector's settings; return them all."""
        parsed = parse_limits(changes)
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT limits FROM push_settings WHERE connector = ?", (connector,)
            ).fetchone()
            merged = {**(json.loads(row[0]) if row else {}), **parsed}
            db.execute(
                "INSERT INTO push_settings VALUES (?, ?) ON CONFLICT(connector) "
                "DO UPDATE SET limits = excluded.limits",
                (connector, json.dumps(merged)),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return merged

    def live_tasks(self, connector: str, within_s: float = 5.0) -> int:
        """How many of the connector's tasks reported progress in the last `within_s` seconds
        (at least 1: the caller is one of them)."""
        (count,) = (
            self._db()
            .execute(
                "SELECT count(*) FROM push_progress WHERE connector = ? AND updated >= ?",
                (connector, time.time() - within_s),
            )
            .fetchone()
        )
        return max(1, int(count))

    def report(
        self, connector: str, task: int, progress: Mapping[str, Any], increments: Mapping[str, int]
    ) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "INSERT INTO push_progress VALUES (?, ?, ?, ?) ON CONFLICT(connector, task) "
                "DO UPDATE SET progress = excluded.progress, updated = excluded.updated",
                (connector, task, json.dumps(progress), time.time()),
            )
            db.executemany(
                "INSERT INTO push_totals VALUES (?, ?, ?) ON CONFLICT(connector, name) "
                "DO UPDATE SET value = value + excluded.value",
                [(connector, k, v) for k, v in increments.items() if v],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def progress(self, connector: str) -> dict[str, Any]:
        """`{"totals": {...}, "tasks": [{"task", "updated", ...snapshot}], "settings": {...}}`."""
        db = self._db()
        totals = dict(
            db.execute("SELECT name, value FROM push_totals WHERE connector = ?", (connector,))
        )
        tasks = [
            {"task": task, "updated": updated, **json.loads(progress)}
            for task, progress, updated in db.execute(
                "SELECT task, progress, updated FROM push_progress WHERE connector = ? "
                "ORDER BY task",
                (connector,),
            )
        ]
        return {"totals": totals, "tasks": tasks, "settings": self.settings(connector)}
