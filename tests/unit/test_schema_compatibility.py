"""Schema compatibility levels (Confluent's documented rules) and the checking registry wrapper."""

from __future__ import annotations

import pickle

import pytest

from sluice.converters import CheckedRegistry, IncompatibleSchema, canonical
from sluice.converters._compatibility import parse_level, problems, read_problems
from sluice.sdk import ConfigException, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry

I32 = Schema.of(FieldType.INT32, optional=False)
I64 = Schema.of(FieldType.INT64, optional=False)
TEXT = Schema.string(optional=False)


def row(*fields: tuple[str, Schema]) -> Schema:
    return Schema.struct(*fields, optional=False)


V1 = row(("id", I64), ("qty", I64))


# -- reader/writer rules (Avro schema resolution on Connect schemas) -------------------------------
def test_an_added_optional_field_reads_old_data_as_null() -> None:
    assert read_problems(row(("id", I64), ("qty", I64), ("note", Schema.string())), V1) == []


def test_an_added_required_field_has_no_default() -> None:
    new = row(("id", I64), ("qty", I64), ("updated", Schema.timestamp(optional=False)))
    assert read_problems(new, V1) == ["new field `updated` is required and has no default"]


def test_a_removed_field_is_dropped() -> None:
    assert read_problems(row(("id", I64)), V1) == []


def test_widening_is_allowed_and_narrowing_is_not() -> None:
    assert (
        read_problems(row(("id", I64), ("qty", Schema.of(FieldType.FLOAT64, optional=False))), V1)
        == []
    )
    assert read_problems(row(("id", I64), ("qty", I32)), V1) == [
        "field `qty` changed type from int64 to int32"
    ]
    assert read_problems(row(("id", I64), ("qty", TEXT)), V1) == [
        "field `qty` changed type from int64 to string"
    ]
    assert read_problems(Schema.bytes_(optional=False), TEXT) == []  # Avro: string <-> bytes


def test_optionality_may_loosen_but_not_tighten() -> None:
    loose = row(("id", I64), ("qty", Schema.of(FieldType.INT64)))
    assert read_problems(loose, V1) == []
    assert read_problems(V1, loose) == [
        "field `qty` became required: data written with the older schema may hold nulls"
    ]


def test_logical_types_must_match_exactly() -> None:
    assert read_problems(Schema.decimal(10, 2), Schema.decimal(10, 2)) == []
    assert read_problems(Schema.decimal(12, 2), Schema.decimal(10, 2)) == [
        "the value changed type from decimal(10,2) to decimal(12,2)"
    ]
    assert read_problems(Schema.timestamp(), Schema.of(FieldType.INT64)) == [
        "the value changed type from int64 to timestamp"
    ]


def test_nested_members_are_named_by_path() -> None:
    old = row(("items", Schema.array(row(("sku", TEXT)), optional=False)))
    new = row(("items", Schema.array(row(("sku", I32)), optional=False)))
    assert read_problems(new, old) == ["field `items[].sku` changed type from string to int32"]
    m_old = Schema.map_(TEXT, I32, optional=False)
    m_new = Schema.map_(TEXT, Schema.of(FieldType.INT8, optional=False), optional=False)
    assert read_problems(m_new, m_old) == ["field `value{value}` changed type from int32 to int8"]


# -- levels ----------------------------------------------------------------------------------------
ADD_REQUIRED = row(("id", I64), ("qty", I64), ("x", I64))
DROP_QTY = row(("id", I64))


@pytest.mark.parametrize(
    ("level", "new", "ok"),
    [
        ("BACKWARD", DROP_QTY, True),  # new readers ignore the dropped field
        ("BACKWARD", ADD_REQUIRED, False),
        ("FORWARD", DROP_QTY, False),  # old readers need `qty`, which new data lacks
        ("FORWARD", ADD_REQUIRED, True),  # old readers drop `x`
        ("FULL", DROP_QTY, False),
        ("FULL", ADD_REQUIRED, False),
        ("FULL", row(("id", I64), ("qty", I64), ("x", Schema.string())), True),
        ("NONE", row(("qty", TEXT)), True),
    ],
)
def test_levels_against_the_latest_version(level: str, new: Schema, ok: bool) -> None:
    assert (problems(level, new, [V1]) == []) is ok


def test_forward_problems_say_they_concern_older_readers() -> None:
    assert problems("FORWARD", DROP_QTY, [V1]) == [
        "older readers: new field `qty` is required and has no default"
    ]


def test_transitive_levels_check_every_earlier_version() -> None:
    # v1 has a required `qty` (int64), v2 dropped it, v3 brings it back as a required string:
    # BACKWARD checks v2 only, BACKWARD_TRANSITIVE v1 too (and finds the type change).
    v2 = DROP_QTY
    v3 = row(("id", I64), ("qty", TEXT))
    assert problems("BACKWARD", v3, [V1, v2]) == ["new field `qty` is required and has no default"]
    assert problems("BACKWARD_TRANSITIVE", v3, [V1, v2]) == [
        "new field `qty` is required and has no default",
        "field `qty` changed type from int64 to string",
    ]
    v3_ok = row(("id", I64), ("qty", Schema.of(FieldType.INT64)))
    assert problems("BACKWARD", v3_ok, [V1, v2]) == []
    assert problems("FORWARD_TRANSITIVE", v3_ok, [V1, v2]) == [
        "older readers: field `qty` became required: data written with the older schema may "
        "hold nulls"
    ]
    assert problems("FULL_TRANSITIVE", V1, []) == []  # the first version is always accepted


def test_levels_parse_case_insensitively_and_name_the_key() -> None:
    assert parse_level(None) == "BACKWARD"
    assert parse_level(" full_transitive ") == "FULL_TRANSITIVE"
    with pytest.raises(ConfigException, match=r"schema\.compatibility.*sideways"):
        parse_level("sideways")


# -- the wrapper over a registry -------------------------------------------------------------------
def test_checked_registry_refuses_naming_topic_field_and_why(tmp_path) -> None:
    inner = SqliteSchemaRegistry(str(tmp_path / "schemas.sqlite"))
    registry = CheckedRegistry(inner)
    assert registry.register("orders-value", canonical(V1)).version == 1
    with pytest.raises(IncompatibleSchema) as caught:
        registry.register("orders-value", canonical(row(("id", I64), ("qty", I32))))
    text = str(caught.value)
    assert "topic 'orders' (value schema)" in text
    assert "not BACKWARD compatible" in text
    assert "field `qty` changed type from int64 to int32" in text
    assert caught.value.suggestion and "schema.compatibility" in caught.value.suggestion
    assert [v.version for v in inner.versions("orders-value")] == [1]  # nothing registered
    # an optional new field is a new version; registering the latest again is not
    v2 = canonical(row(("id", I64), ("qty", I64), ("note", Schema.string())))
    assert registry.register("orders-value", v2).version == 2
    assert registry.register("orders-value", v2).version == 2
    assert registry.versions("orders-value")[-1].version == 2  # storage queries pass through


def test_checked_registry_levels_per_subject_and_pickles(tmp_path) -> None:
    inner = SqliteSchemaRegistry(str(tmp_path / "schemas.sqlite"))
    registry = CheckedRegistry(inner, "BACKWARD", (("loose-value", "NONE"),))
    for subject in ("loose-value", "strict-value"):
        registry.register(subject, canonical(V1))
    narrowed = canonical(row(("id", I64), ("qty", I32)))
    assert registry.register("loose-value", narrowed).version == 2
    copy = pickle.loads(pickle.dumps(registry))
    with pytest.raises(IncompatibleSchema, match="strict"):
        copy.register("strict-value", narrowed)
    assert copy.latest("loose-value").schema == narrowed
    assert copy.by_id(copy.schema_id(narrowed)) == narrowed


# -- where the level is configured -----------------------------------------------------------------
def test_the_worker_sets_the_default_and_a_connector_overrides_it(tmp_path) -> None:
    from sluice.engine import QueryServices, parse_settings
    from sluice.runtime.worker_config import WorkerConfig

    worker = WorkerConfig.from_properties({"storePathRootDir": str(tmp_path)})
    assert worker.schema_compatibility == "BACKWARD"
    strict = WorkerConfig.from_properties(
        {"storePathRootDir": str(tmp_path), "schema.compatibility": "FULL_TRANSITIVE"}
    )
    assert strict.schema_compatibility == "FULL_TRANSITIVE"
    with pytest.raises(ConfigException, match=r"schema\.compatibility"):
        WorkerConfig.from_properties(
            {"storePathRootDir": str(tmp_path), "schema.compatibility": "X"}
        )
    registry = SqliteSchemaRegistry(str(tmp_path / "schemas.sqlite"))
    services = QueryServices(None, None, None, registry, "FULL")  # type: ignore[arg-type]
    assert services.registry_for(parse_settings({"connector.class": "x"}, "source")).level == "FULL"
    own = parse_settings({"connector.class": "x", "schema.compatibility": "NONE"}, "source")
    assert own.schema_compatibility == "NONE"
    assert services.registry_for(own).level == "NONE"
    with pytest.raises(ConfigException, match=r"schema\.compatibility"):
        parse_settings({"connector.class": "x", "schema.compatibility": "SIDEWAYS"}, "source")
