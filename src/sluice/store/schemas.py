"""The schema registry: key/value schemas of topics, versioned per subject, in SQLite.

Subjects are `<topic>-key` and `<topic>-value` (Confluent's topic-name strategy). A schema is the
canonical text of a Connect schema (`sluice.converters.canonical`); each distinct text gets one
global id, which Avro messages carry, so a sink finds the exact writer schema of every record.
Registering the subject's current schema again is a no-op; a different one becomes the next
version. Safe for several processes (Spark's driver-side writers, executors reading by id).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from sluice.store._sqlite_file import SqliteFile

_SCHEMAS = """
CREATE TABLE IF NOT EXISTS schemas (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schema TEXT NOT NULL UNIQUE
)
"""
_SUBJECTS = """
CREATE TABLE IF NOT EXISTS subjects (
    subject TEXT NOT NULL,
    version INTEGER NOT NULL,
    schema_id INTEGER NOT NULL REFERENCES schemas(id),
    registered_at REAL NOT NULL,
    PRIMARY KEY (subject, version)
)
"""


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject: its global schema id, version number and schema text."""

    subject: str
    version: int
    id: int
    schema: str


class SqliteSchemaRegistry(SqliteFile):
    """Schemas by subject and version, and by global id; picklable (connections open lazily)."""

    SCHEMA = _SCHEMAS

    def _db(self) -> sqlite3.Connection:
        conn = super()._db()
        # The base class runs one statement per connection; the subjects table is a second one.
        if not getattr(self._local, "subjects", False):
            conn.execute(_SUBJECTS)
            self._local.subjects = True  # type: ignore[union-attr]
        return conn

    def schema_id(self, schema: str) -> int:
        """The global id of `schema` (created on first use)."""
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            return self._id(schema)

    def _id(self, schema: str) -> int:
        db = self._db()
        row = db.execute("SELECT id FROM schemas WHERE schema = ?", (schema,)).fetchone()
        if row is not None:
            return int(row[0])
        return int(db.execute("INSERT INTO schemas(schema) VALUES (?)", (schema,)).lastrowid)

    def register(self, subject: str, schema: str) -> RegisteredSchema:
        """Make `schema` the subject's latest version (no-op if it already is)."""
        db = self._db()
        with db:
            db.execute("BEGIN IMMEDIATE")
            schema_id = self._id(schema)
            latest = self._latest(subject)
            if latest is not None and latest.id == schema_id:
                return latest
            version = 1 if latest is None else latest.version + 1
            db.execute(
                "INSERT INTO subjects(subject, version, schema_id, registered_at) VALUES (?,?,?,?)",
                (subject, version, schema_id, time.time()),
            )
            return RegisteredSchema(subject, version, schema_id, schema)

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The subject's newest version, or None if it has none."""
        return self._latest(subject)

    def _latest(self, subject: str) -> RegisteredSchema | None:
        row = (
            self._db()
            .execute(
                "SELECT s.version, s.schema_id, x.schema FROM subjects s "
                "JOIN schemas x ON x.id = s.schema_id WHERE s.subject = ? "
                "ORDER BY s.version DESC LIMIT 1",
                (subject,),
            )
            .fetchone()
        )
        if row is None:
            return None
        return RegisteredSchema(subject, int(row[0]), int(row[1]), row[2])

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of the subject, oldest first."""
        rows = self._db().execute(
            "SELECT s.version, s.schema_id, x.schema FROM subjects s "
            "JOIN schemas x ON x.id = s.schema_id WHERE s.subject = ? ORDER BY s.version",
            (subject,),
        )
        return [RegisteredSchema(subject, int(v), int(i), text) for v, i, text in rows]

    def subjects(self) -> list[str]:
        """Every subject with at least one version, sorted."""
        rows = self._db().execute("SELECT DISTINCT subject FROM subjects ORDER BY subject")
        return [r[0] for r in rows]

    def by_id(self, schema_id: int) -> str | None:
        """The schema text with this global id, or None."""
        row = self._db().execute("SELECT schema FROM schemas WHERE id = ?", (schema_id,)).fetchone()
        return None if row is None else row[0]
