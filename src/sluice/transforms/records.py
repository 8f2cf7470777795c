"""Transforms that replace a record's key or value as a whole, and the `$Key`/`$Value` base.

`KeyOrValue` is the base of every transform with `$Key` and `$Value` variants: a subclass only sets
`target` (`"key"` or `"value"`). The helpers here (types in Spark's JSON form → SQL, struct
rebuilding, errors naming `transforms.<name>.<option>`) are shared with the field and filter
transforms. Everything compiles to Spark SQL text; nothing here imports Spark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    SqlStep,
    Transform,
    column_type,
    literal,
    quote,
    struct_fields,
)

INTEGRAL = ("byte", "short", "integer", "long")
FRACTIONAL = ("float", "double")
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_TIME = re.compile(r"time\(\d\)")
# Spark's JSON names whose DDL spelling differs (the others, e.g. `string`, `decimal(10,2)`, parse).
_DDL_NAMES = {"integer": "INT", "long": "BIGINT", "short": "SMALLINT", "byte": "TINYINT"}


def sql_type(type_: Any) -> str:
    """The DDL of a Spark JSON type (for `CAST(… AS <type>)`); field names are quoted."""
    if isinstance(type_, str):
        return _DDL_NAMES.get(type_, type_)
    kind = type_.get("type")
    if kind == "struct":
        inner = ", ".join(f"{quote(f['name'])}: {sql_type(f['type'])}" for f in type_["fields"])
        return f"STRUCT<{inner}>"
    if kind == "array":
        return f"ARRAY<{sql_type(type_['elementType'])}>"
    if kind == "map":
        return f"MAP<{sql_type(type_['keyType'])}, {sql_type(type_['valueType'])}>"
    if kind == "udt":
        return sql_type(type_["sqlType"])
    raise ValueError(f"unsupported Spark type {type_!r}")


def type_label(type_: Any) -> str:
    """A short name of a Spark JSON type for messages (`string`, `struct`, `decimal(10,2)`)."""
    return type_ if isinstance(type_, str) else str(type_.get("type"))


def is_string(type_: Any) -> bool:
    # Collated strings (`string collate …`) and char/varchar are strings too.
    return isinstance(type_, str) and (
        type_ == "string" or type_.startswith(("string ", "char(", "varchar("))
    )


def is_time(type_: Any) -> bool:
    """Spark's TIME(p) (sluice's Time is TIME(6))."""
    return isinstance(type_, str) and _TIME.fullmatch(type_) is not None


def decimal_of(type_: Any) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type, else None."""
    match = _DECIMAL.fullmatch(type_) if isinstance(type_, str) else None
    return (int(match[1]), int(match[2])) if match else None


def field_types(struct: Any) -> dict[str, Any]:
    """Field name → Spark JSON type of a struct type, in order."""
    return {f["name"]: f["type"] for f in struct["fields"]}


def named_struct(pairs: Iterable[tuple[str, str]]) -> str:
    """`named_struct(…)` from (field name, SQL expression) pairs."""
    return "named_struct(" + ", ".join(f"{literal(n)}, {e}" for n, e in pairs) + ")"


def option_error(transform: Transform, option: str, message: str) -> ConfigException:
    """An error found at `to_sql` time, keyed as the user wrote the option."""
    return ConfigException(f"transforms.{transform.name}.{option}", message)


def duplicates(names: Iterable[str]) -> list[str]:
    """Names that occur more than once (a struct cannot have two fields with one name)."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return sorted(repeated)


def ref(column: str, *path: str) -> str:
    """SQL for a record column or a (nested) field of it."""
    return ".".join(quote(p) for p in (column, *path))


def require_struct(transform: Transform, schema: dict[str, Any], column: str) -> dict[str, Any]:
    """The column's struct type; reshaping fields makes no sense on anything else."""
    type_ = column_type(schema, column)
    if not (isinstance(type_, dict) and type_.get("type") == "struct"):
        raise ConfigException(
            f"transforms.{transform.name}",
            f"needs a struct {column}, but the {column} is {type_label(type_)}",
        )
    return type_


def check_fields(
    transform: Transform, struct: dict[str, Any], names: Iterable[str], option: str, column: str
) -> None:
    """Every name must be a field of `struct`; otherwise the error names `option` and the field."""
    known = struct_fields(struct)
    for name in names:
        if name not in known:
            raise option_error(
                transform,
                option,
                f"{column} has no field {name!r} (fields: {', '.join(map(repr, known)) or 'none'})",
            )


def rebuild(column: str, pairs: Iterable[tuple[str, str]]) -> str:
    """A struct from (name, expression) pairs, NULL when `column` is NULL (tombstones stay)."""
    return f"CASE WHEN {quote(column)} IS NULL THEN NULL ELSE {named_struct(pairs)} END"


class KeyOrValue(Transform):
    """Base of transforms with `$Key`/`$Value` variants; subclasses set `target`."""

    target: ClassVar[str] = "value"

    def ref(self, *path: str) -> str:
        return ref(self.target, *path)

    def struct(self, schema: dict[str, Any]) -> dict[str, Any]:
        return require_struct(self, schema, self.target)

    def check_fields(self, struct: dict[str, Any], names: Iterable[str], option: str) -> None:
        check_fields(self, struct, names, option, self.target)

    def rebuild(self, pairs: Iterable[tuple[str, str]]) -> str:
        return rebuild(self.target, pairs)

    def step(self, expression: str) -> SqlStep:
        return SqlStep(columns={self.target: expression})


class SetNull(KeyOrValue):
    """Sets the key (`SetNull$Key`) or the value (`SetNull$Value`) to NULL, keeping its type.

    No options. Compiles to SQL: `CAST(NULL AS <type>)`.
    """

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        return self.step(f"CAST(NULL AS {sql_type(column_type(schema, self.target))})")


class SetNullKey(SetNull):
    target = "key"


class SetNullValue(SetNull):
    target = "value"


class ExtractField(KeyOrValue):
    """Replaces a struct key/value with one of its fields (Kafka's `ExtractField$Key`/`$Value`).

    Options: `field` (the field to keep; top-level only). A NULL key/value stays NULL. Compiles to
    SQL: `value.field`.
    """

    config_def = ConfigDef(ConfigKey("field", doc="name of the field to extract"))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        name = self.options["field"]
        self.check_fields(self.struct(schema), [name], "field")
        return self.step(self.ref(name))


class ExtractFieldKey(ExtractField):
    target = "key"


class ExtractFieldValue(ExtractField):
    target = "value"


class HoistField(KeyOrValue):
    """Wraps the key/value in a struct with one field (Kafka's `HoistField$Key`/`$Value`).

    Options: `field` (the new field's name). As in Kafka, a NULL key/value becomes a struct whose
    field is NULL. Compiles to SQL: `named_struct('field', value)`.
    """

    config_def = ConfigDef(ConfigKey("field", doc="name of the field that will hold the data"))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        return self.step(named_struct([(self.options["field"], quote(self.target))]))


class HoistFieldKey(HoistField):
    target = "key"


class HoistFieldValue(HoistField):
    target = "value"


class ValueToKey(Transform):
    """Replaces the key with a struct of some of the value's fields (Kafka's `ValueToKey`).

    Options: `fields` (value fields, in the order the key struct gets them). A NULL value gives a
    NULL key. Compiles to SQL: `named_struct('a', value.a, …)` for the key.
    """

    config_def = ConfigDef(
        ConfigKey("fields", type="list", doc="value fields that make up the new key")
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        fields = self.options["fields"]
        check_fields(self, require_struct(self, schema, "value"), fields, "fields", "value")
        return SqlStep(columns={"key": rebuild("value", ((n, ref("value", n)) for n in fields))})
