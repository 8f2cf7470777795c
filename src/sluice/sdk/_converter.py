"""The converter contract (Kafka's `connect/api/storage`), beside `Transform`: a configured
`Converter` builds an `Encoder` (source side) or a `Decoder` (sink side) bound to one schema.

Both are built on the driver when a query is planned and pickled to the executors. Each offers its
work in up to two forms, and the engine picks one:

* **Spark SQL text** (`sql`): expressions over a column, run vectorised in the JVM (`to_json`,
  `from_json`, `cast`, …). Preferred whenever the format allows.
* **Arrow** (`arrow`): a `pyarrow.Array` in, an array out. `arrow_mode` says how it runs:
  `"vectorised"` (Arrow compute / numpy: cheap, so a pipeline without transforms stays fused in
  Python), `"per-record"` (a Python loop: correct, slower), or None (no Arrow form).

Decoders never drop or null a bad record silently: alongside the values they return one error
reason per record (null when the record decoded). Built-in converters: `sluice.converters`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from sluice.sdk._config import ConfigDef
from sluice.sdk._errors import ConfigException
from sluice.sdk._schema import Schema
from sluice.sdk.extras import Requirement

ROLES = ("key", "value")


class RegisteredSchema(Protocol):
    """One version of a subject's schema in a schema registry."""

    id: int
    version: int
    schema: str  # canonical Connect JSON text (`sluice.converters.canonical`)


class SchemaRegistry(Protocol):
    """Where topic schemas live (implemented by `sluice.store.schemas.SqliteSchemaRegistry`).

    Subjects are `<topic>-key` and `<topic>-value`. Ids are global: one id per distinct schema
    text. Must pickle (executors look schemas up by id).
    """

    def register(self, subject: str, schema: str) -> RegisteredSchema: ...

    def schema_id(self, schema: str) -> int: ...

    def latest(self, subject: str) -> RegisteredSchema | None: ...

    def by_id(self, schema_id: int) -> str | None: ...


def subject(topic: str, role: str) -> str:
    """The registry subject of a topic's keys or values (Confluent's topic-name strategy)."""
    return f"{topic}-{role}"


class RecordError(ValueError):
    """An encoder could not convert record `index` of the array it was given."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"record {index}: {reason}")
        self.index = index
        self.reason = reason


@dataclass(frozen=True)
class DecodeSql:
    """A decoder's Spark SQL form.

    `parse` (optional) is evaluated first, as a column named by the `tmp` argument of
    `Decoder.sql`, so that an expensive parse (`from_json`) runs once; `value` and `error` may
    refer to it. `error` is a string expression, null when the record decoded, else the reason;
    None when decoding cannot fail.
    """

    value: str
    error: str | None = None
    parse: str | None = None


@dataclass(frozen=True)
class Decoded:
    """A decoder's Arrow result: `values` typed as the decoder's schema, and `errors` (strings,
    null where the record decoded; None when none failed). Failed records have null values."""

    values: pa.Array
    errors: pa.Array | None = None


class _Codec:
    """What encoders and decoders share: the converter's name, the role and the bound schema,
    and which of their forms (Spark SQL, Arrow) the engine should use."""

    arrow_mode: str | None = None
    has_sql = False

    def __init__(self, converter: str, role: str, schema: Schema) -> None:
        self.converter = converter
        self.role = role
        self.schema = schema

    @property
    def prefers_arrow(self) -> bool:
        """True when the Arrow form is the one to use (vectorised, or there is no SQL form)."""
        if self.arrow_mode is None:
            return False
        return self.arrow_mode == "vectorised" or not self.has_sql


class Encoder(_Codec):
    """Turns values of one schema into topic bytes (source side). Picklable.

    `sql(column)` returns a Spark SQL expression of type BINARY (None unless `has_sql`).
    `sql_error(column)` returns a string expression, null when a record can be written, else why
    not (or None when writing cannot fail). `arrow(array)` returns a binary array and raises
    `RecordError` for a record it cannot write.
    """

    def sql(self, column: str) -> str | None:
        return None

    def sql_error(self, column: str) -> str | None:
        return None

    def arrow(self, array: pa.Array) -> pa.Array:
        raise NotImplementedError(f"{self.converter} has no Arrow form for this schema")


class Decoder(_Codec):
    """Turns topic bytes back into values of `schema` (sink side). Picklable.

    `sql(column, tmp)` returns a `DecodeSql` (None unless `has_sql`); `arrow(array)` takes a
    binary array and returns a `Decoded`. Reasons name the role: `"value is not valid JSON: …"`.
    """

    def sql(self, column: str, tmp: str) -> DecodeSql | None:
        return None

    def arrow(self, array: pa.Array) -> Decoded:
        raise NotImplementedError(f"{self.converter} has no Arrow form for this schema")


class Converter:
    """Base of every converter: parses its options and builds encoders and decoders.

    Options arrive without their prefix (`schemas.enable`, not `value.converter.schemas.enable`);
    errors name the full key. Subclasses set `config_def` and implement `encoder` and `decoder`.
    Converters that set `uses_registry` get the topics' registered schemas on the sink side, and
    sources using them register the schemas they write.
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    uses_registry: ClassVar[bool] = False
    #: False when its decoders never have a Spark SQL form (they run in Arrow): a sink may then
    #: start before a topic's schema is registered and take it when its first records arrive.
    decodes_in_sql: ClassVar[bool] = True
    #: libraries it imports that the core install may lack (`sluice.sdk.extras`): a config naming
    #: it is refused, naming the install line, when one is missing
    requires: ClassVar[tuple[Requirement, ...]] = ()

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.role = "value"
        self.registry: SchemaRegistry | None = None

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def key(self) -> str:
        """The config key this converter was named by (`value.converter`)."""
        return f"{self.role}.converter"

    def configure(
        self,
        options: Mapping[str, str],
        *,
        role: str = "value",
        registry: SchemaRegistry | None = None,
    ) -> None:
        """Validate and keep the options (driver). `role` is "key" or "value"."""
        if role not in ROLES:
            raise ValueError(f"role must be 'key' or 'value', got {role!r}")
        self.role = role
        self.registry = registry
        try:
            self.options = self.config_def.parse(self.prepare_options(dict(options)))
        except ConfigException as exc:
            raise ConfigException(f"{self.key}.{exc.key}", exc.message.split(": ", 1)[-1]) from None

    def prepare_options(self, options: dict[str, str]) -> dict[str, str]:
        """Normalise raw options before parsing (e.g. case-insensitive choices). Optional."""
        return options

    def needs_schema(self) -> bool:
        """True if `decoder` needs the topic's registered schema (it cannot guess one)."""
        return False

    def encoder(self, schema: Schema) -> Encoder:
        """An encoder for values of `schema` (driver, when the query is planned).

        Raise `ConfigException(self.key, …)` when this converter cannot write `schema`.
        """
        raise NotImplementedError

    def decoder(self, schema: Schema | None) -> Decoder:
        """A decoder (driver). `schema` is the topics' registered schema, or None if none is."""
        raise NotImplementedError

    def cannot(self, schema: Schema) -> ConfigException:
        """The error for a schema this converter cannot write."""
        return ConfigException(self.key, f"{self.name} cannot convert {schema.to_spark_ddl()}")
