"""Built-in transforms. Each compiles to Spark SQL (see `sluice.sdk.Transform`).

`BUILTIN_TRANSFORMS` maps every accepted class name (short name, `sluice.transforms.…`, and the
RocketMQ Connect / Kafka Connect names with their `$Key`/`$Value` suffixes) to its class.
"""

from __future__ import annotations

from sluice.sdk import Transform
from sluice.transforms.fields import (
    CastKey,
    CastValue,
    ChangeCaseKey,
    ChangeCaseValue,
    ExtractNestedFieldKey,
    ExtractNestedFieldValue,
    FlattenKey,
    FlattenValue,
    InsertFieldKey,
    InsertFieldValue,
    MaskFieldKey,
    MaskFieldValue,
    PatternRenameKey,
    PatternRenameValue,
    ReplaceFieldKey,
    ReplaceFieldValue,
    SetMaximumPrecisionKey,
    SetMaximumPrecisionValue,
    TimestampConverterKey,
    TimestampConverterValue,
)
from sluice.transforms.filters import (
    PREDICATES,
    Filter,
    PatternFilterKey,
    PatternFilterValue,
)
from sluice.transforms.headers import DropHeaders, InsertHeader
from sluice.transforms.records import (
    ExtractFieldKey,
    ExtractFieldValue,
    HoistFieldKey,
    HoistFieldValue,
    SetNullKey,
    SetNullValue,
    ValueToKey,
)
from sluice.transforms.routing import RegexRouter
from sluice.transforms.sql import Sql

BUILTIN_TRANSFORMS: dict[str, type[Transform]] = {}


def register(cls: type[Transform], *aliases: str) -> None:
    """Accept `cls` under its own names and `aliases`."""
    for name in (cls.__name__, f"sluice.transforms.{cls.__name__}", *aliases):
        BUILTIN_TRANSFORMS[name] = cls


register(Sql, "sql", "SqlTransform")
register(
    RegexRouter,
    "org.apache.kafka.connect.transforms.RegexRouter",
    "org.apache.rocketmq.connect.transforms.RegexRouter",
)

_KAFKA = "org.apache.kafka.connect.transforms."
_ROCKETMQ = "org.apache.rocketmq.connect.transforms."
_JCUSTENBORDER = "com.github.jcustenborder.kafka.connect.transform.common."

# (short name, $Key class, $Value class, packages whose `<package><name>$Key` users may write)
_KEY_VALUE_PAIRS: list[tuple[str, type[Transform], type[Transform], tuple[str, ...]]] = [
    ("ChangeCase", ChangeCaseKey, ChangeCaseValue, (_ROCKETMQ, _JCUSTENBORDER)),
    (
        "ExtractNestedField",
        ExtractNestedFieldKey,
        ExtractNestedFieldValue,
        (_ROCKETMQ, _JCUSTENBORDER),
    ),
    ("PatternRename", PatternRenameKey, PatternRenameValue, (_ROCKETMQ, _JCUSTENBORDER)),
    ("PatternFilter", PatternFilterKey, PatternFilterValue, (_ROCKETMQ, _JCUSTENBORDER)),
    (
        "SetMaximumPrecision",
        SetMaximumPrecisionKey,
        SetMaximumPrecisionValue,
        (_ROCKETMQ, _JCUSTENBORDER),
    ),
    ("SetNull", SetNullKey, SetNullValue, (_ROCKETMQ, _JCUSTENBORDER)),
    ("InsertField", InsertFieldKey, InsertFieldValue, (_KAFKA,)),
    ("ReplaceField", ReplaceFieldKey, ReplaceFieldValue, (_KAFKA,)),
    ("MaskField", MaskFieldKey, MaskFieldValue, (_KAFKA,)),
    ("Cast", CastKey, CastValue, (_KAFKA,)),
    ("TimestampConverter", TimestampConverterKey, TimestampConverterValue, (_KAFKA,)),
    ("ExtractField", ExtractFieldKey, ExtractFieldValue, (_KAFKA,)),
    ("HoistField", HoistFieldKey, HoistFieldValue, (_KAFKA,)),
    ("Flatten", FlattenKey, FlattenValue, (_KAFKA,)),
]
for _name, _key_cls, _value_cls, _packages in _KEY_VALUE_PAIRS:
    for _suffix, _cls in (("$Key", _key_cls), ("$Value", _value_cls)):
        register(_cls, _name + _suffix, *(p + _name + _suffix for p in _packages))
for _cls in (ValueToKey, InsertHeader, DropHeaders, Filter):
    register(_cls, _KAFKA + _cls.__name__)

__all__ = [
    "BUILTIN_TRANSFORMS",
    "CastKey",
    "CastValue",
    "ChangeCaseKey",
    "ChangeCaseValue",
    "DropHeaders",
    "ExtractFieldKey",
    "ExtractFieldValue",
    "ExtractNestedFieldKey",
    "ExtractNestedFieldValue",
    "Filter",
    "FlattenKey",
    "FlattenValue",
    "HoistFieldKey",
    "HoistFieldValue",
    "InsertFieldKey",
    "InsertFieldValue",
    "InsertHeader",
    "MaskFieldKey",
    "MaskFieldValue",
    "PatternFilterKey",
    "PatternFilterValue",
    "PatternRenameKey",
    "PatternRenameValue",
    "RegexRouter",
    "ReplaceFieldKey",
    "ReplaceFieldValue",
    "SetMaximumPrecisionKey",
    "SetMaximumPrecisionValue",
    "SetNullKey",
    "SetNullValue",
    "Sql",
    "TimestampConverterKey",
    "TimestampConverterValue",
    "ValueToKey",
    "register",
]

for _predicate in PREDICATES.values():
    register(_predicate, f"org.apache.kafka.connect.transforms.predicates.{_predicate.__name__}")
