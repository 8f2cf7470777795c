"""Built-in transforms without Spark: class names, case formats, predicate options.

(Transforms run on DataFrames in tests/integration/test_transforms_frames.py.)
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice.engine.transforms import parse_transforms, route_topics
from sluice.runtime.plugins import resolve_transform
from sluice.sdk import ConfigException
from sluice.transforms import BUILTIN_TRANSFORMS
from sluice.transforms.fields import change_case

# --- registration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls", "target"),
    [
        ("ChangeCase$Value", "ChangeCaseValue", "value"),
        ("org.apache.rocketmq.connect.transforms.ChangeCase$Key", "ChangeCaseKey", "key"),
        ("org.apache.rocketmq.connect.transforms.ExtractNestedField$Value", None, "value"),
        ("org.apache.rocketmq.connect.transforms.PatternRename$Key", None, "key"),
        ("org.apache.rocketmq.connect.transforms.PatternFilter$Value", None, "value"),
        ("org.apache.rocketmq.connect.transforms.SetMaximumPrecision$Key", None, "key"),
        ("org.apache.rocketmq.connect.transforms.SetNull$Value", None, "value"),
        ("com.github.jcustenborder.kafka.connect.transform.common.ChangeCase$Key", None, "key"),
        ("org.apache.kafka.connect.transforms.InsertField$Value", "InsertFieldValue", "value"),
        ("org.apache.kafka.connect.transforms.TimestampConverter$Key", None, "key"),
        ("sluice.transforms.CastKey", "CastKey", "key"),
        ("org.apache.kafka.connect.transforms.ValueToKey", "ValueToKey", None),
        ("org.apache.kafka.connect.transforms.Filter", "Filter", None),
        ("org.apache.kafka.connect.transforms.DropHeaders", "DropHeaders", None),
    ],
)
def test_kafka_and_rocketmq_class_names_resolve(
    name: str, cls: str | None, target: str | None
) -> None:
    resolved = resolve_transform(name)
    if cls is not None:
        assert resolved.__name__ == cls
    assert getattr(resolved, "target", None) == target
    assert "Sql" in BUILTIN_TRANSFORMS and "RegexRouter" in BUILTIN_TRANSFORMS


@pytest.mark.parametrize(
    ("name", "source", "target", "expected"),
    [
        ("first_name", "LOWER_UNDERSCORE", "LOWER_CAMEL", "firstName"),
        ("first_name", "LOWER_UNDERSCORE", "UPPER_CAMEL", "FirstName"),
        ("FirstName", "UPPER_CAMEL", "UPPER_UNDERSCORE", "FIRST_NAME"),
        ("firstName", "LOWER_CAMEL", "LOWER_HYPHEN", "first-name"),
        ("FIRST_NAME", "UPPER_UNDERSCORE", "LOWER_CAMEL", "firstName"),
        ("first-name", "LOWER_HYPHEN", "UPPER_CAMEL", "FirstName"),
        ("id", "LOWER_UNDERSCORE", "UPPER_UNDERSCORE", "ID"),
        ("Odd Name", "LOWER_CAMEL", "LOWER_CAMEL", "Odd Name"),
    ],
)
def test_change_case_formats(name: str, source: str, target: str, expected: str) -> None:
    assert change_case(name, source, target) == expected


# --- Kafka's top-level predicates --------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ({"transforms.f.predicate": "nope"}, "transforms.f.predicate", "not in predicates="),
        (
            {"transforms.f.predicate": "p", "predicates": "p"},
            "predicates.p.class",
            "required key is missing",
        ),
        (
            {"transforms.f.predicate": "p", "predicates": "p", "predicates.p.type": "Filter"},
            "predicates.p.type",
            "is a transform, not a predicate",
        ),
        (
            {
                "transforms.f.predicate": "p",
                "predicates": "p",
                "predicates.p.type": "TopicNameMatches",
            },
            "predicates.p.pattern",
            "required key is missing",
        ),
        (
            {
                "transforms.f.predicate": "p",
                "transforms.f.negate": "maybe",
                "predicates": "p",
                "predicates.p.type": "RecordIsTombstone",
            },
            "transforms.f.negate",
            "expected true or false",
        ),
        ({"predicates": "p,p"}, "predicates", "names a predicate twice"),
    ],
)
def test_predicate_config_errors_name_the_key(
    extra: dict[str, str], key: str, message: str
) -> None:
    config = {"transforms": "f", "transforms.f.class": "Filter", **extra}
    with pytest.raises(ConfigException) as info:
        parse_transforms(config, resolve_transform)
    assert info.value.key == key and message in str(info.value)


# --- chain length ---------------------------------------------------------------------------------


def _chain(steps: int) -> dict[str, str]:
    config = {"transforms": ",".join(f"h{i}" for i in range(steps))}
    for i in range(steps):
        config |= {
            f"transforms.h{i}.type": "InsertHeader",
            f"transforms.h{i}.header": f"h{i}",
            f"transforms.h{i}.value.literal": "v",
        }
    return config


def test_a_chain_longer_than_the_limit_is_refused_naming_the_key() -> None:
    from sluice.engine.transforms import MAX_TRANSFORMS

    assert len(parse_transforms(_chain(MAX_TRANSFORMS), resolve_transform)) == MAX_TRANSFORMS
    with pytest.raises(ConfigException) as info:
        parse_transforms(_chain(MAX_TRANSFORMS + 1), resolve_transform)
    assert info.value.key == "transforms"
    assert f"names {MAX_TRANSFORMS + 1} transforms; a chain may have at most" in str(info.value)


def test_regex_router_reads_the_topic_once() -> None:
    """Each step's SQL is inlined into the next by Spark's optimiser: a step reading the topic
    three times made a chain of n routers a tree of 3^n nodes (13 steps took ~2 min to plan)."""
    (router,) = parse_transforms(
        {"transforms": "r", "transforms.r.type": "RegexRouter", "transforms.r.regex": "a(.*)"}
        | {"transforms.r.replacement": "b$1"},
        resolve_transform,
    )
    step = router.to_sql({})
    assert step is not None and step.columns["topic"].count("topic") == 1


def test_route_topics_renames_by_the_table_keeps_unnamed_topics_and_drops_none() -> None:
    """A fused sink's topic-only chain, as a table: each record's topic is looked up; a topic
    the table routes to None loses its records, one it does not name keeps its own."""
    batch = pa.RecordBatch.from_pydict(
        {"topic": ["a", "b", "c", "a", None], "value": [1, 2, 3, 4, 5]}
    )
    routed = route_topics(batch, {"a": "all", "b": None})
    assert routed.column("topic").to_pylist() == ["all", "c", "all", None]
    assert routed.column("value").to_pylist() == [1, 3, 4, 5]
    assert routed.schema == batch.schema
    assert route_topics(batch.slice(0, 0), {"a": "x"}).num_rows == 0
