"""Transforms: one step of a record chain (`transforms=a,b`, `transforms.a.class=…`).

A transform says what it does as **Spark SQL text** (`to_sql`), so the runtime runs it vectorised in
the JVM without this package depending on Spark: either new expressions for some record columns plus
an optional `WHERE` predicate, or a whole `SELECT … FROM records` (the `sql` transform). A transform
that cannot be written in SQL returns None from `to_sql` and implements `apply`, which the runtime
runs per record in Python (through `mapInArrow`) — correct, but much slower.

Record columns: `topic` (string), `key`, `value` (typed by their schemas), `timestamp`, `headers`
(map<string,string>).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sluice.sdk._config import ConfigDef
from sluice.sdk._errors import ConnectException
from sluice.sdk._record import ConnectRecord


@dataclass(frozen=True)
class SqlStep:
    """What a transform compiles to.

    `columns` maps record columns to new SQL expressions (columns not named pass through
    unchanged); `where` keeps only records for which the predicate is true. Or `query` replaces
    the records with a whole `SELECT … FROM records` that must keep the record columns.
    """

    columns: Mapping[str, str] = field(default_factory=dict)
    where: str | None = None
    query: str | None = None


class Transform:
    """Base of every transform. Subclasses declare `config_def` and implement `to_sql` or `apply`.

    `configure` is called once on the driver with the transform's own options (the part after
    `transforms.<name>.`); `to_sql` is called once when the query is planned, with the record
    columns' Spark schema (`{"type": "struct", "fields": [...]}`, Spark's JSON form).
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    #: True when the step reads and changes nothing but the record's topic (`RegexRouter`; as a
    #: predicate, `TopicNameMatches`): a chain of such steps is a function of the topic alone, so
    #: a fused sink runs it as a table of topic names instead of on Spark's rows.
    topic_only: ClassVar[bool] = False

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.name = type(self).__name__

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        """Validate options (raise `ConfigException` naming the key) and keep them."""
        self.name = name or self.name
        self.options = self.config_def.parse(config)

    def to_sql(self, schema: dict[str, Any]) -> SqlStep | None:
        """The SQL this step compiles to, or None to run `apply` per record."""
        return None

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """Per-record fallback (executor): the new record, or None to drop it."""
        raise ConnectException(f"transform {self.name} neither compiles to SQL nor applies records")


class Predicate(Transform):
    """A condition on records (Kafka Connect's predicates), compiled to a SQL boolean.

    Named in `predicates=p`, `predicates.p.type=…` (options under `predicates.p.`) and referenced by
    a transform's `predicate` option (plus `negate`): the transform then applies only to the
    records for which the predicate holds. Used as a transform itself, it keeps those records.
    """

    def condition(self, schema: dict[str, Any]) -> str:
        """SQL that is true for the records the predicate holds for (NULL counts as false)."""
        raise NotImplementedError

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        return SqlStep(where=f"coalesce({self.condition(schema)}, false)")


def column_type(schema: dict[str, Any], column: str) -> Any:
    """The Spark JSON type of one record column in a `to_sql` schema (e.g. the value's struct)."""
    for f in schema.get("fields", []):
        if f["name"] == column:
            return f["type"]
    raise ConnectException(f"record has no column {column!r}")


def struct_fields(type_: Any) -> list[str]:
    """Field names of a Spark JSON struct type ([] for anything else)."""
    if isinstance(type_, dict) and type_.get("type") == "struct":
        return [f["name"] for f in type_["fields"]]
    return []


def quote(identifier: str) -> str:
    """A Spark SQL identifier, back-quoted (any name is safe)."""
    return "`" + identifier.replace("`", "``") + "`"


def literal(value: str | None) -> str:
    """A Spark SQL string literal (or NULL)."""
    if value is None:
        return "NULL"
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
