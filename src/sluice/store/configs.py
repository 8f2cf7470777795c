"""Connector configs, target states and task configs, in SQLite (the embedded config store).

What the worker was asked to run survives a restart: on boot it reads every connector back and
brings each to its stored target state (a paused connector stays paused).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Protocol

from sluice.store._sqlite_file import SqliteFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS connectors (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    target_state TEXT NOT NULL,
    task_configs TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)
"""

TARGET_STATES = ("STARTED", "PAUSED", "STOPPED")


@dataclass
class StoredConnector:
    """One connector as the config store keeps it."""

    name: str
    config: dict[str, str]
    target_state: str = "STARTED"
    task_configs: list[dict[str, str]] = field(default_factory=list)


class ConfigStore(Protocol):
    """What the herders need of a config store (SQLite standalone, PostgreSQL distributed)."""

    def names(self) -> list[str]: ...

    def get(self, name: str) -> StoredConnector | None: ...

    def all(self) -> list[StoredConnector]: ...

    def put(self, name: str, config: dict[str, str], target_state: str = "STARTED") -> None: ...

    def set_target_state(self, name: str, target_state: str) -> None: ...

    def set_task_configs(self, name: str, task_configs: list[dict[str, str]]) -> None: ...

    def delete(self, name: str) -> None: ...


class SqliteConfigStore(SqliteFile):
    """Connector configs keyed by name; safe for several processes on one host."""

    SCHEMA = _SCHEMA

    def names(self) -> list[str]:
        return [row[0] for row in self._db().execute("SELECT name FROM connectors ORDER BY name")]

    def get(self, name: str) -> StoredConnector | None:
        row = (
            self._db()
            .execute(
                "SELECT config, target_state, task_configs FROM connectors WHERE name = ?", (name,)
            )
            .fetchone()
        )
        if row is None:
            return None
        return StoredConnector(name, json.loads(row[0]), row[1], json.loads(row[2]))

    def all(self) -> list[StoredConnector]:
        """Every connector sorted by name, in one read (a `/metrics` scrape takes it)."""
        rows = self._db().execute(
            "SELECT name, config, target_state, task_configs FROM connectors ORDER BY name"
        )
        return [StoredConnector(n, json.loads(c), s, json.loads(t)) for n, c, s, t in rows]

    def put(self, name: str, config: dict[str, str], target_state: str = "STARTED") -> None:
        """Create or replace the connector's config (its task configs are cleared)."""
        _check_state(target_state)
        now = time.time()
        db = self._db()
        with db:
            db.execute(
                "INSERT INTO connectors(name, config, target_state, task_configs, created_at, "
                "updated_at) VALUES (?, ?, ?, '[]', ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "config = excluded.config, target_state = excluded.target_state, "
                "task_configs = '[]', updated_at = excluded.updated_at",
                (name, json.dumps(config, sort_keys=True), target_state, now, now),
            )

    def set_target_state(self, name: str, target_state: str) -> None:
        _check_state(target_state)
        self._update(name, "target_state", target_state)

    def set_task_configs(self, name: str, task_configs: list[dict[str, str]]) -> None:
        self._update(name, "task_configs", json.dumps(task_configs, sort_keys=True))

    def _update(self, name: str, column: str, value: str) -> None:
        db = self._db()
        with db:
            db.execute(
                f"UPDATE connectors SET {column} = ?, updated_at = ? WHERE name = ?",
                (value, time.time(), name),
            )

    def delete(self, name: str) -> None:
        db = self._db()
        with db:
            db.execute("DELETE FROM connectors WHERE name = ?", (name,))


def _check_state(state: str) -> None:
    if state not in TARGET_STATES:
        raise ValueError(f"target state {state!r} is not one of {', '.join(TARGET_STATES)}")
