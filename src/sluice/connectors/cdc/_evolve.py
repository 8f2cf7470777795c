"""Following a captured table's schema change (`ALTER TABLE … ADD COLUMN`) while capturing.

A query's value schemas are fixed when the connector starts (Spark plans the frame from them, the
converter registers them). So a change is followed by a restart at the change:

1. `latest` (driver) ends every range just before the first transaction whose rows have another
   shape than the connector's schema (PostgreSQL: a `Relation` message with other columns;
   MySQL/MariaDB: an `ALTER TABLE` on a captured table after the position the connector read its
   columns at). A range therefore never spans a schema change.
2. Planning the range that starts at the change raises `SchemaChanged`, a
   `sluice.sdk.RestartRequested`: the runtime restarts the connector at once
   (`sluice.runtime.herder.restarts`), as it does after a transient Spark failure. The restarted
   connector reads the table's columns again and its converter registers the new value schema
   version; capture resumes at the change.
3. A range from before the change, replayed under the new schema (a crash in between), decodes
   with the columns it was written with: a column the log's rows do not carry is null, which is
   why a column with a database default is an optional field (`optional_columns`).

A change the connector cannot follow fails the task naming the table and the change: a column's
type changed, a key column dropped or renamed, a column added NOT NULL without a default (the
events before it cannot carry it), and on MySQL/MariaDB any other `ALTER`, `DROP`, `RENAME` or
`TRUNCATE` of the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.sdk import ConnectException, RestartRequested, Schema


class SchemaChanged(RestartRequested):
    """A captured table's columns changed in a way the connector follows by restarting."""

    code = "cdc.schema_changed"

    def __init__(self, table: str, change: str) -> None:
        self.table = table
        super().__init__(
            f"schema of {table} changed: {change}; restarting the source to follow it (it "
            "registers the new value schema version and resumes at the change)"
        )


def optional_columns(conn: Any, schema: str, table: str) -> set[str]:
    """The columns of `schema.table` that have a database default: their fields are optional,
    so that events logged before an `ADD COLUMN … NOT NULL DEFAULT …` still fit the schema."""
    rows = conn.exec_driver_sql(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s AND column_default IS NOT NULL",
        (schema, table),
    ).fetchall()
    return {str(r[0]) for r in rows}


def check_added(
    db: Any, conn: Any, table: Any, known: Sequence[str], change: str
) -> tuple[list[str], bool]:
    """The columns `table` has now beyond `known`, and whether one has a default other than
    NULL (the existing rows then took it without a change event); a clear failure naming the
    table, the column and `change` if one is NOT NULL without a default (no value for the events
    before it)."""
    names = [c.name for c in db.columns(conn, table) or [] if c.name not in known]
    return names, bool(filled_columns(db, conn, table, names, change))


def filled_columns(
    db: Any, conn: Any, table: Any, names: Sequence[str], change: str = ""
) -> list[str]:
    """Which of `table`'s columns `names` (new to the connector) have a default other than NULL,
    which the existing rows took without a change event: the table must be read again for them.
    Fails naming the table and the column if one is NOT NULL without a default: the change events
    logged before it cannot carry a value for it."""
    if not names:
        return []
    columns = {c.name: c for c in db.columns(conn, table) or []}
    defaulted = optional_columns(conn, table.schema, table.name)
    filled = {
        str(r[0])
        for r in conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND column_default IS NOT NULL AND column_default <> 'NULL'",
            (table.schema, table.name),
        ).fetchall()
    }
    for name in names:
        column = columns.get(name)
        if column is not None and not column.nullable and name not in defaulted:
            what = f" ({change})" if change else ""
            raise ConnectException(
                f"table {table}: column {name!r} was added NOT NULL without a default{what}; "
                "the change events before it cannot carry it, so the connector cannot follow "
                "this change",
                suggestion=f"give {name} a DEFAULT (or make it NULL), then restart the "
                "connector with reset offsets after re-copying the table",
            )
    return [n for n in names if n in filled]


def verdict(
    table: str,
    columns: Sequence[tuple[str, Schema]],
    pk: Sequence[str],
    logged: Sequence[str],
    types: Mapping[str, Any] | None = None,
    logged_types: Mapping[str, Any] | None = None,
) -> str | None:
    """Whether rows logged with columns `logged` decode under the connector's `columns`: None if
    they do (columns the log lacks are optional: null), the change to follow (a restart) if not;
    a `ConnectException` naming the table and the change when it cannot be followed. `types` /
    `logged_types`, when known, map column names to their database type."""
    known = dict(columns)
    unknown = [c for c in logged if c not in known]
    missing = [c for c in known if c not in logged]
    if types is not None and logged_types is not None:
        changed = [
            c for c in logged if c in types and c in logged_types and types[c] != logged_types[c]
        ]
        if changed:
            raise ConnectException(
                f"table {table}: the type of column(s) {changed} changed "
                f"({[types[c] for c in changed]} → {[logged_types[c] for c in changed]}); the "
                "connector cannot follow a type change",
                suggestion="re-copy the table and restart the connector with reset offsets",
            )
    keys = [c for c in missing if c in pk]
    if keys:
        raise ConnectException(
            f"table {table}: key column(s) {keys} were dropped or renamed (the log now has "
            f"columns {list(logged)}); the connector cannot follow a change of the record key",
            suggestion="re-copy the table and restart the connector with reset offsets",
        )
    required = [c for c in missing if not known[c].optional]
    if not unknown and not required:
        return None
    parts = []
    if unknown:
        parts.append(f"ADD COLUMN {', '.join(unknown)}")
    if missing:
        parts.append(f"DROP COLUMN {', '.join(missing)}")
    return "; ".join(parts)


# -- MySQL/MariaDB DDL statements -------------------------------------------------------------
_IDENT = r"(?:`[^`]+`|[\w$]+)"
_ALTER = re.compile(
    rf"^\s*ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?"
    rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)\s*(.*)$",
    re.IGNORECASE | re.DOTALL,
)
_NO_ROW_CHANGE = re.compile(
    r"^(?:ADD\s+(?:INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|CONSTRAINT|CHECK|FOREIGN)\b"
    r"|DROP\s+(?:INDEX|KEY|CONSTRAINT|CHECK|FOREIGN)\b"
    r"|ALTER\s+(?:COLUMN\s+)?" + _IDENT + r"\s+(?:SET|DROP)\s+DEFAULT\b"
    r"|COMMENT\b|ENGINE\b|ALGORITHM\b|LOCK\b|FORCE\b)",
    re.IGNORECASE,
)
_ADD_COLUMN = re.compile(
    r"^ADD\s+(?!PRIMARY\b|PERIOD\b|SYSTEM\b|PARTITION\b)(?:COLUMN\s+)?", re.IGNORECASE
)


def _clauses(text: str) -> list[str]:
    """An ALTER statement's clauses: split at top-level commas (not in parentheses or quotes)."""
    out, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    out.append("".join(current).strip())
    return [c for c in out if c]


def _unquote(name: str) -> str:
    return name.strip().strip("`")


def ddl_kind(query: str, database: str | None, table: str) -> str | None:
    """What a statement does to `table` (`database.table`): None if it does not touch it (or
    not its rows' shape), "add" if it only adds columns, else "other" (not followed)."""
    db, _, name = table.partition(".")
    match = _ALTER.match(query)
    if match is not None:
        target = [_unquote(p) for p in re.split(r"\s*\.\s*", match.group(1))]
        target_db, target_name = (
            (target[0], target[1]) if len(target) == 2 else (database, target[0])
        )
        if (target_db or "").lower() != db.lower() or target_name.lower() != name.lower():
            return None
        clauses = _clauses(match.group(2))
        kinds = {
            None if _NO_ROW_CHANGE.match(c) else "add" if _ADD_COLUMN.match(c) else "other"
            for c in clauses
        }
        return "other" if "other" in kinds else "add" if "add" in kinds else None
    text = query.strip().upper()
    ours = database == db or f"{db}.".upper() in text or f"`{db}`.".upper() in text
    if text.startswith(("DROP", "RENAME", "TRUNCATE")) and name.upper() in text and ours:
        return "other"
    return None
