"""The SDK's pure logic: schemas, config parsing, record ↔ Arrow conversion."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal

import pyarrow as pa
import pytest

from sluice.engine.frames import partition_hash, records_to_batch, source_frame_schema
from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectRecord,
    FieldType,
    Schema,
)
from sluice.sdk._arrow import records_from_batch
from sluice.sdk._config import normalize_config

ALL_TYPES = Schema.struct(
    ("i8", Schema.of(FieldType.INT8)),
    ("i16", Schema.of(FieldType.INT16)),
    ("i32", Schema.of(FieldType.INT32)),
    ("i64", Schema.of(FieldType.INT64, optional=False)),
    ("f32", Schema.of(FieldType.FLOAT32)),
    ("f64", Schema.of(FieldType.FLOAT64)),
    ("b", Schema.of(FieldType.BOOLEAN)),
    ("s", Schema.string()),
    ("raw", Schema.bytes_()),
    ("d", Schema.date()),
    ("t", Schema.time()),
    ("ts", Schema.timestamp()),
    ("dec", Schema.decimal(38, 10)),
    ("arr", Schema.array(Schema.string())),
    ("m", Schema.map_(Schema.string(), Schema.of(FieldType.INT64))),
    ("nested", Schema.struct(("x", Schema.of(FieldType.INT32)))),
)


def test_every_type_maps_to_arrow_and_spark() -> None:
    arrow = ALL_TYPES.to_arrow()
    assert [arrow.field(i).type for i in range(arrow.num_fields)] == [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.bool_(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.time64("us"),
        pa.timestamp("us", tz="UTC"),
        pa.decimal128(38, 10),
        pa.list_(pa.string()),
        pa.map_(pa.string(), pa.int64()),
        pa.struct([pa.field("x", pa.int32())]),
    ]
    assert not arrow.field("i64").nullable
    assert ALL_TYPES.to_spark_ddl() == (
        "struct<`i8`:tinyint,`i16`:smallint,`i32`:int,`i64`:bigint not null,`f32`:float,"
        "`f64`:double,`b`:boolean,`s`:string,`raw`:binary,`d`:date,`t`:time(6),`ts`:timestamp,"
        "`dec`:decimal(38,10),`arr`:array<string>,`m`:map<string,bigint>,`nested`:struct<`x`:int>>"
    )


def test_schema_json_round_trip() -> None:
    assert Schema.from_json(ALL_TYPES.to_json()) == ALL_TYPES


def test_schema_builders_reject_nonsense() -> None:
    with pytest.raises(ValueError, match=r"precision must be 1..38"):
        Schema.decimal(39, 0)
    with pytest.raises(ValueError, match=r"scale must be"):
        Schema.decimal(5, 6)
    with pytest.raises(ValueError, match=r"duplicate field names"):
        Schema.struct(("a", Schema.string()), ("a", Schema.string()))
    with pytest.raises(ValueError, match=r"not a primitive"):
        Schema.of(FieldType.STRUCT)


def test_config_def_types_defaults_and_errors() -> None:
    cdef = ConfigDef(
        ConfigKey("name"),
        ConfigKey("n", type="int", default=3, min=1),
        ConfigKey("on", type="bool", default=False),
        ConfigKey("topics", type="list", default=[]),
        ConfigKey("mode", default="a", choices=("a", "b")),
    )
    assert cdef.parse({"name": "x", "n": 5, "on": "TRUE", "topics": "a, b;c"}) == {
        "name": "x",
        "n": 5,
        "on": True,
        "topics": ["a", "b", "c"],
        "mode": "a",
    }
    with pytest.raises(ConfigException, match=r"name: required key is missing"):
        cdef.parse({})
    with pytest.raises(ConfigException, match=r"n: expected an integer, got 'x'"):
        cdef.parse({"name": "x", "n": "x"})
    with pytest.raises(ConfigException, match=r"n: must be at least 1, got 0"):
        cdef.parse({"name": "x", "n": "0"})
    with pytest.raises(ConfigException, match=r"on: expected a boolean"):
        cdef.parse({"name": "x", "on": "maybe"})
    with pytest.raises(ConfigException, match=r"mode: must be one of a, b, got 'c'"):
        cdef.parse({"name": "x", "mode": "c"})
    with pytest.raises(ConfigException, match=r"name: value of type list is not supported"):
        normalize_config({"name": ["x"]})
    with pytest.raises(ValueError, match=r"unknown type 'float'"):
        ConfigDef(ConfigKey("x", type="float"))


def test_records_to_batch_and_back() -> None:
    value_schema = Schema.struct(
        ("n", Schema.of(FieldType.INT64)),
        ("amount", Schema.decimal(10, 2)),
        ("day", Schema.date()),
        ("at", Schema.time()),
        ("blob", Schema.bytes_()),
    )
    frame = source_frame_schema(Schema.string(), value_schema)
    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    records = [
        ConnectRecord(
            value={
                "n": 1,
                "amount": Decimal("12.34"),
                "day": date(1, 1, 1),
                "at": time(23, 59, 59, 999999),
                "blob": b"\x00\xff",
            },
            key="k1",
            partition={"f": "a"},
            timestamp=ts,
            extensions={"h": "v"},
        ),
        ConnectRecord(value=None, topic="other"),
    ]
    batch = records_to_batch(records, frame, "default-topic")
    assert batch.column("topic").to_pylist() == ["default-topic", "other"]
    assert batch.column("partition_hash").to_pylist() == [partition_hash({"f": "a"}), None]
    assert batch.column("value").to_pylist()[0]["amount"] == Decimal("12.34")
    sink_batch = pa.RecordBatch.from_arrays(
        [
            batch.column("topic"),
            pa.array([3, 3], pa.int32()),
            pa.array([10, 11], pa.int64()),
            batch.column("key"),
            batch.column("value"),
            batch.column("timestamp"),
            batch.column("headers"),
        ],
        names=["topic", "queue_id", "queue_offset", "key", "value", "timestamp", "headers"],
    )
    back = records_from_batch(sink_batch)
    assert back[0].key == "k1" and back[0].extensions == {"h": "v"} and back[0].timestamp == ts
    assert back[0].partition == {"topic": "default-topic", "queueId": "3"}
    assert back[0].offset == {"queueOffset": 11}  # the position after the record
    assert back[0].value["at"] == time(23, 59, 59, 999999)  # microseconds, exactly
    assert back[1].value is None


def test_records_to_batch_names_the_bad_record_and_field() -> None:
    frame = source_frame_schema(Schema.string(), Schema.of(FieldType.INT32))
    records = [ConnectRecord(value=1), ConnectRecord(value="not a number")]
    with pytest.raises(ValueError, match=r"record 1 of the batch: field 'value'"):
        records_to_batch(records, frame, "t")


def test_partition_hash_is_stable_and_order_insensitive() -> None:
    assert partition_hash({"a": 1, "b": "x"}) == partition_hash({"b": "x", "a": 1})
    assert partition_hash({"a": 1}) != partition_hash({"a": 2})
    assert 0 <= partition_hash({"filename": "/tmp/x"}) < 2**31


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://u:pw@h:5672/v", "amqp://u:********@h:5672/v"),
        (
            "jdbc:postgresql://h/db?user=u&password=pw",
            "jdbc:postgresql://h/db?user=u&password=********",
        ),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("http://[::1:80/", "<unparsable URL>"),
    ],
)
def test_redact_url_masks_passwords_only(url: str, shown: str) -> None:
    from sluice.sdk import redact_url

    assert redact_url(url) == shown
    assert ":pw@" not in redact_url(url) and "password=pw" not in redact_url(url)


def test_records_sharing_a_partition_object_and_records_of_others_get_their_own_hashes() -> None:
    frame = source_frame_schema(Schema.string(), Schema.string())
    shared, other = {"table": "a"}, {"table": "b"}
    records = [ConnectRecord(value=str(i), partition=shared) for i in range(3)]
    records += [ConnectRecord(value="x", partition=other), ConnectRecord(value="y")]
    records += [ConnectRecord(value="z", partition={"table": "a"})]  # equal, another object
    hashes = records_to_batch(records, frame, "t").column("partition_hash").to_pylist()
    a, b = partition_hash(shared), partition_hash(other)
    assert a != b
    assert hashes == [a, a, a, b, None, a]
