"""The lake sinks' configuration: the keys every lake sink shares (`ROW_KEYS`: which topics, how a
record becomes a row, how rows are partitioned, `roll.interval.ms`), the keys of each sink
(`PARQUET_CONFIG`, `DELTA_CONFIG`, `ICEBERG_CONFIG`), and `RowSettings`, the typed form of the
row keys.

Partitions: `partition.fields` names row columns; `partition.time.format` (a `strftime` pattern,
e.g. `%Y-%m-%d`) fills the column `partition.time.column` from `partition.time.field` (a
timestamp column; default the record's timestamp) and partitions by it, after the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.sdk import ConfigDef, ConfigException, ConfigKey

ROLL_KEY = ConfigKey(
    "roll.interval.ms",
    type="int",
    default=0,
    min=0,
    doc="publish (files, version, snapshot) at most this often; 0: every micro-batch of the "
    "worker's interval",
)
#: `roll.interval.ms` alone: what a lake connector's micro-batch interval is read from
ROLL_CONFIG = ConfigDef(ROLL_KEY)
ROW_KEYS = (
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey(
        "value.format",
        default="struct",
        choices=("struct", "raw"),
        doc="struct: the value's fields (or JSON object keys) become columns; raw: one `value`",
    ),
    ConfigKey("record.metadata", type="bool", default=True, doc="add the _topic, _key… columns"),
    ConfigKey("partition.fields", type="list", default=(), doc="columns to partition by"),
    ConfigKey("partition.time.format", default="", doc="strftime pattern of a time partition"),
    ConfigKey("partition.time.field", default="", doc="timestamp column (default: record time)"),
    ConfigKey("partition.time.column", default="dt", doc="name of the time partition column"),
    ROLL_KEY,
)


PARQUET_CONFIG = ConfigDef(
    *ROW_KEYS,
    ConfigKey("path", type="path", doc="folder of the table"),
    ConfigKey("format", default="parquet", choices=("parquet", "json"), doc="parquet | json"),
    ConfigKey("file.max.bytes", type="int", default=128 << 20, min=1024, doc="roll size"),
    ConfigKey(
        "parquet.compression",
        default="snappy",
        choices=("none", "snappy", "gzip", "zstd", "lz4", "brotli"),
        doc="codec of Parquet files",
    ),
    ConfigKey("staging.dir", type="path", default="", doc="where tasks stage micro-batches"),
)

DELTA_CONFIG = ConfigDef(
    *ROW_KEYS,
    ConfigKey("delta.table.path", type="path", doc="folder of the Delta table"),
    ConfigKey("file.max.bytes", type="int", default=128 << 20, min=1 << 20, doc="data file size"),
    ConfigKey("staging.dir", type="path", default="", doc="where tasks stage micro-batches"),
)

ICEBERG_CONFIG = ConfigDef(
    *ROW_KEYS,
    ConfigKey("iceberg.table", pattern=r"[^.]+(\.[^.]+)+", doc="namespace.table"),
    ConfigKey("iceberg.warehouse", type="path", doc="folder of the tables' data and metadata"),
    ConfigKey("iceberg.catalog.uri", type="password", default="", doc="SQLAlchemy URL"),
    ConfigKey("iceberg.catalog.name", default="sluice", doc="the catalog's name"),
    ConfigKey("file.max.bytes", type="int", default=128 << 20, min=1 << 20, doc="data file size"),
    ConfigKey("staging.dir", type="path", default="", doc="where tasks stage micro-batches"),
)


@dataclass(frozen=True)
class RowSettings:
    """How a sink turns the sink frame into rows (the keys of `ROW_KEYS`)."""

    raw: bool
    metadata: bool
    fields: tuple[str, ...]
    time_format: str
    time_field: str
    time_column: str

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RowSettings:
        time_format = values["partition.time.format"]
        if time_format and "%" not in time_format:
            raise ConfigException(
                "partition.time.format", f"{time_format!r} has no strftime field such as %Y"
            )
        if "/" in time_format:
            raise ConfigException(
                "partition.time.format", "must not contain '/': it fills one partition column"
            )
        return cls(
            raw=values["value.format"] == "raw",
            metadata=values["record.metadata"],
            fields=tuple(values["partition.fields"]),
            time_format=time_format,
            time_field=values["partition.time.field"],
            time_column=values["partition.time.column"],
        )

    @property
    def partition_by(self) -> list[str]:
        """The partition columns, in directory order."""
        return [*self.fields, *([self.time_column] if self.time_format else [])]
