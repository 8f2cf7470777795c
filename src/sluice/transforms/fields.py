"""Transforms that rewrite the fields of a struct key or value: rename, select, insert, mask, cast.

Every class has `$Key`/`$Value` variants (the `…Key`/`…Value` subclasses) and compiles to Spark SQL:
the struct is rebuilt with `named_struct(…)` from the field list in the schema, so new field names
are computed in Python once, when the query is planned. A NULL key/value (a tombstone) stays NULL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from sluice.sdk import ConfigDef, ConfigException, ConfigKey, SqlStep, column_type, literal
from sluice.transforms.records import (
    FRACTIONAL,
    INTEGRAL,
    KeyOrValue,
    decimal_of,
    duplicates,
    field_types,
    is_string,
    is_time,
    option_error,
    sql_type,
    type_label,
)

# --- ChangeCase ---------------------------------------------------------------------------------

CASE_FORMATS = (
    "LOWER_UNDERSCORE",
    "UPPER_UNDERSCORE",
    "LOWER_CAMEL",
    "UPPER_CAMEL",
    "LOWER_HYPHEN",
)


def _words(name: str, case: str) -> list[str]:
    if case.endswith("_UNDERSCORE"):
        return name.split("_")
    if case == "LOWER_HYPHEN":
        return name.split("-")
    # Camel case: every capital letter starts a word (so `HTTPCode` is H, T, T, P, Code).
    return [w for w in re.split(r"(?=[A-Z])", name) if w]


def change_case(name: str, source: str, target: str) -> str:
    """`name` read in `source` case, written in `target` case (`first_name` → `firstName`)."""
    if source == target:
        return name
    words = _words(name, source)
    if target == "LOWER_UNDERSCORE":
        return "_".join(w.lower() for w in words)
    if target == "UPPER_UNDERSCORE":
        return "_".join(w.upper() for w in words)
    if target == "LOWER_HYPHEN":
        return "-".join(w.lower() for w in words)
    capitalised = [w[:1].upper() + w[1:].lower() for w in words]
    if target == "LOWER_CAMEL" and capitalised:
        capitalised[0] = capitalised[0].lower()
    return "".join(capitalised)


class ChangeCase(KeyOrValue):
    """Renames the top-level fields of a struct key/value from one case format to another.

    RocketMQ Connect's `ChangeCase$Key`/`$Value`. Options: `from` and `to`, each one of
    LOWER_UNDERSCORE, UPPER_UNDERSCORE, LOWER_CAMEL, UPPER_CAMEL, LOWER_HYPHEN
    (`from=LOWER_UNDERSCORE`, `to=LOWER_CAMEL` turns `first_name` into `firstName`). Nested structs
    keep their field names. Compiles to SQL (`named_struct`).
    """

    config_def = ConfigDef(
        ConfigKey("from", choices=CASE_FORMATS, doc="the case format of the field names now"),
        ConfigKey("to", choices=CASE_FORMATS, doc="the case format to rename the fields to"),
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        names = list(field_types(self.struct(schema)))
        renamed = [change_case(n, self.options["from"], self.options["to"]) for n in names]
        _no_duplicates(self, renamed, "to")
        return self.step(self.rebuild(zip(renamed, map(self.ref, names), strict=True)))


class ChangeCaseKey(ChangeCase):
    target = "key"


class ChangeCaseValue(ChangeCase):
    target = "value"


def _no_duplicates(transform: KeyOrValue, names: Iterable[str], option: str) -> None:
    repeated = duplicates(names)
    if repeated:
        raise option_error(
            transform,
            option,
            f"would give the {transform.target} two fields named {', '.join(map(repr, repeated))}",
        )


# --- PatternRename ------------------------------------------------------------------------------

# Python's `re` stands in for java.util.regex: field names are renamed once, at planning time.
_JAVA_FLAGS = {
    "CASE_INSENSITIVE": re.IGNORECASE,
    "MULTILINE": re.MULTILINE,
    "DOTALL": re.DOTALL,
    "COMMENTS": re.VERBOSE,
    "UNICODE_CASE": 0,
    "UNICODE_CHARACTER_CLASS": 0,
    "UNIX_LINES": 0,
    "CANON_EQ": 0,
    "LITERAL": 0,
}


def compile_java_regex(pattern: str, flags: Iterable[str], option: str) -> re.Pattern[str]:
    """A Python pattern acting like Java's `Pattern.compile(pattern, flags)` for common regexes."""
    bits = 0
    flag_list = list(flags)
    for flag in flag_list:
        if flag not in _JAVA_FLAGS:
            raise ConfigException(
                option + ".flags", f"unknown flag {flag!r}; one of {', '.join(_JAVA_FLAGS)}"
            )
        bits |= _JAVA_FLAGS[flag]
    # Java's \w, \d and case folding are ASCII-only unless asked for Unicode.
    if not {"UNICODE_CASE", "UNICODE_CHARACTER_CLASS"} & set(flag_list):
        bits |= re.ASCII
    if "LITERAL" in flag_list:
        pattern = re.escape(pattern)
    else:
        pattern = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)  # Java's named groups
    try:
        return re.compile(pattern, bits)
    except re.error as exc:
        raise ConfigException(option, f"invalid regular expression {pattern!r}: {exc}") from None


def java_replacement(replacement: str, pattern: re.Pattern[str]) -> Callable[[re.Match[str]], str]:
    """A `re.sub` replacement function for a Java replacement string (`$1`, `${name}`, `\\$`).

    Raises ValueError when it refers to a group the pattern does not have.
    """
    parts: list[tuple[bool, str | int]] = []  # (is a group reference, text or group)
    text: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 == len(replacement):
                raise ValueError("a trailing backslash escapes nothing")
            text.append(replacement[i + 1])
            i += 2
            continue
        if char != "$":
            text.append(char)
            i += 1
            continue
        group: str | int
        i += 1
        if i < len(replacement) and replacement[i] == "{":
            end = replacement.find("}", i)
            if end < 0:
                raise ValueError("'${' without a closing '}'")
            group = replacement[i + 1 : end]
            if group not in pattern.groupindex:
                raise ValueError(f"the pattern has no group named {group!r}")
            i = end + 1
        elif i < len(replacement) and replacement[i] in "0123456789":
            group = int(replacement[i])
            if group > pattern.groups:
                raise ValueError(f"the pattern has no group {group}")
            i += 1
            # Like Java, take more digits only while they still name an existing group.
            while (
                i < len(replacement)
                and replacement[i] in "0123456789"
                and group * 10 + int(replacement[i]) <= pattern.groups
            ):
                group = group * 10 + int(replacement[i])
                i += 1
        else:
            raise ValueError("'$' must be followed by a group number or {name} (use \\$ for '$')")
        parts.append((False, "".join(text)))
        parts.append((True, group))
        text = []
    parts.append((False, "".join(text)))

    def replace(match: re.Match[str]) -> str:
        return "".join(
            (match.group(part) or "") if is_group else str(part) for is_group, part in parts
        )

    return replace


class PatternRename(KeyOrValue):
    """Renames top-level struct fields whose names match a regular expression.

    RocketMQ Connect's `PatternRename$Key`/`$Value`. Options: `field.pattern` (regex searched in
    each field name), `field.pattern.flags` (optional list of java.util.regex flag names, e.g.
    CASE_INSENSITIVE), `field.replacement` (replaces every match; `$1`/`${name}` refer to groups;
    empty by default, which deletes the match). Compiles to SQL (`named_struct` with the new names).
    """

    config_def = ConfigDef(
        ConfigKey("field.pattern", doc="regular expression searched in each field name"),
        ConfigKey("field.pattern.flags", type="list", default=(), doc="e.g. CASE_INSENSITIVE"),
        ConfigKey("field.replacement", default="", doc="replacement for each match ($1 …)"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        self.pattern = compile_java_regex(
            self.options["field.pattern"], self.options["field.pattern.flags"], "field.pattern"
        )
        try:
            self.replace = java_replacement(self.options["field.replacement"], self.pattern)
        except ValueError as exc:
            raise ConfigException("field.replacement", str(exc)) from None

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        names = list(field_types(self.struct(schema)))
        renamed = [self.pattern.sub(self.replace, n) for n in names]
        _no_duplicates(self, renamed, "field.replacement")
        if "" in renamed:
            raise option_error(self, "field.replacement", "would rename a field to ''")
        return self.step(self.rebuild(zip(renamed, map(self.ref, names), strict=True)))


class PatternRenameKey(PatternRename):
    target = "key"


class PatternRenameValue(PatternRename):
    target = "value"


# --- ExtractNestedField -------------------------------------------------------------------------


class ExtractNestedField(KeyOrValue):
    """Copies a field of a nested struct (`value.outer.inner`) into a new top-level field.

    RocketMQ Connect's `ExtractNestedField$Key`/`$Value`. Options: `input.outer.field.name` (a
    struct field), `input.inner.field.name` (a field of that struct), `output.field.name` (the new
    top-level field; an existing field of that name is replaced in place). Compiles to SQL.
    """

    config_def = ConfigDef(
        ConfigKey("input.outer.field.name", doc="the top-level struct field to read from"),
        ConfigKey("input.inner.field.name", doc="the field of that struct to copy"),
        ConfigKey("output.field.name", doc="name of the new top-level field"),
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        struct = self.struct(schema)
        outer = self.options["input.outer.field.name"]
        inner = self.options["input.inner.field.name"]
        output = self.options["output.field.name"]
        self.check_fields(struct, [outer], "input.outer.field.name")
        outer_type = field_types(struct)[outer]
        if not isinstance(outer_type, dict) or outer_type.get("type") != "struct":
            raise option_error(
                self,
                "input.outer.field.name",
                f"field {outer!r} is {type_label(outer_type)}, not a struct",
            )
        if inner not in field_types(outer_type):
            raise option_error(
                self,
                "input.inner.field.name",
                f"{self.target}.{outer} has no field {inner!r} "
                f"(fields: {', '.join(map(repr, field_types(outer_type))) or 'none'})",
            )
        pairs = [(n, self.ref(n)) for n in field_types(struct)]
        copied = self.ref(outer, inner)
        if output in field_types(struct):
            pairs = [(n, copied if n == output else e) for n, e in pairs]
        else:
            pairs.append((output, copied))
        return self.step(self.rebuild(pairs))


class ExtractNestedFieldKey(ExtractNestedField):
    target = "key"


class ExtractNestedFieldValue(ExtractNestedField):
    target = "value"


# --- SetMaximumPrecision ------------------------------------------------------------------------


class SetMaximumPrecision(KeyOrValue):
    """Lowers the precision of decimals above a maximum: `decimal(p, s)` → `decimal(precision, s)`.

    RocketMQ Connect's `SetMaximumPrecision$Key`/`$Value`; applies to a decimal key/value or to the
    top-level decimal fields of a struct. Options: `precision` (1 to 38). The scale is kept
    (lowered to the precision if larger). A value that does not fit fails the query (Spark's ANSI
    cast) instead of being silently changed. Compiles to SQL (`CAST`).
    """

    config_def = ConfigDef(
        ConfigKey("precision", type="int", min=1, doc="the largest decimal precision to keep")
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        if self.options["precision"] > 38:
            raise ConfigException("precision", "Spark decimals have at most 38 digits")

    def _narrowed(self, expression: str, type_: Any) -> str | None:
        decimal = decimal_of(type_)
        limit = self.options["precision"]
        if decimal is None or decimal[0] <= limit:
            return None
        return f"CAST({expression} AS DECIMAL({limit}, {min(decimal[1], limit)}))"

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        type_ = column_type(schema, self.target)
        whole = self._narrowed(self.ref(), type_)
        if whole is not None:
            return self.step(whole)
        if not isinstance(type_, dict) or type_.get("type") != "struct":
            return SqlStep()  # nothing to narrow
        narrowed = {n: self._narrowed(self.ref(n), t) for n, t in field_types(type_).items()}
        if not any(narrowed.values()):
            return SqlStep()
        return self.step(self.rebuild((n, e or self.ref(n)) for n, e in narrowed.items()))


class SetMaximumPrecisionKey(SetMaximumPrecision):
    target = "key"


class SetMaximumPrecisionValue(SetMaximumPrecision):
    target = "value"


# --- InsertField --------------------------------------------------------------------------------


class InsertField(KeyOrValue):
    """Appends fields from the record's metadata or a constant to a struct key/value.

    Kafka's `InsertField$Key`/`$Value`. Options (all optional; Kafka's trailing `!`/`?` on a field
    name is accepted and ignored): `topic.field` (the topic, string), `timestamp.field` (the record
    timestamp), `static.field` + `static.value` (a constant string). Kafka's `partition.field` and
    `offset.field` are rejected: records here carry no Kafka partition or offset. Fields are added
    in that order after the existing ones; a NULL key/value stays NULL. Compiles to SQL.
    """

    config_def = ConfigDef(
        ConfigKey("topic.field", default=None, doc="field for the record's topic"),
        ConfigKey("timestamp.field", default=None, doc="field for the record's timestamp"),
        ConfigKey("static.field", default=None, doc="field for the constant static.value"),
        ConfigKey("static.value", default=None, doc="the constant (a string)"),
        ConfigKey("partition.field", default=None, doc="not supported"),
        ConfigKey("offset.field", default=None, doc="not supported"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        for unsupported in ("partition.field", "offset.field"):
            if self.options[unsupported] is not None:
                raise ConfigException(
                    unsupported, "not supported: records carry no Kafka partition or offset"
                )
        if self.options["static.value"] is not None and self.options["static.field"] is None:
            raise ConfigException("static.field", "required when static.value is set")
        self.inserts: list[tuple[str, str, str]] = []  # (option, field name, SQL)
        sources = {
            "topic.field": "topic",
            "timestamp.field": "timestamp",
            "static.field": literal(self.options["static.value"])
            if self.options["static.value"] is not None
            else "CAST(NULL AS STRING)",
        }
        for option, expression in sources.items():
            field = self.options[option]
            if field is not None:
                field = field[:-1] if field.endswith(("!", "?")) else field
                if not field:
                    raise ConfigException(option, "the field name is empty")
                self.inserts.append((option, field, expression))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        existing = list(field_types(self.struct(schema)))
        taken = set(existing)
        for option, field, _ in self.inserts:
            if field in taken:
                raise option_error(self, option, f"the {self.target} already has a field {field!r}")
            taken.add(field)
        pairs = [(n, self.ref(n)) for n in existing] + [(f, e) for _, f, e in self.inserts]
        return self.step(self.rebuild(pairs))


class InsertFieldKey(InsertField):
    target = "key"


class InsertFieldValue(InsertField):
    target = "value"


# --- ReplaceField -------------------------------------------------------------------------------


class ReplaceField(KeyOrValue):
    """Keeps, drops and renames top-level fields of a struct key/value.

    Kafka's `ReplaceField$Key`/`$Value`. Options: `include` (keep only these), `exclude` (drop
    these; wins over `include`), `renames` (`old:new,old2:new2`). Kafka's older names `whitelist`
    and `blacklist` are accepted when `include`/`exclude` are not set. Every named field must exist.
    Compiles to SQL (`named_struct`).
    """

    config_def = ConfigDef(
        ConfigKey("include", type="list", default=(), doc="fields to keep (default: all)"),
        ConfigKey("exclude", type="list", default=(), doc="fields to drop"),
        ConfigKey("renames", type="list", default=(), doc="old:new pairs"),
        ConfigKey("whitelist", type="list", default=(), doc="older name of include"),
        ConfigKey("blacklist", type="list", default=(), doc="older name of exclude"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        self.include_key = "include" if self.options["include"] else "whitelist"
        self.exclude_key = "exclude" if self.options["exclude"] else "blacklist"
        self.renames: dict[str, str] = {}
        for pair in self.options["renames"]:
            old, sep, new = pair.partition(":")
            if not sep or not old or not new or ":" in new:
                raise ConfigException("renames", f"expected old:new, got {pair!r}")
            if old in self.renames:
                raise ConfigException("renames", f"renames {old!r} twice")
            self.renames[old] = new

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        struct = self.struct(schema)
        include = self.options[self.include_key]
        exclude = set(self.options[self.exclude_key])
        self.check_fields(struct, include, self.include_key)
        self.check_fields(struct, sorted(exclude), self.exclude_key)
        self.check_fields(struct, self.renames, "renames")
        kept = [
            n for n in field_types(struct) if n not in exclude and (not include or n in include)
        ]
        renamed = [self.renames.get(n, n) for n in kept]
        _no_duplicates(self, renamed, "renames")
        return self.step(self.rebuild(zip(renamed, map(self.ref, kept), strict=True)))


class ReplaceFieldKey(ReplaceField):
    target = "key"


class ReplaceFieldValue(ReplaceField):
    target = "value"


# --- MaskField ----------------------------------------------------------------------------------

_INT_RANGES = {
    "byte": 2**7,
    "short": 2**15,
    "integer": 2**31,
    "long": 2**63,
}
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class MaskField(KeyOrValue):
    """Replaces the given fields of a struct key/value with an empty value or a replacement.

    Kafka's `MaskField$Key`/`$Value`. Options: `fields` (list), `replacement` (optional). Without a
    replacement a field becomes '' (strings), 0 (numbers), false (booleans), the epoch
    (dates/timestamps), midnight (times), an empty array/map, or NULL (other types). A replacement
    applies to string and numeric fields only and must parse as the field's type. NULL fields stay
    NULL. Compiles to SQL.
    """

    config_def = ConfigDef(
        ConfigKey("fields", type="list", doc="fields to mask"),
        ConfigKey("replacement", default=None, doc="replacement for strings and numbers"),
    )

    def _masked(self, field: str, type_: Any) -> str:
        replacement = self.options["replacement"]
        if replacement is None:
            return _empty_of(type_)
        if is_string(type_):
            return literal(replacement)
        kind = type_label(type_)
        decimal = decimal_of(type_)
        valid = False
        if kind in INTEGRAL:
            valid = re.fullmatch(r"[+-]?\d+", replacement.strip()) is not None and (
                -_INT_RANGES[kind] <= int(replacement) < _INT_RANGES[kind]
            )
        elif kind in FRACTIONAL:
            valid = _NUMBER.fullmatch(replacement.strip()) is not None
        elif decimal is not None:
            valid = _fits_decimal(replacement, *decimal)
        else:
            raise option_error(
                self,
                "replacement",
                f"cannot replace field {field!r} of type {kind} (only strings "
                "and numbers take a replacement)",
            )
        if not valid:
            raise option_error(
                self, "replacement", f"{replacement!r} is not a valid {kind} for field {field!r}"
            )
        return f"CAST({literal(replacement.strip())} AS {sql_type(type_)})"

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        struct = self.struct(schema)
        fields = set(self.options["fields"])
        self.check_fields(struct, sorted(fields), "fields")
        pairs = []
        for name, type_ in field_types(struct).items():
            expression = self.ref(name)
            if name in fields:
                expression = (
                    f"CASE WHEN {expression} IS NULL THEN {expression} "
                    f"ELSE {self._masked(name, type_)} END"
                )
            pairs.append((name, expression))
        return self.step(self.rebuild(pairs))


def _empty_of(type_: Any) -> str:
    """Kafka's 'valid null' for a type, as SQL of exactly that type."""
    kind = type_label(type_)
    if is_string(type_):
        return "''"
    if kind in INTEGRAL or kind in FRACTIONAL or decimal_of(type_) is not None:
        return f"CAST(0 AS {sql_type(type_)})"
    if kind == "boolean":
        return "false"
    if kind == "date":
        return "DATE'1970-01-01'"
    if kind in ("timestamp", "timestamp_ntz"):
        return f"CAST(timestamp_seconds(0) AS {sql_type(type_)})"
    if is_time(type_):
        return f"CAST(TIME'00:00:00' AS {sql_type(type_)})"
    if kind == "array":
        return f"CAST(array() AS {sql_type(type_)})"
    if kind == "map":
        return f"CAST(map() AS {sql_type(type_)})"
    return f"CAST(NULL AS {sql_type(type_)})"


def _fits_decimal(text: str, precision: int, scale: int) -> bool:
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return False
    if not number.is_finite():
        return False
    integer_digits = len(str(int(abs(number)))) if abs(number) >= 1 else 0
    return integer_digits <= precision - scale


class MaskFieldKey(MaskField):
    target = "key"


class MaskFieldValue(MaskField):
    target = "value"


# --- Cast ---------------------------------------------------------------------------------------

CAST_TYPES = {
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
}
# Kafka renders a Timestamp (and a Time) cast to string as ISO-8601 in UTC.
_ISO_UTC = literal("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
_ISO_TIME_UTC = literal("HH:mm:ss.SSS'Z'")


def _time_as_timestamp(time: str) -> str:
    """SQL of a TIME as Kafka sees a Time: that time of day on 1970-01-01 UTC."""
    return f"timestamp_micros(time_to_micros({time}))"


def utc_format(timestamp: str, pattern: str) -> str:
    """SQL formatting a timestamp's UTC wall-clock time (Kafka formats in UTC, Spark in the
    session time zone)."""
    return f"date_format(to_utc_timestamp({timestamp}, current_timezone()), {pattern})"


class Cast(KeyOrValue):
    """Casts the whole key/value, or some fields of a struct key/value, to a primitive type.

    Kafka's `Cast$Key`/`$Value`. Options: `spec`, either one type for the whole key/value (`int32`)
    or `field:type` pairs (`id:int64,score:float64`). Types: int8, int16, int32, int64, float32,
    float64, boolean, string. Conversions are Spark's `CAST` (ANSI: a string that is not a number
    fails the query), except: timestamps cast to integers give epoch milliseconds and to strings
    ISO-8601 UTC, dates epoch milliseconds, times milliseconds since midnight and strings
    `HH:mm:ss.SSSZ` (as Kafka), binary to string base64, and structs/arrays/maps to string JSON.
    Compiles to SQL.
    """

    config_def = ConfigDef(ConfigKey("spec", type="list", doc="type, or field:type,field2:type"))

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        spec = self.options["spec"]
        self.whole: str | None = None
        self.fields: dict[str, str] = {}
        if len(spec) == 1 and ":" not in spec[0]:
            self.whole = _cast_type(spec[0])
            return
        for item in spec:
            field, sep, type_ = item.rpartition(":")
            if not sep or not field:
                raise ConfigException("spec", f"expected field:type, got {item!r}")
            if field in self.fields:
                raise ConfigException("spec", f"casts field {field!r} twice")
            self.fields[field] = _cast_type(type_)

    def _cast(self, expression: str, source: Any, target: str, what: str) -> str:
        kind = type_label(source)
        if target == "string":
            if kind in ("struct", "array", "map"):
                return f"to_json({expression})"
            if kind == "binary":
                return f"base64({expression})"
            if kind == "timestamp":
                return utc_format(expression, _ISO_UTC)
            if is_time(source):
                return utc_format(_time_as_timestamp(expression), _ISO_TIME_UTC)
            return f"CAST({expression} AS STRING)"
        if kind in ("struct", "array", "map", "binary") or (
            (kind in ("date", "timestamp") or is_time(source)) and target == "boolean"
        ):
            raise option_error(self, "spec", f"cannot cast {what} of type {kind} to {target}")
        if kind == "timestamp":
            expression = f"unix_millis({expression})"
        elif is_time(source):
            expression = f"time_to_millis({expression})"
        elif kind == "date":
            expression = f"CAST(unix_date({expression}) AS BIGINT) * 86400000"
        return f"CAST({expression} AS {CAST_TYPES[target]})"

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        type_ = column_type(schema, self.target)
        if self.whole is not None:
            if type_label(type_) == "struct":
                raise option_error(
                    self, "spec", f"the {self.target} is a struct: name fields as field:type"
                )
            return self.step(self._cast(self.ref(), type_, self.whole, f"the {self.target}"))
        if type_label(type_) != "struct":
            raise option_error(
                self,
                "spec",
                f"field casts need a struct {self.target}, but it is {type_label(type_)}; "
                "give a single type to cast the whole of it",
            )
        self.check_fields(type_, self.fields, "spec")
        pairs = []
        for name, field_type in field_types(type_).items():
            expression = self.ref(name)
            if name in self.fields:
                expression = self._cast(expression, field_type, self.fields[name], repr(name))
            pairs.append((name, expression))
        return self.step(self.rebuild(pairs))


def _cast_type(name: str) -> str:
    type_ = name.strip().lower()  # Kafka accepts any case
    if type_ not in CAST_TYPES:
        raise ConfigException("spec", f"unknown type {name!r}; one of {', '.join(CAST_TYPES)}")
    return type_


class CastKey(Cast):
    target = "key"


class CastValue(Cast):
    target = "value"


# --- TimestampConverter -------------------------------------------------------------------------

TIMESTAMP_TYPES = ("string", "unix", "Date", "Time", "Timestamp")
UNIX_PRECISIONS = ("seconds", "milliseconds", "microseconds", "nanoseconds")
_DAY_MICROS = 86_400_000_000


class TimestampConverter(KeyOrValue):
    """Converts a timestamp between a string, epoch number, date, time of day and timestamp.

    Kafka's `TimestampConverter$Key`/`$Value`. Options: `field` (a top-level field; empty converts
    the whole key/value), `target.type` (string, unix, Date, Time, Timestamp), `format` (datetime
    pattern, needed to write or read strings; Spark's patterns, close to SimpleDateFormat),
    `unix.precision` (seconds, milliseconds (default), microseconds, nanoseconds). The input may be
    a string, an integer (epoch in `unix.precision`), a date, a time or a timestamp. As in Kafka,
    strings are read and written in UTC; Date is midnight UTC (a Spark date); Time is the UTC time
    of day (a Spark TIME(6), sluice's Time), and read as that time on 1970-01-01. Compiles to SQL.
    """

    config_def = ConfigDef(
        ConfigKey("field", default=None, doc="field to convert (default: the whole key/value)"),
        ConfigKey("target.type", choices=TIMESTAMP_TYPES, doc="what to convert to"),
        ConfigKey("format", default=None, doc="datetime pattern for strings"),
        ConfigKey(
            "unix.precision",
            default="milliseconds",
            choices=UNIX_PRECISIONS,
            doc="unit of epoch numbers read or written",
        ),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        if self.options["target.type"] == "string" and self.options["format"] is None:
            raise ConfigException("format", "required when target.type is string")

    def _to_timestamp(self, expression: str, source: Any, what: str) -> str:
        kind = type_label(source)
        precision = self.options["unix.precision"]
        if kind == "timestamp":
            return expression
        if kind == "timestamp_ntz":  # a wall-clock time: read it as UTC, like a string
            return f"from_utc_timestamp(CAST({expression} AS TIMESTAMP), current_timezone())"
        if kind == "date":
            return f"timestamp_seconds(CAST(unix_date({expression}) AS BIGINT) * 86400)"
        if is_time(source):
            return _time_as_timestamp(expression)
        if kind in INTEGRAL:
            return {
                "seconds": f"timestamp_seconds({expression})",
                "milliseconds": f"timestamp_millis({expression})",
                "microseconds": f"timestamp_micros({expression})",
                "nanoseconds": f"timestamp_micros({expression} DIV 1000)",
            }[precision]
        if is_string(source):
            if self.options["format"] is None:
                raise option_error(self, "format", f"required to read {what}, a string")
            parsed = f"to_timestamp({expression}, {literal(self.options['format'])})"
            return f"from_utc_timestamp({parsed}, current_timezone())"
        message = f"cannot convert {what} of type {kind} (expected a string, integer, date, "
        message += "time or timestamp)"
        if self.options["field"] is None:
            raise ConfigException(f"transforms.{self.name}", message)
        raise option_error(self, "field", message)

    def _from_timestamp(self, ts: str) -> str:
        target = self.options["target.type"]
        if target == "Timestamp":
            return ts
        if target == "Date":
            return f"date_from_unix_date(CAST(floor(unix_micros({ts}) / {_DAY_MICROS}) AS INT))"
        if target == "Time":
            return f"time_from_micros(pmod(unix_micros({ts}), {_DAY_MICROS}))"
        if target == "string":
            return utc_format(ts, literal(self.options["format"]))
        return {
            "seconds": f"unix_seconds({ts})",
            "milliseconds": f"unix_millis({ts})",
            "microseconds": f"unix_micros({ts})",
            "nanoseconds": f"unix_micros({ts}) * 1000",
        }[self.options["unix.precision"]]

    def _convert(self, expression: str, source: Any, what: str) -> str:
        return self._from_timestamp(self._to_timestamp(expression, source, what))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        field = self.options["field"]
        if field is None:
            type_ = column_type(schema, self.target)
            return self.step(self._convert(self.ref(), type_, f"the {self.target}"))
        struct = self.struct(schema)
        self.check_fields(struct, [field], "field")
        pairs = [
            (n, self._convert(self.ref(n), t, f"field {n!r}") if n == field else self.ref(n))
            for n, t in field_types(struct).items()
        ]
        return self.step(self.rebuild(pairs))


class TimestampConverterKey(TimestampConverter):
    target = "key"


class TimestampConverterValue(TimestampConverter):
    target = "value"


# --- Flatten ------------------------------------------------------------------------------------


class Flatten(KeyOrValue):
    """Turns nested struct fields into top-level fields named `outer.inner` (at any depth).

    Kafka's `Flatten$Key`/`$Value`. Options: `delimiter` (default `.`). Arrays and maps are kept
    as they are; a NULL nested struct gives NULL fields. Names that collide after flattening are an
    error. Compiles to SQL (`named_struct`).
    """

    config_def = ConfigDef(ConfigKey("delimiter", default=".", doc="joins nested field names"))

    def _leaves(self, struct: Any, path: tuple[str, ...]) -> Iterable[tuple[str, str]]:
        for name, type_ in field_types(struct).items():
            if isinstance(type_, dict) and type_.get("type") == "struct":
                yield from self._leaves(type_, (*path, name))
            else:
                yield self.options["delimiter"].join((*path, name)), self.ref(*path, name)

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        pairs = list(self._leaves(self.struct(schema), ()))
        _no_duplicates(self, [n for n, _ in pairs], "delimiter")
        return self.step(self.rebuild(pairs))


class FlattenKey(Flatten):
    target = "key"


class FlattenValue(Flatten):
    target = "value"
