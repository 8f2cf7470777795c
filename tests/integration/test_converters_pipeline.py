"""Converters in running pipelines: typed records through a topic as JSON and as Avro, schema
registration (also for routed topics), and bad records failing the sink with their position."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sluice.converters import canonical, subject
from sluice.sdk import ConfigException, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.integration.typed_connectors import TYPED, read_dir, typed_row

pytestmark = pytest.mark.spark

SOURCE = "tests.integration.typed_connectors.TypedSource"
SINK = "tests.integration.typed_connectors.ArrowDirSink"


def _healthy(runner: Any) -> None:
    for r in runner.running.values():
        assert r.failure() is None, r.failure()


def _received(runner: Any, folder: Path, count: int) -> list[dict[str, Any]]:
    def done() -> bool:
        _healthy(runner)
        table = read_dir(str(folder))
        return table is not None and table.num_rows >= count

    wait_until(done, 180, f"{count} records in the sink")
    rows = read_dir(str(folder)).to_pylist()
    assert len(rows) == count
    return sorted(rows, key=lambda r: r["value"]["id"])


def _as_sent(i: int, *, millis: bool) -> dict[str, Any]:
    """Record i as the sink should see it; `millis`: times and timestamps cut to milliseconds
    (JsonConverter writes Kafka's milliseconds)."""
    row = typed_row(i)
    for name in ("at", "ts"):
        if row[name] is not None and millis:
            row[name] = row[name].replace(microsecond=row[name].microsecond // 1000 * 1000)
    return row


def _utc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in rows:
        ts = row["value"]["ts"]
        if ts is not None:
            row["value"]["ts"] = ts.astimezone(UTC).replace(tzinfo=UTC)
    return rows


@pytest.mark.parametrize(
    ("converter", "fused"),
    [("JsonConverter", False), ("AvroConverter", True)],
)
def test_typed_records_cross_a_topic(
    runner: Any, tmp_path: Path, converter: str, fused: bool
) -> None:
    converters = {"key.converter": "LongConverter", "value.converter": converter}
    runner.start(
        "src",
        {"connector.class": SOURCE, "count": "40", "connect.topicname": "typed", **converters},
    )
    out = tmp_path / "out"
    runner.start(
        "dst",
        {"connector.class": SINK, "dir": str(out), "connect.topicnames": "typed", **converters},
    )
    rows = _utc(_received(runner, out, 40))
    assert [r["key"] for r in rows] == list(range(40))
    json_loses_micros = converter == "JsonConverter"
    for r in rows:
        assert r["value"] == _as_sent(r["key"], millis=json_loses_micros), r["key"]
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    assert registry.latest("typed-value").schema == canonical(TYPED)
    assert registry.latest("typed-key") is None  # LongConverter needs no registered schema

    # Avro keeps a hop without transforms in Arrow (fused); JSON runs as Spark SQL. A fused
    # query's Spark rows are commit receipts, one per task per micro-batch; a JVM-path query's
    # rows are the records, all 40 of them once its progress reports are in.
    query = runner.running["dst"].query
    tasks = len(runner.running["dst"].task_configs)

    def rows_per_batch() -> list[int]:
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    if fused:
        wait_until(rows_per_batch, 60, "the sink's progress report")
        assert all(n <= tasks for n in rows_per_batch()), (tasks, rows_per_batch())
    else:
        wait_until(lambda: sum(rows_per_batch()) >= 40, 60, "progress reports of 40 rows")
        assert sum(rows_per_batch()) == 40, rows_per_batch()


def test_json_without_envelope_and_a_routed_topic(runner: Any, tmp_path: Path) -> None:
    """Schemas are registered for topics a transform routes to, before their data is visible."""
    conf = {
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        "value.converter.decimal.format": "NUMERIC",
    }
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "12",
            "connect.topicname": "raw-typed",
            "transforms": "route",
            "transforms.route.class": "RegexRouter",
            "transforms.route.regex": "raw-(.*)",
            "transforms.route.replacement": "clean-$1",
            **conf,
        },
    )
    wait_until(lambda: runner.bus.count("clean-typed") >= 12, 120, "12 routed records")
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    assert registry.latest(subject("clean-typed", "value")).schema == canonical(TYPED)
    out = tmp_path / "out"
    runner.start(
        "dst",
        {"connector.class": SINK, "dir": str(out), "connect.topicnames": "clean-typed", **conf},
    )
    rows = _utc(_received(runner, out, 12))
    assert [r["value"] for r in rows] == [_as_sent(i, millis=True) for i in range(12)]


def _file_into_topic(runner: Any, tmp_path: Path, lines: list[str], topic: str) -> None:
    src = tmp_path / "in.txt"
    src.write_text("".join(line + "\n" for line in lines))
    runner.start(
        "raw",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": topic,
        },
    )
    wait_until(lambda: runner.bus.count(topic) >= len(lines), 120, f"{len(lines)} lines in {topic}")


def _failure(runner: Any, name: str) -> str:
    wait_until(lambda: runner.running[name].failure() is not None, 180, f"{name} to fail")
    return runner.running[name].failure()[0]


@pytest.mark.parametrize("transforms", [False, True], ids=["no-transforms", "with-a-filter"])
def test_a_malformed_record_fails_the_sink_naming_it(
    runner: Any, tmp_path: Path, transforms: bool
) -> None:
    """An outside producer wrote one bad JSON record: the sink fails, naming topic/queue/offset,
    even when a transform would filter the record away; nothing of the batch is committed."""
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    registry.register("ext-value", canonical(Schema.struct(("a", Schema.of(FieldType.INT32)))))
    _file_into_topic(runner, tmp_path, ['{"a": 1}', '{"a": 2}', '{"a": oops}', '{"a": 4}'], "ext")
    config = {
        "connector.class": SINK,
        "dir": str(tmp_path / "out"),
        "connect.topicnames": "ext",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
    }
    if transforms:
        config.update(
            {
                "transforms": "keep",
                "transforms.keep.class": "sql",
                "transforms.keep.query": "SELECT * FROM records WHERE value.a = 1",
            }
        )
    runner.start("dst", config)
    cause = _failure(runner, "dst")
    assert re.search(
        r"JsonConverter: record ext/\d+@2: value is not valid JSON for struct<a:int32>: "
        r'\{"a": oops\}',
        cause,
    ), cause
    assert runner.positions.load("dst") == {}
    assert read_dir(str(tmp_path / "out")) is None


def test_garbage_in_an_avro_topic_fails_the_fused_sink(runner: Any, tmp_path: Path) -> None:
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    registry.register("junk-value", canonical(Schema.string()))
    _file_into_topic(runner, tmp_path, ["not avro"], "junk")
    runner.start(
        "dst",
        {
            "connector.class": SINK,
            "dir": str(tmp_path / "out"),
            "connect.topicnames": "junk",
            "value.converter": "io.confluent.connect.avro.AvroConverter",
        },
    )
    cause = _failure(runner, "dst")
    assert re.search(
        r"AvroConverter: record junk/\d+@0: value is not Avro with a schema id", cause
    ), cause


def test_a_sink_without_a_registered_schema_does_not_start(runner: Any, tmp_path: Path) -> None:
    config = {
        "connector.class": SINK,
        "dir": str(tmp_path),
        "connect.topicnames": "nobody",
        "value.converter": "JsonConverter",
    }
    with pytest.raises(
        ConfigException,
        match=r"value.converter: JsonConverter needs the value schema "
        r"of topic\(s\) nobody, and none is registered",
    ):
        runner.start("dst", config)
    bad = {**config, "value.converter.schemas.enable": "perhaps"}
    with pytest.raises(
        ConfigException, match=r"value.converter.schemas.enable: expected a boolean"
    ):
        runner.start("dst", bad)
    with pytest.raises(ConfigException, match=r"key.converter: unknown converter 'Bogus'"):
        runner.start("dst", {**config, "key.converter": "Bogus"})
    # Avro waits for the schema (fused), unless transforms need the type when the query starts
    avro = {**config, "value.converter": "AvroConverter", "transforms": "up"}
    avro |= {"transforms.up.class": "sql", "transforms.up.query": "SELECT * FROM records"}
    with pytest.raises(
        ConfigException,
        match=r"value.converter: AvroConverter needs the value schema of topic 'nobody', and "
        r"none is registered",
    ):
        runner.start("dst", avro)
    assert not runner.running


def test_a_time_schema_source_on_the_jvm_path(runner: Any, tmp_path: Path) -> None:
    """Times travel as Spark TIMEs through the JVM; JSON with a sql transform at the source."""
    conf = {"value.converter": "JsonConverter", "key.converter": "JsonConverter"}
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "8",
            "connect.topicname": "t8",
            "transforms": "s",
            "transforms.s.class": "sql",
            "transforms.s.query": "SELECT * FROM records WHERE key % 2 = 0",
            **conf,
        },
    )
    out = tmp_path / "out"
    runner.start(
        "dst", {"connector.class": SINK, "dir": str(out), "connect.topicnames": "t8", **conf}
    )
    rows = _utc(_received(runner, out, 4))
    assert [r["key"] for r in rows] == [0, 2, 4, 6]
    assert [r["value"] for r in rows] == [_as_sent(i, millis=True) for i in (0, 2, 4, 6)]
    started = datetime.now(UTC)
    assert all(r["timestamp"] <= started for r in rows)


def test_times_cross_the_jvm_path_to_the_microsecond(runner: Any, tmp_path: Path) -> None:
    """A transforms= chain on both sides keeps both hops in the JVM (Avro runs as mapInArrow
    steps there): Time values arrive exactly, as time64[us], and SQL sees them as TIME."""
    conf = {"key.converter": "LongConverter", "value.converter": "AvroConverter"}
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "24",
            "connect.topicname": "times",
            "transforms": "s",
            "transforms.s.class": "sql",
            "transforms.s.query": "SELECT * FROM records WHERE key % 4 <> 1",
            **conf,
        },
    )
    out = tmp_path / "out"
    runner.start(
        "dst",
        {
            "connector.class": SINK,
            "dir": str(out),
            "connect.topicnames": "times",
            "transforms": "late",
            "transforms.late.class": "sql",
            # a TIME comparison: Spark has the value as a TIME, not a number
            "transforms.late.query": "SELECT * FROM records "
            "WHERE value.at IS NULL OR value.at >= TIME'00:00:00.000001'",
            **conf,
        },
    )
    expected = [i for i in range(24) if i % 4 != 1 and i != 0]  # 0 is 00:00:00: filtered out
    rows = _utc(_received(runner, out, len(expected)))
    assert [r["key"] for r in rows] == expected
    assert [r["value"] for r in rows] == [_as_sent(i, millis=False) for i in expected]
    assert next(r for r in rows if r["key"] == 22)["value"]["at"] == time(23, 59, 59, 999_999)
    received = read_dir(str(out))
    assert received.schema.field("value").type.field("at").type == pa.time64("us")
    assert registry_time(runner) == {
        "field": "at",
        "name": "org.apache.kafka.connect.data.Time",
        "optional": True,
        "type": "int64",
        "version": 1,
    }


def registry_time(runner: Any) -> dict[str, Any]:
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    fields = json.loads(registry.latest("times-value").schema)["fields"]
    return next(f for f in fields if f["field"] == "at")
