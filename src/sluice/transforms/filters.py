"""Transforms that drop records: Kafka's `Filter` with a predicate, RocketMQ's `PatternFilter`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    Predicate,
    SqlStep,
    Transform,
    column_type,
    literal,
    quote,
)
from sluice.transforms.records import (
    KeyOrValue,
    field_types,
    is_string,
    option_error,
    type_label,
)

_KAFKA_PREDICATES = "org.apache.kafka.connect.transforms.predicates."


def whole_match(expression: str, pattern: str) -> str:
    """SQL: `expression` matches all of the Java regex `pattern` (Java's `Matcher.matches`)."""
    anchored = r"\A(?:" + pattern + r")\z"
    return f"{expression} RLIKE {literal(anchored)}"


class TopicNameMatches(Predicate):
    """Holds for records whose topic matches all of the Java regex `pattern` (Kafka's predicate)."""

    topic_only = True
    config_def = ConfigDef(ConfigKey("pattern", doc="Java regex the whole topic must match"))

    def condition(self, schema: dict[str, Any]) -> str:
        return whole_match(quote("topic"), self.options["pattern"])


class HasHeaderKey(Predicate):
    """Holds for records with a header called `name` (Kafka's predicate)."""

    config_def = ConfigDef(ConfigKey("name", doc="header name"))

    def condition(self, schema: dict[str, Any]) -> str:
        return f"array_contains(map_keys({quote('headers')}), {literal(self.options['name'])})"


class RecordIsTombstone(Predicate):
    """Holds for records whose value is NULL (Kafka's predicate)."""

    def condition(self, schema: dict[str, Any]) -> str:
        return f"{quote('value')} IS NULL"


PREDICATES: dict[str, type[Predicate]] = {
    cls.__name__: cls for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)
}
#: Every name a predicate answers to: its own, and Kafka Connect's class name.
PREDICATE_NAMES: dict[str, type[Predicate]] = {
    **PREDICATES,
    **{f"{_KAFKA_PREDICATES}{name}": cls for name, cls in PREDICATES.items()},
}


class Filter(Transform):
    """Drops records: all of them alone, or with a predicate those for which it holds.

    Kafka's way: `transforms.f.predicate=p` naming a top-level `predicates.p.type=…` (the runtime
    applies the gate; `negate=true` drops the records for which it does not hold). Or inline:
    `predicate.class`, one of `TopicNameMatches` (with `predicate.pattern`), `HasHeaderKey` (with
    `predicate.name`), `RecordIsTombstone`; Kafka's `org.apache.kafka.connect.transforms.
    predicates.…` names work too, and `negate` applies. Compiles to SQL (a `WHERE`).
    """

    config_def = ConfigDef(
        ConfigKey("predicate.class", default=None, doc=f"one of {', '.join(PREDICATES)}"),
        ConfigKey("predicate.pattern", default=None, doc="regex for TopicNameMatches"),
        ConfigKey("predicate.name", default=None, doc="header name for HasHeaderKey"),
        ConfigKey("negate", type="bool", default=False, doc="drop records that do NOT match"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        self.inline: Predicate | None = None
        if self.options["predicate.class"] is None:
            return
        kind = self.options["predicate.class"].strip().removeprefix(_KAFKA_PREDICATES)
        if kind not in PREDICATES:
            raise ConfigException(
                "predicate.class", f"must be one of {', '.join(PREDICATES)}, got {kind!r}"
            )
        inline = PREDICATES[kind]()
        options = {
            k.removeprefix("predicate."): v
            for k, v in config.items()
            if k.startswith("predicate.") and v is not None
        }
        try:
            inline.configure(options, name=name)
        except ConfigException as exc:
            raise ConfigException(f"predicate.{exc.key}", f"required by {kind}") from None
        self.inline = inline

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        if self.inline is None:
            return SqlStep(where="false")  # Kafka's Filter alone drops every record
        holds = f"coalesce({self.inline.condition(schema)}, false)"
        return SqlStep(where=holds if self.options["negate"] else f"NOT {holds}")


class PatternFilter(KeyOrValue):
    """Drops records whose string key/value, or one of whose string fields, matches a regex.

    RocketMQ Connect's `PatternFilter$Key`/`$Value`. Options: `filter.pattern` (a Java regex that
    must match the whole string; RocketMQ's own key `pattern` is accepted too), `fields` (for a
    struct key/value: the string fields to test; a record is dropped when any matches),
    `filter.types` (the field types tested; only STRING, the default). NULLs never match. Compiles
    to SQL (`RLIKE` in a `WHERE`).
    """

    config_def = ConfigDef(
        ConfigKey("filter.pattern", doc="Java regex; records whose text matches it are dropped"),
        ConfigKey("fields", type="list", default=(), doc="string fields to test (structs)"),
        ConfigKey("filter.types", type="list", default=("STRING",), doc="only STRING"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        if "filter.pattern" not in config and "pattern" in config:
            config = {**config, "filter.pattern": config["pattern"]}
        super().configure(config, name=name)
        unsupported = [t for t in self.options["filter.types"] if t.upper() != "STRING"]
        if unsupported:
            raise ConfigException("filter.types", f"only STRING is supported, got {unsupported}")

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        pattern = self.options["filter.pattern"]
        type_ = column_type(schema, self.target)
        if is_string(type_):
            tests = [whole_match(self.ref(), pattern)]
        elif type_label(type_) == "struct":
            fields = self.options["fields"]
            if not fields:
                raise option_error(self, "fields", f"required: the {self.target} is a struct")
            self.check_fields(type_, fields, "fields")
            types = field_types(type_)
            for name in fields:
                if not is_string(types[name]):
                    raise option_error(
                        self, "fields", f"field {name!r} is {type_label(types[name])}, not a string"
                    )
            tests = [whole_match(self.ref(n), pattern) for n in fields]
        else:
            raise ConfigException(
                f"transforms.{self.name}",
                f"needs a string or struct {self.target}, but it is {type_label(type_)}",
            )
        return SqlStep(where=" AND ".join(f"NOT coalesce({t}, false)" for t in tests))


class PatternFilterKey(PatternFilter):
    target = "key"


class PatternFilterValue(PatternFilter):
    target = "value"
