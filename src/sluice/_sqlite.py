"""Opening SQLite databases that several processes share (the embedded log, the stores)."""

from __future__ import annotations

import sqlite3
import time

BUSY_TIMEOUT_S = 60.0


def connect_shared(target: str, *, uri: bool = False) -> sqlite3.Connection:
    """A WAL-mode, `synchronous=FULL` connection that waits up to a minute for other writers.

    Autocommit mode (`isolation_level=None`): callers issue BEGIN/COMMIT themselves.
    """
    conn = sqlite3.connect(
        target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous=FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Switching a fresh database to WAL takes an exclusive lock, and SQLite reports SQLITE_BUSY at
    # once, without calling the busy handler, when two processes race to create it: so retry
    # here for as long as the busy timeout would have waited.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            if time.monotonic() >= deadline:
                raise
        else:
            if str(mode).lower() == "wal":
                return
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError(f"could not enable WAL mode (got {mode!r})")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
