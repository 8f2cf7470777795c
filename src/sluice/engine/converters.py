"""Converters between a record's key/value columns and the bytes stored in a topic.

They work on Spark columns (vectorised in the JVM). `key.converter` / `value.converter` pick one by
name; `StringConverter` is the default.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, StringType

from sluice.sdk import ConfigException


class Converter:
    """Turns a typed column into topic bytes (`to_topic`) and topic bytes back (`from_topic`)."""

    def to_topic(self, column: Column, type_: DataType) -> Column:
        raise NotImplementedError

    def from_topic(self, column: Column) -> Column:
        raise NotImplementedError

    def arrow_capable(self, type_: pa.DataType) -> bool:
        """True if `to_topic_arrow`/`from_topic_arrow` handle this type (fused pipelines)."""
        return pa.types.is_string(type_) or pa.types.is_binary(type_)

    def to_topic_arrow(self, array: pa.Array) -> pa.Array:
        """`to_topic` on an Arrow array (STRING or BYTES): zero-copy to binary."""
        return array.view(pa.binary()) if pa.types.is_string(array.type) else array

    def from_topic_arrow(self, array: pa.Array) -> pa.Array:
        """`from_topic` on an Arrow binary array."""
        return array


class StringConverter(Converter):
    """UTF-8 text. Non-string values are rendered as text (structs, maps, arrays as JSON)."""

    def to_topic(self, column: Column, type_: DataType) -> Column:
        if isinstance(type_, BinaryType):
            return column
        if isinstance(type_, StringType):
            return column.cast("binary")
        if type_.typeName() in ("struct", "map", "array"):
            return F.to_json(column).cast("binary")
        return column.cast("string").cast("binary")

    def from_topic(self, column: Column) -> Column:
        return column.cast("string")

    def from_topic_arrow(self, array: pa.Array) -> pa.Array:
        # A view, not a cast: like Spark's cast, it does not reject invalid UTF-8 bytes.
        return array.view(pa.string())


class ByteArrayConverter(Converter):
    """Raw bytes in, raw bytes out."""

    def to_topic(self, column: Column, type_: DataType) -> Column:
        if isinstance(type_, BinaryType):
            return column
        if isinstance(type_, StringType):
            return column.cast("binary")
        raise ConfigException(
            "value.converter", f"ByteArrayConverter cannot convert {type_.simpleString()}"
        )

    def from_topic(self, column: Column) -> Column:
        return column


CONVERTERS: dict[str, type[Converter]] = {}
for _cls in (StringConverter, ByteArrayConverter):
    CONVERTERS[_cls.__name__] = _cls
    CONVERTERS[f"sluice.engine.converters.{_cls.__name__}"] = _cls
    CONVERTERS[f"org.apache.rocketmq.connect.runtime.converter.record.{_cls.__name__}"] = _cls


CONVERTER_KEYS = ("key.converter", "value.converter")


def converter_for(config: dict[str, str], key: str) -> Converter:
    """The converter named by `config[key]` (default StringConverter)."""
    return converter_named(config.get(key, "StringConverter"), key)


def converter_named(name: str, key: str) -> Converter:
    """The converter called `name`; errors name the config `key` it came from."""
    name = name.strip()
    try:
        return CONVERTERS[name]()
    except KeyError:
        known = ", ".join(sorted(k for k in CONVERTERS if "." not in k))
        raise ConfigException(key, f"unknown converter {name!r}; known: {known}") from None
