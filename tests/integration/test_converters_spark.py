"""Converters through Spark: JSON and Avro round trips in Spark SQL, decode errors as the error
column, the session's time settings. (Arrow-level and configuration tests are in
tests/unit/test_converters.py.)
"""

from __future__ import annotations

from datetime import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from sluice.converters import (
    arrow_type,
    canonical,
)
from sluice.converters._json import decimal_of
from sluice.converters._schemas import from_physical
from sluice.sdk import ConfigException, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.converter_cases import (
    JSON_OPTIONS,
    decoded_rows,
    millis,
    normal,
    schema_and_rows,
)


@pytest.fixture
def registry(tmp_path: Path) -> SqliteSchemaRegistry:
    return SqliteSchemaRegistry(tmp_path / "schemas.sqlite")


TIMES = Schema.struct(("t", Schema.time()))
#: 00:00:00, 23:59:59.999999, 12:34:56.000001, 00:00:00.000001, null
TIME_ROWS = [{"t": v} for v in (0, 86_399_999_999, 45_296_000_001, 1, None)]


# -- Spark types and the session ------------------------------------------------------------------


def test_schema_of_spark_types_keeps_hints(spark: Any) -> None:
    from pyspark.sql.types import StructType

    from sluice.engine.converters import schema_of

    hint = Schema.struct(("t", Schema.time()), ("n", Schema.string()), name="com.x.Y")
    spark_type = StructType.fromDDL("t time(6), n string, extra timestamp, t3 time(3)")
    got = schema_of(spark_type, hint)
    assert got.name == "com.x.Y"
    assert [f.schema for f in got.fields] == [
        Schema.time(),
        Schema.string(),
        Schema.timestamp(),
        Schema.time(),  # TIME(0..6) all fit in microseconds
    ]
    # An int is an int, whatever the hint says (a Time is Spark's TIME since Spark has one).
    assert schema_of(StructType.fromDDL("t int"), hint).fields[0].schema == Schema.of(
        FieldType.INT32
    )
    with pytest.raises(ConfigException, match=r"value.converter: no converter supports the Spark"):
        schema_of(StructType.fromDDL("i interval day"))
    with pytest.raises(
        ConfigException, match=r"key.converter: the Spark type time\(9\) has more digits"
    ):
        schema_of(StructType.fromDDL("t time(9)"), key="key.converter")


def test_the_session_always_enables_spark_times(spark: Any) -> None:
    from sluice.engine.session import build_session

    # the test session's own settings, plus a worker config trying to turn TIME off
    conf = {"spark.master": "local[2]", "spark.driver.memory": "2g"}
    again = build_session({**conf, "spark.sql.timeType.enabled": "false"}, log_level="ERROR")
    assert again.conf.get("spark.sql.timeType.enabled") == "true"
    assert again.sql("SELECT time_from_micros(1) AS t").collect()[0].t == time(0, 0, 0, 1)


# -- through Spark SQL and the engine adapter ------------------------------------------------------


def _source_frame(spark: Any, key: pa.Array, value: pa.Array) -> Any:
    n = len(value)
    table = pa.table(
        {
            "topic": pa.array(["t"] * n, pa.string()),
            "key": key,
            "value": value,
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "headers": pa.nulls(n, pa.map_(pa.string(), pa.string())),
            "partition_hash": pa.nulls(n, pa.int32()),
        }
    )
    # A shuffle, so that Spark runs the converters' SQL compiled, as in a pipeline (it would
    # evaluate them once, interpreted, on a local table).
    return spark.createDataFrame(table).repartition(1)


def _topic_frame(spark: Any, key: pa.Array, value: pa.Array) -> Any:
    n = len(value)
    table = pa.table(
        {
            "topic": pa.array(["t"] * n, pa.string()),
            "queue_id": pa.array([3] * n, pa.int32()),
            "queue_offset": pa.array(range(n), pa.int64()),
            "key": key.cast(pa.binary()),
            "value": value.cast(pa.binary()),
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "headers": pa.nulls(n, pa.string()),
        }
    )
    return spark.createDataFrame(table).repartition(1)


def _spark_value(rows: list[Any], schema: Schema) -> pa.Array:
    from sluice.engine.converters import spark_arrow_type

    return from_physical(rows, schema).cast(spark_arrow_type(schema))


SPARK_TRIPS = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.spark
@pytest.mark.parametrize("options", JSON_OPTIONS, ids=lambda o: ",".join(o.values()) or "default")
@SPARK_TRIPS
@given(data=schema_and_rows(string_keys_only=True, max_leaves=6))
def test_json_round_trip_through_spark_sql(
    spark: Any, tmp_path_factory: Any, options: dict[str, str], data: tuple[Schema, list[Any]]
) -> None:
    """SQL writes what the Python form reads and the reverse; decode_frame returns the values."""
    from sluice.engine.converters import (
        SinkCodecs,
        decode_frame,
        encode_frame,
        plan_decoders,
        plan_encoders,
        register_schemas,
    )

    schema, rows = data
    registry = SqliteSchemaRegistry(tmp_path_factory.mktemp("json") / "schemas.sqlite")
    config = {"value.converter": "JsonConverter"}
    config.update({f"value.converter.{k}": v for k, v in options.items()})
    codecs = plan_encoders(config, Schema.string(), schema, registry)
    assert codecs.value.has_sql and not codecs.fusable
    register_schemas(registry, "t", codecs)
    n = len(rows)
    keys = pa.nulls(n, pa.string())
    sql_bytes = (
        encode_frame(_source_frame(spark, keys, _spark_value(rows, schema)), codecs)
        .toArrow()
        .column("value")
        .combine_chunks()
    )
    expected = normal([millis(schema, r) for r in rows])
    decoders = plan_decoders(config, ["t"], registry)
    python = decoders.value.arrow(sql_bytes)  # the Python form reads what SQL wrote
    assert python.errors is None
    assert decoded_rows(python.values, schema) == expected
    python_bytes = codecs.value.arrow(from_physical(rows, schema))
    for topic_bytes in (sql_bytes, python_bytes):  # SQL reads what either wrote
        frame = decode_frame(
            _topic_frame(spark, keys, topic_bytes), SinkCodecs(decoders.key, decoders.value)
        )
        out = frame.toArrow()
        assert out.column("error").null_count == n, out.column("error").to_pylist()
        assert decoded_rows(out.column("value").combine_chunks(), schema) == expected


@pytest.mark.spark
def test_base64_decimals_in_sql_at_the_edges(spark: Any, registry: SqliteSchemaRegistry) -> None:
    """Spark has no function for a decimal's two's-complement bytes: check the SQL against
    Python (Java's BigInteger.toByteArray) at the 1-, 8-, 16-byte edges and at ±(10^38-1)."""
    from sluice.engine.converters import (
        SinkCodecs,
        decode_frame,
        encode_frame,
        plan_decoders,
        plan_encoders,
        register_schemas,
    )

    edges = [
        0,
        1,
        -1,
        127,
        128,
        -128,
        -129,
        255,
        256,
        2**63 - 1,
        2**63,
        -(2**63),
        -(2**63) - 1,
        2**64 - 1,
        2**64,
        -(2**64),
        2**127 - 1 if 2**127 - 1 < 10**38 else 10**38 - 1,
        10**38 - 1,
        -(10**38 - 1),
        12345678901234567890123456789012345678,
    ]
    for scale in (0, 10, 38):
        schema = Schema.decimal(38, scale)
        config = {"value.converter": "JsonConverter", "value.converter.schemas.enable": "false"}
        codecs = plan_encoders(config, Schema.string(), schema, registry)
        register_schemas(registry, f"d{scale}", codecs)
        rows = [decimal_of(u, scale) for u in edges] + [None]
        keys = pa.nulls(len(rows), pa.string())
        sql_bytes = (
            encode_frame(_source_frame(spark, keys, from_physical(rows, schema)), codecs)
            .toArrow()
            .column("value")
            .combine_chunks()
        )
        assert sql_bytes.to_pylist() == codecs.value.arrow(from_physical(rows, schema)).to_pylist()
        decoders = plan_decoders(config, [f"d{scale}"], registry)
        out = decode_frame(
            _topic_frame(spark, keys, sql_bytes), SinkCodecs(decoders.key, decoders.value)
        ).toArrow()
        assert out.column("value").to_pylist() == rows


@pytest.mark.spark
def test_json_times_in_spark_sql(spark: Any, registry: SqliteSchemaRegistry) -> None:
    """The SQL form writes Spark's TIME as Kafka's milliseconds, reads them back as TIME, and
    names a value that is not a time of day."""
    from sluice.engine.converters import (
        SinkCodecs,
        decode_frame,
        encode_frame,
        plan_decoders,
        plan_encoders,
        register_schemas,
    )

    config = {"value.converter": "JsonConverter"}
    codecs = plan_encoders(config, Schema.string(), TIMES, registry)
    assert codecs.value.has_sql
    register_schemas(registry, "t", codecs)
    keys = pa.nulls(len(TIME_ROWS), pa.string())
    sql_bytes = (
        encode_frame(_source_frame(spark, keys, _spark_value(TIME_ROWS, TIMES)), codecs)
        .toArrow()
        .column("value")
        .combine_chunks()
    )
    python_bytes = codecs.value.arrow(from_physical(TIME_ROWS, TIMES))
    assert sql_bytes.to_pylist() == python_bytes.to_pylist()
    head = b'{"schema":{},"payload":'
    raws = [*sql_bytes.to_pylist(), head + b'{"t":86400000}}', head + b'{"t":-1}}']
    decoders = plan_decoders(config, ["t"], registry)
    frame = decode_frame(
        _topic_frame(spark, pa.nulls(len(raws), pa.string()), pa.array(raws, pa.binary())),
        SinkCodecs(decoders.key, decoders.value),
    ).toArrow()
    bad = "JsonConverter: record t/3@{}: value.t is not a time of day in ms"
    assert frame.column("error").to_pylist() == [None] * 5 + [bad.format(5), bad.format(6)]
    assert decoded_rows(frame.column("value").combine_chunks(), TIMES) == [
        {"t": v} for v in (0, 86_399_999_000, 45_296_000_000, 0, None)
    ] + [None, None]


@pytest.mark.spark
def test_arrow_only_converters_through_spark(spark: Any, registry: SqliteSchemaRegistry) -> None:
    """Avro and the number converters run as mapInArrow steps on the JVM path."""
    from sluice.engine.converters import (
        decode_frame,
        encode_frame,
        plan_decoders,
        plan_encoders,
        register_schemas,
    )

    schema = Schema.struct(
        ("t", Schema.time()),
        ("ts", Schema.timestamp()),
        ("d", Schema.decimal(38, 5)),
        ("m", Schema.map_(Schema.of(FieldType.INT32, optional=False), Schema.string())),
    )
    rows = [
        {"t": 86_399_999_999, "ts": -1, "d": decimal_of(-(10**38) + 1, 5), "m": [(1, "é😀")]},
        {"t": 1, "ts": 0, "d": None, "m": None},
        None,
    ]
    config = {"key.converter": "LongConverter", "value.converter": "AvroConverter"}
    codecs = plan_encoders(config, Schema.of(FieldType.INT64), schema, registry)
    assert codecs.fusable and not codecs.value.has_sql
    register_schemas(registry, "t", codecs)
    keys = pa.array([-(2**63), 0, None], pa.int64())
    encoded = encode_frame(_source_frame(spark, keys, _spark_value(rows, schema)), codecs).toArrow()
    decoders = plan_decoders(config, ["t"], registry)
    out = decode_frame(
        _topic_frame(
            spark, encoded.column("key").combine_chunks(), encoded.column("value").combine_chunks()
        ),
        decoders,
    ).toArrow()
    assert out.column("error").to_pylist() == [None, None, None]
    assert out.column("key").to_pylist() == [-(2**63), 0, None]
    assert decoded_rows(out.column("value").combine_chunks(), schema) == normal(rows)


@pytest.mark.spark
def test_json_envelopes_of_an_older_version_project_in_spark_sql(
    spark: Any, registry: SqliteSchemaRegistry
) -> None:
    """JSON decodes in Spark SQL (the JVM path): records of version 1 read with version 2 get
    null for the added optional field, lose the removed one and keep a widened number."""
    from sluice.converters import converter_from_config
    from sluice.engine.converters import decode_frame, plan_decoders

    config = {"value.converter": "JsonConverter"}
    v1 = Schema.struct(
        ("id", Schema.of(FieldType.INT32, optional=False)), ("gone", Schema.string())
    )
    v2 = Schema.struct(
        ("id", Schema.of(FieldType.INT64, optional=False)), ("note", Schema.string())
    )
    encode = converter_from_config(config, "value", registry).encoder
    old = encode(v1).arrow(pa.array([{"id": 1, "gone": "x"}], v1.to_arrow()))
    new = encode(v2).arrow(pa.array([{"id": 2**40, "note": "n"}], v2.to_arrow()))
    registry.register("t-value", canonical(v1))
    registry.register("t-value", canonical(v2))
    decoders = plan_decoders(config, ["t"], registry)
    assert decoders.value.has_sql and decoders.value.schema == v2
    raws = pa.concat_arrays([old, new])
    out = decode_frame(_topic_frame(spark, pa.nulls(2, pa.string()), raws), decoders).toArrow()
    assert out.column("error").to_pylist() == [None, None]
    assert out.column("value").to_pylist() == [
        {"id": 1, "note": None},
        {"id": 2**40, "note": "n"},
    ]


@pytest.mark.spark
def test_decode_errors_become_the_error_column(spark: Any, registry: SqliteSchemaRegistry) -> None:
    from sluice.engine.converters import decode_frame, fail_on_errors, plan_decoders

    registry.register("t-value", canonical(Schema.struct(("a", Schema.of(FieldType.INT32)))))
    good, bad = b'{"schema":{},"payload":{"a":1}}', b'{"schema":{},"payload":{"a":"x"}}'
    config = {"key.converter": "LongConverter", "value.converter": "JsonConverter"}
    decoders = plan_decoders(config, ["t"], registry)
    keys = pa.array([b"\0" * 8, b"\0" * 8, b"\x01"], pa.binary())
    frame = decode_frame(
        _topic_frame(spark, keys, pa.array([good, bad, good], pa.binary())), decoders
    )
    out = frame.toArrow().to_pylist()
    assert [r["error"] for r in out] == [
        None,
        "JsonConverter: record t/3@1: value is not valid JSON for struct<a:int32>: "
        '{"schema":{},"payload":{"a":"x"}}',
        "LongConverter: record t/3@2: key has 1 bytes, expected 8",
    ]
    assert [(r["key"], r["value"]) for r in out] == [(0, {"a": 1}), (None, None), (None, None)]
    assert [(r["raw_key"], r["raw_value"]) for r in out] == [
        (None, None),
        (b"\0" * 8, bad),
        (b"\x01", good),
    ]
    with pytest.raises(Exception, match=r"JsonConverter: record t/3@1: value is not valid JSON"):
        fail_on_errors(frame).where("topic = 'nothing'").collect()


@pytest.mark.spark
def test_sql_encoding_fails_on_a_null_required_field(spark: Any) -> None:
    from sluice.engine.converters import encode_frame, plan_encoders

    schema = Schema.struct(("a", Schema.of(FieldType.INT32, optional=False)))
    codecs = plan_encoders({"value.converter": "JsonConverter"}, Schema.string(), schema, None)
    rows = pa.array([{"a": 1}, {"a": None}], arrow_type(schema))
    frame = encode_frame(_source_frame(spark, pa.nulls(2, pa.string()), rows), codecs)
    with pytest.raises(Exception, match=r"JsonConverter: a record for topic t: value\.a is null"):
        frame.collect()
