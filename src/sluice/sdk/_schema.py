"""Schemas of record keys and values, with their Arrow and Spark equivalents.

The field types are RocketMQ Connect's (`FieldType`): INT8 … FLOAT64, BOOLEAN, STRING, BYTES, ARRAY,
MAP, STRUCT, plus the logical types Date, Time, Timestamp and Decimal(precision, scale). A `Schema`
maps one-to-one onto an Arrow type (how records cross the Python/JVM boundary) and a Spark SQL DDL
type string (so this module never imports Spark).

Time and Timestamp carry microseconds where Kafka Connect has milliseconds (INT32 / INT64), so that
database TIME(6) and TIMESTAMP(6) values travel exactly; their names in Kafka Connect's JSON schema
form stay Kafka's (`org.apache.kafka.connect.data.Time`, `…Timestamp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import pyarrow as pa


class FieldType(Enum):
    """The physical type of a schema, named as in RocketMQ Connect."""

    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FLOAT32 = "FLOAT32"
    FLOAT64 = "FLOAT64"
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    BYTES = "BYTES"
    ARRAY = "ARRAY"
    MAP = "MAP"
    STRUCT = "STRUCT"


class Logical(Enum):
    """Logical types layered on a physical one (same meaning as Kafka/RocketMQ Connect)."""

    DATE = "Date"  # INT32 days since 1970-01-01
    TIME = "Time"  # INT64 microseconds since midnight (0 to 86_399_999_999)
    TIMESTAMP = "Timestamp"  # INT64 microseconds since the epoch, UTC
    DECIMAL = "Decimal"  # BYTES: exact decimal with `precision` and `scale`


_PRIMITIVE_ARROW: dict[FieldType, pa.DataType] = {
    FieldType.INT8: pa.int8(),
    FieldType.INT16: pa.int16(),
    FieldType.INT32: pa.int32(),
    FieldType.INT64: pa.int64(),
    FieldType.FLOAT32: pa.float32(),
    FieldType.FLOAT64: pa.float64(),
    FieldType.BOOLEAN: pa.bool_(),
    FieldType.STRING: pa.string(),
    FieldType.BYTES: pa.binary(),
}

_PRIMITIVE_DDL: dict[FieldType, str] = {
    FieldType.INT8: "tinyint",
    FieldType.INT16: "smallint",
    FieldType.INT32: "int",
    FieldType.INT64: "bigint",
    FieldType.FLOAT32: "float",
    FieldType.FLOAT64: "double",
    FieldType.BOOLEAN: "boolean",
    FieldType.STRING: "string",
    FieldType.BYTES: "binary",
}


@dataclass(frozen=True)
class Field:
    """A named member of a STRUCT schema."""

    name: str
    schema: Schema


@dataclass(frozen=True)
class Schema:
    """The type of a record key or value (or of a field inside one).

    Build them with the helpers below (`Schema.string()`, `Schema.struct(...)`, ...) rather than
    calling the constructor.
    """

    type: FieldType
    optional: bool = True
    name: str | None = None
    logical: Logical | None = None
    precision: int = 38
    scale: int = 0
    fields: tuple[Field, ...] = ()
    key_schema: Schema | None = None
    value_schema: Schema | None = None
    doc: str | None = field(default=None, compare=False)

    # -- builders ---------------------------------------------------------------------------
    @staticmethod
    def of(type_: FieldType, *, optional: bool = True) -> Schema:
        if type_ not in _PRIMITIVE_ARROW:
            raise ValueError(
                f"{type_.value} is not a primitive type; use array(), map_() or struct()"
            )
        return Schema(type_, optional=optional)

    @staticmethod
    def string(*, optional: bool = True) -> Schema:
        return Schema(FieldType.STRING, optional=optional)

    @staticmethod
    def bytes_(*, optional: bool = True) -> Schema:
        return Schema(FieldType.BYTES, optional=optional)

    @staticmethod
    def array(items: Schema, *, optional: bool = True) -> Schema:
        return Schema(FieldType.ARRAY, optional=optional, value_schema=items)

    @staticmethod
    def map_(keys: Schema, values: Schema, *, optional: bool = True) -> Schema:
        return Schema(FieldType.MAP, optional=optional, key_schema=keys, value_schema=values)

    @staticmethod
    def struct(
        *fields: Field | tuple[str, Schema], optional: bool = True, name: str | None = None
    ) -> Schema:
        members = tuple(f if isinstance(f, Field) else Field(f[0], f[1]) for f in fields)
        names = [f.name for f in members]
        if len(set(names)) != len(names):
            raise ValueError(f"struct {name or ''} has duplicate field names: {names}")
        return Schema(FieldType.STRUCT, optional=optional, name=name, fields=members)

    @staticmethod
    def date(*, optional: bool = True) -> Schema:
        return Schema(FieldType.INT32, optional=optional, logical=Logical.DATE)

    @staticmethod
    def time(*, optional: bool = True) -> Schema:
        """A time of day: microseconds since midnight (Arrow `time64[us]`, Python `datetime.time`).
        Kafka Connect's Time has milliseconds; sluice keeps microseconds, as for Timestamp."""
        return Schema(FieldType.INT64, optional=optional, logical=Logical.TIME)

    @staticmethod
    def timestamp(*, optional: bool = True) -> Schema:
        return Schema(FieldType.INT64, optional=optional, logical=Logical.TIMESTAMP)

    @staticmethod
    def decimal(precision: int, scale: int, *, optional: bool = True) -> Schema:
        if not 1 <= precision <= 38:
            raise ValueError(f"decimal precision must be 1..38, got {precision}")
        if not 0 <= scale <= precision:
            raise ValueError(f"decimal scale must be 0..precision ({precision}), got {scale}")
        return Schema(
            FieldType.BYTES,
            optional=optional,
            logical=Logical.DECIMAL,
            precision=precision,
            scale=scale,
        )

    # -- mappings ---------------------------------------------------------------------------
    def to_arrow(self) -> pa.DataType:
        """The Arrow type records of this schema travel as."""
        if self.logical is Logical.DATE:
            return pa.date32()
        if self.logical is Logical.TIME:
            return pa.time64("us")
        if self.logical is Logical.TIMESTAMP:
            return pa.timestamp("us", tz="UTC")
        if self.logical is Logical.DECIMAL:
            return pa.decimal128(self.precision, self.scale)
        if self.type is FieldType.ARRAY:
            return pa.list_(self._child(self.value_schema).to_arrow())
        if self.type is FieldType.MAP:
            return pa.map_(
                self._child(self.key_schema).to_arrow(), self._child(self.value_schema).to_arrow()
            )
        if self.type is FieldType.STRUCT:
            return pa.struct(
                [
                    pa.field(f.name, f.schema.to_arrow(), nullable=f.schema.optional)
                    for f in self.fields
                ]
            )
        return _PRIMITIVE_ARROW[self.type]

    def to_spark_ddl(self) -> str:
        """The Spark SQL type, as DDL text (`struct<a:int,b:string>`)."""
        if self.logical is Logical.DATE:
            return "date"
        if self.logical is Logical.TIME:
            # Spark's TIME (a preview type: sluice's session enables it, see
            # sluice.engine.session); it crosses the Python/JVM boundary as Arrow time64[ns].
            return "time(6)"
        if self.logical is Logical.TIMESTAMP:
            return "timestamp"
        if self.logical is Logical.DECIMAL:
            return f"decimal({self.precision},{self.scale})"
        if self.type is FieldType.ARRAY:
            return f"array<{self._child(self.value_schema).to_spark_ddl()}>"
        if self.type is FieldType.MAP:
            k, v = self._child(self.key_schema), self._child(self.value_schema)
            return f"map<{k.to_spark_ddl()},{v.to_spark_ddl()}>"
        if self.type is FieldType.STRUCT:
            inner = ",".join(
                f"`{f.name.replace('`', '``')}`:{f.schema.to_spark_ddl()}"
                + ("" if f.schema.optional else " not null")
                for f in self.fields
            )
            return f"struct<{inner}>"
        return _PRIMITIVE_DDL[self.type]

    def _child(self, child: Schema | None) -> Schema:
        if child is None:
            raise ValueError(f"{self.type.value} schema is missing its element schema")
        return child

    # -- (de)serialisation for configs and topic metadata -----------------------------------
    def to_json(self) -> dict:
        """A JSON-able description (the Kafka Connect JSON schema shape)."""
        out: dict = {"type": self.type.value.lower(), "optional": self.optional}
        if self.name:
            out["name"] = self.name
        if self.logical is not None:
            out["logical"] = self.logical.value
        if self.logical is Logical.DECIMAL:
            out["precision"], out["scale"] = self.precision, self.scale
        if self.type is FieldType.STRUCT:
            out["fields"] = [dict(f.schema.to_json(), field=f.name) for f in self.fields]
        if self.type is FieldType.ARRAY:
            out["items"] = self._child(self.value_schema).to_json()
        if self.type is FieldType.MAP:
            out["keys"] = self._child(self.key_schema).to_json()
            out["values"] = self._child(self.value_schema).to_json()
        return out

    @staticmethod
    def from_json(data: dict) -> Schema:
        """Inverse of `to_json`."""
        type_ = FieldType(str(data["type"]).upper())
        logical = Logical(data["logical"]) if data.get("logical") else None
        optional = bool(data.get("optional", True))
        if type_ is FieldType.STRUCT:
            return Schema.struct(
                *[(f["field"], Schema.from_json(f)) for f in data.get("fields", [])],
                optional=optional,
                name=data.get("name"),
            )
        if type_ is FieldType.ARRAY:
            return Schema.array(Schema.from_json(data["items"]), optional=optional)
        if type_ is FieldType.MAP:
            return Schema.map_(
                Schema.from_json(data["keys"]), Schema.from_json(data["values"]), optional=optional
            )
        return Schema(
            type_,
            optional=optional,
            name=data.get("name"),
            logical=logical,
            precision=int(data.get("precision", 38)),
            scale=int(data.get("scale", 0)),
        )
