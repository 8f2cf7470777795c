"""Converters: a record's key or value ↔ the bytes stored in a topic.

`key.converter` / `value.converter` name one (default `StringConverter`); its options are the keys
under that prefix (`value.converter.schemas.enable=false`). Built-ins, with the RocketMQ Connect
and Kafka Connect class names accepted as aliases:

| converter | topic bytes | runs as |
|---|---|---|
| `StringConverter` | UTF-8 text | SQL / vectorised Arrow |
| `ByteArrayConverter` | the bytes themselves | SQL / vectorised Arrow |
| `Double…`, `Float…`, `Long…`, `Integer…`, `ShortConverter` | big-endian, fixed width | numpy |
| `JsonConverter` | Kafka Connect JSON (envelope) | SQL; Python per record* |
| `AvroConverter` | `0x00` + 4-byte schema id + Avro | numpy; Python per record (fastavro)** |

(*) for schemas holding maps whose keys are not STRING. (**) for arrays and maps.

Plugins: a `Converter` subclass is found by its dotted path (`mypkg.mod.MyConverter`), by the name
of an entry point in the group `sluice.converters`, or after `register(cls, *aliases)`.

**Schema registry.** `JsonConverter` and `AvroConverter` use the runtime's schema registry
(`sluice.store.schemas`): a source registers the Connect schema of the keys and values it writes
under `<topic>-key` / `<topic>-value` when its query is planned (for `connect.topicname`) and before
it commits a micro-batch to any other topic (e.g. one chosen by `RegexRouter`); a new schema becomes
a new version if `schema.compatibility` allows it (`_compatibility`). A sink decodes with the latest
version registered for its topics (a fused sink plans it again at each micro-batch; see
docs/schemas.md). Topics of different schemas are decoded apart (a fused sink). A topic with
no registered schema (written by an outside producer, or not yet written) fails the start for
`JsonConverter` with `schemas.enable=true` (`AvroConverter` takes it when its first records come);
with `schemas.enable=false` the sink then receives each value's JSON text as a STRING.

**Errors (sink side).** A decoder never turns bad bytes into a silent null. The engine's decode
step adds three columns to the sink frame (`sluice.engine.converters.decode_frame`):

* `error` (string): null when both key and value decoded; else one line,
  `"<Converter>: record <topic>/<queue>@<offset>: <key|value> <reason>"`, e.g.
  `"JsonConverter: record orders/3@17: value is not valid JSON: Expecting ',' delimiter: …"`
  (`record_error` builds it). A record's key and value are null when its `error` is set.
* `raw_key`, `raw_value` (binary): the record's topic bytes when `error` is set (null otherwise),
  for a dead-letter queue.

With `errors.tolerance=none` (the default) the first record with an error fails the query with
that message, before any transform or the sink sees it, and nothing of its micro-batch is
committed; with `errors.tolerance=all` it goes to the dead-letter queue (`sluice.engine.errors`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points

from sluice.converters._avro import AvroConverter, avro_schema
from sluice.converters._base import (
    ROLES,
    Converter,
    Decoded,
    Decoder,
    DecodeSql,
    Encoder,
    RecordError,
    RegisteredSchema,
    SchemaRegistry,
    subject,
)
from sluice.converters._compatibility import CheckedRegistry, IncompatibleSchema
from sluice.converters._json import JsonConverter
from sluice.converters._primitive import (
    ByteArrayConverter,
    DoubleConverter,
    FloatConverter,
    IntegerConverter,
    LongConverter,
    ShortConverter,
    StringConverter,
)
from sluice.converters._schemas import (
    SchemaFormatError,
    arrow_type,
    canonical,
    describe,
    from_connect,
    physical_type,
    to_connect,
)
from sluice.sdk import ConfigException, extras
from sluice.sdk._config import closest

ENTRY_POINT_GROUP = "sluice.converters"
DEFAULT = "StringConverter"
BUILTIN_CONVERTERS: dict[str, type[Converter]] = {}


def register(cls: type[Converter], *aliases: str) -> None:
    """Accept `cls` under its class name, `sluice.converters.<name>` and `aliases`."""
    for name in (cls.__name__, f"sluice.converters.{cls.__name__}", *aliases):
        BUILTIN_CONVERTERS[name] = cls


_ROCKETMQ = "org.apache.rocketmq.connect.runtime.converter.record."
_KAFKA = "org.apache.kafka.connect.converters."
register(
    StringConverter,
    _ROCKETMQ + "StringConverter",
    "org.apache.kafka.connect.storage.StringConverter",
    "sluice.engine.converters.StringConverter",
)
register(
    ByteArrayConverter,
    _ROCKETMQ + "ByteArrayConverter",
    _KAFKA + "ByteArrayConverter",
    "sluice.engine.converters.ByteArrayConverter",
)
for _cls in (DoubleConverter, FloatConverter, IntegerConverter, LongConverter, ShortConverter):
    register(_cls, _ROCKETMQ + _cls.__name__, _KAFKA + _cls.__name__)
register(
    JsonConverter,
    _ROCKETMQ + "json.JsonConverter",
    _ROCKETMQ + "JsonConverter",
    "org.apache.kafka.connect.json.JsonConverter",
)
register(AvroConverter, "io.confluent.connect.avro.AvroConverter")


def converter_class(name: str, key: str) -> type[Converter]:
    """The class called `name` (built-in or alias, entry point, or `module.Class`); errors name
    the config `key`."""
    name = name.strip()
    if name in BUILTIN_CONVERTERS:
        return BUILTIN_CONVERTERS[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            try:
                cls = ep.load()
            except Exception as exc:  # a broken plugin: say which, never a bare trace
                raise ConfigException(
                    key, f"cannot load converter plugin {name!r}: {exc}"
                ) from None
            return _checked(cls, name, key)
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep:
        short = sorted(k for k in BUILTIN_CONVERTERS if "." not in k)
        near = closest(name, short, cutoff=0.8)
        if near is not None:
            raise ConfigException(key, f"unknown converter {name!r}; did you mean {near}?")
        raise ConfigException(key, f"unknown converter {name!r}; known: {', '.join(short)}")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        # a misspelt alias (`org.apache.kafka.connect.json.JsonConvertor`) is not a module
        near = closest(name, [k for k in BUILTIN_CONVERTERS if "." in k], cutoff=0.9)
        hint = f"; did you mean {near}?" if near is not None else ""
        raise ConfigException(key, f"cannot load converter {name!r}: {exc}{hint}") from None
    return _checked(cls, name, key)


def _checked(cls: object, name: str, key: str) -> type[Converter]:
    if not (isinstance(cls, type) and issubclass(cls, Converter)):
        raise ConfigException(key, f"{name!r} is not a Converter")
    return cls


def converter_from_config(
    config: Mapping[str, str], role: str, registry: SchemaRegistry | None = None
) -> Converter:
    """The configured `<role>.converter` (default StringConverter) with its options."""
    key = f"{role}.converter"
    cls = converter_class(config.get(key) or DEFAULT, key)
    missing = extras.problem(cls.requires, cls.__name__)  # e.g. AvroConverter's fastavro
    if missing is not None:
        raise ConfigException(key, missing)
    converter = cls()
    prefix = key + "."
    options = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    converter.configure(options, role=role, registry=registry)
    return converter


def record_error(converter: str, topic: str, queue: int, offset: int, reason: str) -> str:
    """The `error` column's text for a record that did not decode (see the module docstring)."""
    return f"{converter}: record {topic}/{queue}@{offset}: {reason}"


__all__ = [
    "BUILTIN_CONVERTERS",
    "DEFAULT",
    "ENTRY_POINT_GROUP",
    "ROLES",
    "AvroConverter",
    "ByteArrayConverter",
    "CheckedRegistry",
    "Converter",
    "DecodeSql",
    "Decoded",
    "Decoder",
    "DoubleConverter",
    "Encoder",
    "FloatConverter",
    "IncompatibleSchema",
    "IntegerConverter",
    "JsonConverter",
    "LongConverter",
    "RecordError",
    "RegisteredSchema",
    "SchemaFormatError",
    "SchemaRegistry",
    "ShortConverter",
    "StringConverter",
    "arrow_type",
    "avro_schema",
    "canonical",
    "converter_class",
    "converter_from_config",
    "describe",
    "from_connect",
    "physical_type",
    "record_error",
    "register",
    "subject",
    "to_connect",
]
