"""A source whose partitions differ in value schema (like the tables of a database): each shape
reaches its own topic with its own registered schema, on the fused path and on the JVM path
(transforms), and one sink reads the differently shaped topics, decoding each with its schema."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sluice.converters import canonical
from sluice.sdk import ConfigException
from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.integration.typed_connectors import SHAPES, shaped_row

pytestmark = pytest.mark.spark

SOURCE = "tests.integration.typed_connectors.ShapedSource"
SINK = "tests.integration.typed_connectors.ArrowDirSink"
ROUTE = {
    "transforms": "route",
    "transforms.route.class": "RegexRouter",
    "transforms.route.regex": "shaped-(.*)",
    "transforms.route.replacement": "routed-$1",
}


def _healthy(runner: Any) -> None:
    for r in runner.running.values():
        assert r.failure() is None, r.failure()


def _by_topic(folder: Path) -> dict[str, list[pa.RecordBatch]]:
    """What an ArrowDirSink stored, batch by batch, grouped by topic."""
    out: dict[str, list[pa.RecordBatch]] = {}
    for name in os.listdir(folder) if folder.is_dir() else []:
        if name.endswith(".arrow"):
            with pa.memory_map(str(folder / name)) as source:
                for batch in pa.ipc.open_file(source).read_all().to_batches():
                    for topic in set(batch.column("topic").to_pylist()):
                        out.setdefault(topic, []).append(batch)
    return out


def _received(runner: Any, folder: Path, topics: list[str], count: int) -> dict[str, list]:
    def done() -> bool:
        _healthy(runner)
        got = _by_topic(folder)
        return all(sum(b.num_rows for b in got.get(t, [])) >= count for t in topics)

    wait_until(done, 180, f"{count} records in each of {topics}")
    return _by_topic(folder)


@pytest.mark.parametrize(
    ("converter", "transforms"),
    [("AvroConverter", {}), ("AvroConverter", ROUTE), ("JsonConverter", ROUTE)],
    ids=["avro-fused", "avro-transformed", "json-transformed"],
)
def test_each_shape_reaches_its_topic_with_its_schema(
    runner: Any, tmp_path: Path, converter: str, transforms: dict[str, str]
) -> None:
    conv = {"value.converter": converter}
    runner.start("src", {"connector.class": SOURCE, "count": "25", **conv, **transforms})
    prefix = "routed-" if transforms else "shaped-"
    topics = [prefix + s for s in SHAPES]
    wait_until(
        lambda: _healthy(runner) or all(runner.bus.count(t) >= 25 for t in topics),
        180,
        "25 records in each topic",
    )
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    for shape, schema in SHAPES.items():
        assert registry.latest(f"{prefix}{shape}-value").schema == canonical(schema)

    out = tmp_path / "out"
    runner.start(
        "dst",
        {"connector.class": SINK, "dir": str(out), "connect.topicnames": ",".join(topics), **conv},
    )
    got = _received(runner, out, topics, 25)
    for shape, schema in SHAPES.items():
        batches = got[prefix + shape]
        types = {(f.name, f.type) for b in batches for f in b.schema.field("value").type}
        assert types == {(f.name, f.type) for f in schema.to_arrow()}, shape
        values = sorted(
            (v for b in batches for v in b.column("value").to_pylist()), key=lambda v: v["id"]
        )
        expected = [shaped_row(shape, i) for i in range(25)]
        if converter == "JsonConverter" and shape == "orders":  # JSON carries milliseconds
            for row in expected:
                row["at"] = row["at"].replace(microsecond=row["at"].microsecond // 1000 * 1000)
        assert values == expected, shape
    # exactly once: no record twice in a topic
    assert all(runner.bus.count(t) == 25 for t in topics)


def test_one_topic_cannot_take_two_shapes(runner: Any) -> None:
    with pytest.raises(ConfigException, match=r"connect.topicname: names one topic, 'all'"):
        runner.start(
            "src",
            {
                "connector.class": SOURCE,
                "connect.topicname": "all",
                "value.converter": "AvroConverter",
            },
        )
    assert "src" not in runner.running


def test_a_partition_without_a_schema_fails_the_source_naming_it(runner: Any) -> None:
    runner.start("src", {"connector.class": SOURCE, "stray": "true"})

    def failed() -> bool:
        return runner.running["src"].failure() is not None

    wait_until(failed, 120, "the source to fail")
    cause, _ = runner.running["src"].failure()
    assert 'partition {"shape":"stray"} is not listed by the connector' in cause, cause


def _shaped_topics(runner: Any, count: int) -> dict[str, str]:
    conv = {"value.converter": "AvroConverter"}
    runner.start("src", {"connector.class": SOURCE, "count": str(count), **conv})
    wait_until(
        lambda: _healthy(runner) or all(runner.bus.count(f"shaped-{s}") >= count for s in SHAPES),
        180,
        "the topics",
    )
    return conv


#: Kafka Connect's "one sink for all topics + RegexRouter", with a router gated by a predicate
FAN_IN = {
    "transforms": "route,short",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "shaped-(.*)",
    "transforms.route.replacement": "routed-$1",
    "transforms.short.type": "RegexRouter",
    "transforms.short.regex": "routed-(people)",
    "transforms.short.replacement": "$1",
    "transforms.short.predicate": "isPeople",
    "predicates": "isPeople",
    "predicates.isPeople.type": "TopicNameMatches",
    "predicates.isPeople.pattern": "routed-p.*",
}


def test_a_sink_routes_differently_shaped_topics_by_name_without_the_jvm(
    runner: Any, tmp_path: Path
) -> None:
    """Transforms that touch only the topic run on the fused path, as a table of topic names:
    each record reaches the sink task under its routed topic, decoded with its own schema."""
    conv = _shaped_topics(runner, 5)
    out = tmp_path / "out"
    sink = {
        "connector.class": SINK,
        "dir": str(out),
        "connect.topicnames": "shaped-people,shaped-orders",
        **conv,
        **FAN_IN,
    }
    runner.start("dst", sink)
    got = _received(runner, out, ["people", "routed-orders"], 5)
    assert set(got) == {"people", "routed-orders"}, set(got)
    for shape, topic in (("people", "people"), ("orders", "routed-orders")):
        types = {(f.name, f.type) for b in got[topic] for f in b.schema.field("value").type}
        assert types == {(f.name, f.type) for f in SHAPES[shape].to_arrow()}, shape
        values = sorted(
            (v for b in got[topic] for v in b.column("value").to_pylist()), key=lambda v: v["id"]
        )
        assert values == [shaped_row(shape, i) for i in range(5)], shape


def test_a_sink_over_differently_shaped_topics_refuses_what_needs_the_jvm(
    runner: Any, tmp_path: Path
) -> None:
    conv = _shaped_topics(runner, 3)
    sink = {
        "connector.class": SINK,
        "dir": str(tmp_path / "out"),
        "connect.topicnames": "shaped-people,shaped-orders",
        **conv,
    }
    stamp = {
        "transforms": "route,stamp",
        **{k: v for k, v in ROUTE.items() if k != "transforms"},
        "transforms.stamp.type": "InsertField$Value",
        "transforms.stamp.static.field": "origin",
        "transforms.stamp.static.value": "db",
    }
    with pytest.raises(ConfigException, match=r"transforms: a sink can only route records"):
        runner.start("dst", {**sink, **stamp})
    with pytest.raises(ConfigException, match=r"pipeline.fused: must stay true"):
        runner.start("dst", {**sink, "pipeline.fused": "false"})
    with pytest.raises(ConfigException, match=r"pipeline.fused: must stay true"):
        runner.start("dst", {**sink, **ROUTE, "pipeline.fused": "false"})
    assert "dst" not in runner.running


def test_an_avro_sink_started_before_its_source_takes_each_schema_when_it_arrives(
    runner: Any, tmp_path: Path
) -> None:
    conv = {"value.converter": "AvroConverter"}
    out = tmp_path / "out"
    topics = [f"shaped-{s}" for s in SHAPES]
    runner.start(
        "dst",
        {"connector.class": SINK, "dir": str(out), "connect.topicnames": ",".join(topics), **conv},
    )
    runner.start("src", {"connector.class": SOURCE, "count": "7", **conv})
    got = _received(runner, out, topics, 7)
    for shape in SHAPES:
        values = sorted(
            (v for b in got[f"shaped-{shape}"] for v in b.column("value").to_pylist()),
            key=lambda v: v["id"],
        )
        assert values == [shaped_row(shape, i) for i in range(7)], shape
