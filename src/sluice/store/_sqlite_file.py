"""A store kept in one SQLite file that Spark's processes and the worker all open."""

from __future__ import annotations

import os
import sqlite3
import threading

from sluice._sqlite import connect_shared


class SqliteFile:
    """Base of the SQLite stores: picklable by path, one connection per process and thread.

    Subclasses set `SCHEMA` (run once per connection) and use `_db()`.
    """

    SCHEMA = ""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._local: threading.local | None = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        self._local = None

    def _db(self) -> sqlite3.Connection:
        if self._local is None:
            self._local = threading.local()
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            conn = connect_shared(self.path)
            conn.executescript(self.SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn
