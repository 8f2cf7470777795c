"""A store kept in one SQLite file that Spark's processes and the worker all open, and the
check of a worker's store files at start (`check_store_files`)."""

from __future__ import annotations

import os
import sqlite3
import threading

from sluice._private import private_dir
from sluice._sqlite import connect_shared, create_database, database_problem
from sluice.sdk import ConfigException


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
            private_dir(os.path.dirname(os.path.abspath(self.path)))
            create_database(self.path, self.SCHEMA)  # never a store file without its tables
            conn = connect_shared(self.path)
            conn.executescript(self.SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn


def prepare_store_root(root: str | os.PathLike[str]) -> None:
    """Make the worker's store root private (0700, also when it exists: it holds connector
    configs, positions and topic data) and refuse damaged store files in it
    (`check_store_files`). Called once by the composition root, before anything opens them."""
    private_dir(root, tighten=True)
    check_store_files(root)


def check_store_files(root: str | os.PathLike[str]) -> None:
    """Refuse (`ConfigException` naming `storePathRootDir` and the file) a worker store whose
    SQLite files were emptied, truncated or damaged: the `*.sqlite` files of `root` (configs,
    statuses, positions, counters, schemas, push progress) and of `root/bus` (a broker bus'
    commit journal). A store file is created with its tables in it (`create_database`), so one
    without them is damage, never a new store; starting on it would begin again from nothing
    (a sink from its first record, a source re-reading, connectors gone). Topic indexes are
    checked when their topic is opened (`sluice.bus.embedded.log`)."""
    for folder in (os.fspath(root), os.path.join(os.fspath(root), "bus")):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".sqlite"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            path = os.path.join(folder, name)
            problem = database_problem(path)
            if problem is not None:
                raise ConfigException(
                    "storePathRootDir",
                    f"the store file {path} is damaged: {problem}",
                    suggestion="restore it from a backup; or, to start that store afresh and "
                    "lose what it held, move it away (with its -wal and -shm files)",
                )
