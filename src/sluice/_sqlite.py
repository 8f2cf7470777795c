"""Opening SQLite databases that several processes share (the embedded log, the stores).

A store file is created whole (`create_database`: its tables are in it before it has its name),
so a store file without tables was emptied or truncated, not new; `database_problem` tells, and
the worker refuses to start on such a file rather than begin again from nothing (lost positions
replay or skip data, lost configs lose connectors).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from urllib.parse import quote

from sluice._private import private_file

BUSY_TIMEOUT_S = 60.0


def create_database(path: str, schema: str) -> bool:
    """Create SQLite file `path` (mode 0600, WAL) holding `schema`'s tables, unless it exists.

    The tables are written under a temporary name first, then the file is linked to `path`, so
    `path` never exists without them, and of processes racing to create it one wins. True if
    this call created it."""
    if os.path.exists(path):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.new")
    private_file(tmp)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(schema)
        finally:
            conn.close()  # the last connection: the WAL is checkpointed into the file
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False  # another process created it first: theirs is as good
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def database_problem(path: str) -> str | None:
    """What is wrong with the existing store file `path` (None: nothing): empty, no tables, not
    a database, or failing SQLite's `quick_check`. Reads only."""
    try:
        if os.path.getsize(path) == 0:
            return "it is empty (0 bytes): emptied or truncated"
        conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S)
    except (OSError, sqlite3.Error) as exc:
        return f"it cannot be opened ({exc})"
    try:
        (tables,) = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
        ).fetchone()
        if tables == 0:
            return "it holds no tables: emptied or truncated"
        rows = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
        if rows != ["ok"]:
            return f"it fails SQLite's integrity check ({'; '.join(rows)}): truncated or damaged"
    except sqlite3.DatabaseError as exc:
        return f"it is not a readable SQLite database ({exc}): truncated or damaged"
    finally:
        conn.close()
    return None


def connect_shared(target: str, *, uri: bool = False) -> sqlite3.Connection:
    """A WAL-mode, `synchronous=FULL` connection that waits up to a minute for other writers.

    Autocommit mode (`isolation_level=None`): callers issue BEGIN/COMMIT themselves. A plain
    path that does not exist is created with mode 0600 (SQLite gives its `-wal` and `-shm`
    files the database file's mode).
    """
    if not uri:
        private_file(target)
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
