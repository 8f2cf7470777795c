"""Schema compatibility per subject, with the rules of Confluent's schema registry (pure logic).

Levels (`schema.compatibility`), as Confluent documents them:

| level | a new version must… | so that |
|---|---|---|
| `BACKWARD` (default) | read data written with the latest version | consumers upgrade first |
| `BACKWARD_TRANSITIVE` | read data written with every earlier version | a sink replays all |
| `FORWARD` | be readable by the latest version | producers upgrade first |
| `FORWARD_TRANSITIVE` | be readable by every earlier version | |
| `FULL` | both BACKWARD and FORWARD against the latest version | |
| `FULL_TRANSITIVE` | both, against every earlier version | |
| `NONE` | nothing: any schema is accepted | |

"Reader can read writer" follows Avro schema resolution, on Connect schemas (what the registry
stores): a reader field the writer lacks needs a default (an optional field's default is null);
a writer field the reader lacks is dropped; a required reader field cannot take an optional
writer field (a null would have nowhere to go); types must match or widen (int8 → int16 → int32
→ int64 → float32 → float64, string ↔ bytes); logical types (date, time, timestamp, decimal with
its precision and scale) must match exactly; arrays, maps and structs are compared member by
member. `CheckedRegistry` wraps any `SchemaRegistry` and refuses an incompatible version with
`IncompatibleSchema`, whose message names the subject, the field and why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sluice.converters._base import RegisteredSchema, SchemaRegistry
from sluice.converters._schemas import describe, from_connect
from sluice.sdk import ConfigException, ConnectException, FieldType, Schema

LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
DEFAULT_LEVEL = "BACKWARD"
#: The config key (worker config: the default of every subject; connector config: the level of
#: the subjects that connector registers).
KEY = "schema.compatibility"

#: Widening order of the numeric types: a writer type reads as any later one.
_NUMERIC = (
    FieldType.INT8,
    FieldType.INT16,
    FieldType.INT32,
    FieldType.INT64,
    FieldType.FLOAT32,
    FieldType.FLOAT64,
)
_TEXT = (FieldType.STRING, FieldType.BYTES)


def parse_level(value: str | None, key: str = KEY) -> str:
    """The level named by `value` (case-insensitive; None → BACKWARD); `ConfigException` else."""
    if value is None or not str(value).strip():
        return DEFAULT_LEVEL
    level = str(value).strip().upper()
    if level not in LEVELS:
        raise ConfigException(key, f"must be one of {', '.join(LEVELS)}, got {value!r}")
    return level


def read_problems(reader: Schema, writer: Schema, path: str = "") -> list[str]:
    """Why data written with `writer` cannot be read as `reader` (empty when it can).

    Each problem names the field by its dotted path (the top level is "the value")."""
    where = f"field `{path}`" if path else "the value"
    if writer.optional and not reader.optional:
        return [f"{where} became required: data written with the older schema may hold nulls"]
    if reader.logical is not None or writer.logical is not None:
        if describe(reader) != describe(writer) or reader.type is not writer.type:
            return [_changed(where, writer, reader)]
        return []
    if reader.type is not writer.type and not _widens(writer.type, reader.type):
        return [_changed(where, writer, reader)]
    if reader.type is FieldType.STRUCT:
        return _struct_problems(reader, writer, path)
    children = []
    if reader.type is FieldType.ARRAY:
        children = [("[]", reader.value_schema, writer.value_schema)]
    elif reader.type is FieldType.MAP:
        children = [
            ("{key}", reader.key_schema, writer.key_schema),
            ("{value}", reader.value_schema, writer.value_schema),
        ]
    problems = []
    for suffix, r, w in children:
        if r is not None and w is not None:
            problems += read_problems(r, w, f"{path}{suffix}" if path else f"value{suffix}")
    return problems


def _struct_problems(reader: Schema, writer: Schema, path: str) -> list[str]:
    written = {f.name: f.schema for f in writer.fields}
    problems = []
    for f in reader.fields:
        inner = f"{path}.{f.name}" if path else f.name
        old = written.get(f.name)
        if old is None:
            if not f.schema.optional:
                problems.append(f"new field `{inner}` is required and has no default")
            continue
        problems += read_problems(f.schema, old, inner)
    return problems


def _widens(writer: FieldType, reader: FieldType) -> bool:
    if writer in _NUMERIC and reader in _NUMERIC:
        return _NUMERIC.index(writer) <= _NUMERIC.index(reader)
    return writer in _TEXT and reader in _TEXT


def _changed(where: str, old: Schema, new: Schema) -> str:
    return f"{where} changed type from {describe(old)} to {describe(new)}"


def problems(level: str, new: Schema, previous: Sequence[Schema]) -> list[str]:
    """Why `new` may not follow `previous` (oldest first) under `level`; empty when it may."""
    if level == "NONE" or not previous:
        return []
    against = list(previous) if level.endswith("_TRANSITIVE") else [previous[-1]]
    base = level.removesuffix("_TRANSITIVE")
    found: list[str] = []
    for old in reversed(against):  # the latest first: its problems are the likeliest news
        if base in ("BACKWARD", "FULL"):
            found += read_problems(new, old)
        if base in ("FORWARD", "FULL"):
            found += [f"older readers: {p}" for p in read_problems(old, new)]
    return list(dict.fromkeys(found))


class IncompatibleSchema(ConnectException):
    """A new schema version that the subject's compatibility level refuses."""

    def __init__(self, subject: str, level: str, reasons: list[str]) -> None:
        topic, _, role = subject.rpartition("-")
        what = f"topic {topic!r} ({role} schema)" if topic and role in ("key", "value") else subject
        super().__init__(
            f"{what}: the new schema is not {level} compatible with the registered one: "
            + "; ".join(reasons),
            suggestion="make the change compatible (an optional field, a column with a "
            "default, a type widened rather than narrowed), or set "
            f"{KEY} (connector or worker config) to a looser level, or NONE",
        )
        self.subject = subject
        self.level = level
        self.reasons = reasons


@dataclass(frozen=True)
class CheckedRegistry:
    """A `SchemaRegistry` that checks each new version of a subject against its earlier ones.

    `level` applies to every subject; `levels` overrides it per subject. Registering a subject's
    latest schema again, or a schema it already had, is not a new version and is not checked.
    Picklable when `inner` is.
    """

    inner: SchemaRegistry
    level: str = DEFAULT_LEVEL
    levels: tuple[tuple[str, str], ...] = ()

    def level_of(self, subject: str) -> str:
        return dict(self.levels).get(subject, self.level)

    def register(self, subject: str, schema: str) -> RegisteredSchema:
        latest = self.inner.latest(subject)
        if latest is not None and latest.schema != schema:
            self.check(subject, schema)
        return self.inner.register(subject, schema)

    def check(self, subject: str, schema: str) -> None:
        """Raise `IncompatibleSchema` if `schema` may not be the subject's next version."""
        level = self.level_of(subject)
        if level == "NONE":
            return
        history = _history(self.inner, subject)
        found = problems(level, _parse(schema), [_parse(text) for text in history])
        if found:
            raise IncompatibleSchema(subject, level, found)

    def schema_id(self, schema: str) -> int:
        return self.inner.schema_id(schema)

    def latest(self, subject: str) -> RegisteredSchema | None:
        return self.inner.latest(subject)

    def by_id(self, schema_id: int) -> str | None:
        return self.inner.by_id(schema_id)

    def __getattr__(self, name: str) -> Callable:
        # The storage's other queries (versions, subjects) pass through unchanged.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _history(registry: SchemaRegistry, subject: str) -> list[str]:
    versions = getattr(registry, "versions", None)
    if versions is not None:
        return [v.schema for v in versions(subject)]
    latest = registry.latest(subject)
    return [] if latest is None else [latest.schema]


def _parse(text: str) -> Schema:
    return from_connect(json.loads(text))
