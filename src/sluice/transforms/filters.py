"""Transforms that drop records: Kafka's `Filter` with a predicate, RocketMQ's `PatternFilter`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
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

PREDICATES = ("TopicNameMatches", "HasHeaderKey", "RecordIsTombstone")
_KAFKA_PREDICATES = "org.apache.kafka.connect.transforms.predicates."


def whole_match(expression: str, pattern: str) -> str:
    """SQL: `expression` matches all of the Java regex `pattern` (Java's `Matcher.matches`)."""
    anchored = r"\A(?:" + pattern + r")\z"
    return f"{expression} RLIKE {literal(anchored)}"


class Filter(Transform):
    """Drops the records for which a predicate holds (Kafka's `Filter` with a predicate).

    Options: `predicate.class`, one of `TopicNameMatches` (with `predicate.pattern`, a Java regex
    the whole topic must match), `HasHeaderKey` (with `predicate.name`), `RecordIsTombstone` (the
    value is NULL); Kafka's `org.apache.kafka.connect.transforms.predicates.…` names work too.
    `negate` (default false) drops the records for which it does not hold. Compiles to SQL (a
    `WHERE`).
    """

    config_def = ConfigDef(
        ConfigKey("predicate.class", doc=f"one of {', '.join(PREDICATES)}"),
        ConfigKey("predicate.pattern", default=None, doc="regex for TopicNameMatches"),
        ConfigKey("predicate.name", default=None, doc="header name for HasHeaderKey"),
        ConfigKey("negate", type="bool", default=False, doc="drop records that do NOT match"),
    )

    def configure(self, config: Mapping[str, str], *, name: str | None = None) -> None:
        super().configure(config, name=name)
        predicate = self.options["predicate.class"].strip().removeprefix(_KAFKA_PREDICATES)
        if predicate not in PREDICATES:
            raise ConfigException(
                "predicate.class", f"must be one of {', '.join(PREDICATES)}, got {predicate!r}"
            )
        self.predicate = predicate
        needs = {"TopicNameMatches": "predicate.pattern", "HasHeaderKey": "predicate.name"}
        if predicate in needs and self.options[needs[predicate]] is None:
            raise ConfigException(needs[predicate], f"required by {predicate}")

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        if self.predicate == "TopicNameMatches":
            holds = whole_match(quote("topic"), self.options["predicate.pattern"])
        elif self.predicate == "HasHeaderKey":
            name = literal(self.options["predicate.name"])
            holds = f"array_contains(map_keys({quote('headers')}), {name})"
        else:
            holds = f"{quote('value')} IS NULL"
        # A NULL topic or headers means the predicate does not hold.
        holds = f"coalesce({holds}, false)"
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
