"""`sluice.sdk.__all__` is the connector author's contract: it changes only on purpose.

Adding a name means adding it here (and to docs/sdk.md when an author should know it); removing
or renaming one breaks third-party connectors, so it needs a deprecation, not a quiet edit.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect

import sluice.sdk

#: The exported names, sorted. Change this list deliberately, with the SDK change that needs it.
EXPORTED = [
    "AppendSinkConnector",
    "AppendSinkTask",
    "BatchId",
    "ClientFamily",
    "ClientOption",
    "ClientPolicy",
    "ConfigDef",
    "ConfigException",
    "ConfigKey",
    "ConnectException",
    "ConnectRecord",
    "Connector",
    "ConnectorContext",
    "Converter",
    "DeadLetterRequest",
    "DecodeSql",
    "Decoded",
    "Decoder",
    "Delivery",
    "Encoder",
    "Field",
    "FieldType",
    "HEADERS_TYPE",
    "InvalidConfig",
    "KAFKA_CLIENT",
    "Logical",
    "MYSQL_CLIENT",
    "OffsetStorageReader",
    "PASSWORD_MASK",
    "POSTGRESQL_CLIENT",
    "Predicate",
    "ProduceRequest",
    "RABBITMQ_CLIENT",
    "REDIS_CLIENT",
    "ReadLimit",
    "RecordError",
    "RecordOffset",
    "RecordPartition",
    "ReplayableSourceTask",
    "RestartRequested",
    "RetriableException",
    "SQLITE_CLIENT",
    "Schema",
    "SchemaRegistry",
    "SinkConnector",
    "SinkTask",
    "SinkTaskContext",
    "SourceConnector",
    "SourceTask",
    "SourceTaskContext",
    "SqlStep",
    "StagedAppend",
    "StagedPart",
    "TIMESTAMP_TYPE",
    "Transform",
    "column_type",
    "count_problem",
    "literal",
    "partition_key",
    "prefixed_options",
    "quote",
    "redact_url",
    "refuse_unsafe",
    "struct_fields",
    "url_options",
]


def test_the_exported_names_are_exactly_the_pinned_ones() -> None:
    assert len(set(sluice.sdk.__all__)) == len(sluice.sdk.__all__), "a name is listed twice"
    assert sorted(sluice.sdk.__all__) == EXPORTED


def test_every_public_name_of_the_package_is_exported() -> None:
    """A public name imported into `sluice/sdk/__init__.py` but left out of `__all__` is an
    export nobody decided on: either list it or keep it private."""
    public = {n for n in vars(sluice.sdk) if not n.startswith("_")}
    modules = {n for n in public if inspect.ismodule(getattr(sluice.sdk, n))}
    assert sorted(public - modules - set(sluice.sdk.__all__)) == []


def test_every_exported_name_imports_from_the_package() -> None:
    namespace: dict[str, object] = {}
    exec("from sluice.sdk import *", namespace)
    assert sorted(set(EXPORTED) - set(namespace)) == []


def _own_docstring(cls: type) -> str:
    """The docstring the class itself declares: not an inherited one, nor the signature that
    `dataclass` and `Enum` write when the class has none."""
    doc = vars(cls).get("__doc__") or ""
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return ""
    if issubclass(cls, enum.Enum) and doc == "An enumeration.":
        return ""
    return doc.strip()


def test_every_exported_class_says_what_it_is_for() -> None:
    classes = [getattr(sluice.sdk, n) for n in EXPORTED if inspect.isclass(getattr(sluice.sdk, n))]
    assert len(classes) > 30  # the check below looks at something
    assert [c.__name__ for c in classes if not _own_docstring(c)] == []


def test_the_docstring_check_sees_a_missing_one() -> None:
    @dataclasses.dataclass
    class Bare:
        x: int

    class Documented(Bare):
        """Says what it is for."""

    class Inherits(Documented):
        pass

    assert _own_docstring(Bare) == ""
    assert _own_docstring(Inherits) == ""
    assert _own_docstring(Documented) == "Says what it is for."
