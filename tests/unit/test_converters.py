"""Converters: round trips over every schema type (hypothesis), Arrow level and through Spark SQL,
the error contract, the schema registry, and every configuration error."""

from __future__ import annotations

import json
import math
import pickle
from datetime import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.converters import (
    AvroConverter,
    Converter,
    JsonConverter,
    RecordError,
    SchemaFormatError,
    arrow_type,
    avro_schema,
    canonical,
    converter_class,
    converter_from_config,
    from_connect,
    physical_type,
    register,
    to_connect,
)
from sluice.converters._json import decimal_of
from sluice.converters._schemas import from_physical
from sluice.sdk import ConfigException, ConnectException, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.converter_cases import (
    INT_RANGES,
    JSON_OPTIONS,
    TEXT,
    decoded_rows,
    millis,
    normal,
    schema_and_rows,
    schemas,
)


@pytest.fixture
def registry(tmp_path: Path) -> SqliteSchemaRegistry:
    return SqliteSchemaRegistry(tmp_path / "schemas.sqlite")


def _converter(name: str, registry: Any = None, **options: str) -> Converter:
    config = {"value.converter": name, **{f"value.converter.{k}": v for k, v in options.items()}}
    return converter_from_config(config, "value", registry)


ROUND_TRIP = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


# -- Arrow-level round trips -----------------------------------------------------------------------
@pytest.mark.parametrize("options", JSON_OPTIONS, ids=lambda o: ",".join(o.values()) or "default")
@ROUND_TRIP
@given(data=schema_and_rows())
def test_json_round_trip_arrow(options: dict[str, str], data: tuple[Schema, list[Any]]) -> None:
    schema, rows = data
    converter = _converter("JsonConverter", **options)
    array = from_physical(rows, schema)
    topic = converter.encoder(schema).arrow(array)
    assert topic.type == pa.binary()
    assert [v is None for v in topic.to_pylist()] == [r is None for r in rows]
    for raw in topic.to_pylist():
        if raw is not None:
            json.loads(raw)  # real JSON
    result = converter.decoder(schema).arrow(topic)
    assert result.errors is None
    assert result.values.type == arrow_type(schema)
    assert decoded_rows(result.values, schema) == normal([millis(schema, r) for r in rows])


@ROUND_TRIP
@given(data=schema_and_rows())
def test_avro_round_trip_arrow_is_exact(data: tuple[Schema, list[Any]], tmp_path_factory) -> None:
    registry = SqliteSchemaRegistry(tmp_path_factory.mktemp("avro") / "schemas.sqlite")
    schema, rows = data
    converter = _converter("AvroConverter", registry)
    array = from_physical(rows, schema)
    topic = converter.encoder(schema).arrow(array)
    schema_id = registry.schema_id(canonical(schema))
    for raw in topic.to_pylist():
        if raw is not None:
            assert raw[:5] == b"\x00" + schema_id.to_bytes(4, "big")
    result = converter.decoder(schema).arrow(topic)
    assert result.errors is None
    assert decoded_rows(result.values, schema) == normal(rows)


NUMBERS = [
    ("DoubleConverter", FieldType.FLOAT64, st.floats(), 8),
    ("FloatConverter", FieldType.FLOAT32, st.floats(width=32), 4),
    ("LongConverter", FieldType.INT64, st.integers(*INT_RANGES[FieldType.INT64]), 8),
    ("IntegerConverter", FieldType.INT32, st.integers(*INT_RANGES[FieldType.INT32]), 4),
    ("ShortConverter", FieldType.INT16, st.integers(*INT_RANGES[FieldType.INT16]), 2),
]


@pytest.mark.parametrize(("name", "type_", "strategy", "width"), NUMBERS, ids=lambda x: str(x))
@ROUND_TRIP
@given(data=st.data())
def test_number_round_trip_arrow(
    name: str, type_: FieldType, strategy: Any, width: int, data: Any
) -> None:
    rows = data.draw(st.lists(st.none() | strategy, max_size=20))
    schema = Schema.of(type_)
    converter = _converter(name)
    topic = converter.encoder(schema).arrow(pa.array(rows, schema.to_arrow()))
    assert [None if b is None else len(b) for b in topic.to_pylist()] == [
        None if r is None else width for r in rows
    ]
    result = converter.decoder(None).arrow(topic)
    assert result.errors is None
    assert normal(result.values.to_pylist()) == normal(rows)


def test_numbers_are_big_endian_like_kafka() -> None:
    def encode(name: str, type_: FieldType, value: Any) -> bytes:
        schema = Schema.of(type_)
        return (
            _converter(name).encoder(schema).arrow(pa.array([value], schema.to_arrow()))[0].as_py()
        )

    assert encode("LongConverter", FieldType.INT64, 1) == b"\0\0\0\0\0\0\0\x01"
    assert encode("IntegerConverter", FieldType.INT32, -2) == b"\xff\xff\xff\xfe"
    assert encode("ShortConverter", FieldType.INT16, 258) == b"\x01\x02"
    assert encode("DoubleConverter", FieldType.FLOAT64, 1.0) == b"\x3f\xf0" + b"\0" * 6
    assert encode("FloatConverter", FieldType.FLOAT32, -2.0) == b"\xc0\0\0\0"


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.none() | TEXT, max_size=10))
def test_string_and_bytes_round_trip_arrow(rows: list[str | None]) -> None:
    string = _converter("StringConverter")
    topic = string.encoder(Schema.string()).arrow(pa.array(rows, pa.string()))
    assert topic.to_pylist() == [None if r is None else r.encode() for r in rows]
    assert string.decoder(None).arrow(topic).values.to_pylist() == rows
    raw = [None if r is None else r.encode() for r in rows]
    blob = _converter("ByteArrayConverter")
    topic = blob.encoder(Schema.bytes_()).arrow(pa.array(raw, pa.binary()))
    assert blob.decoder(None).arrow(topic).values.to_pylist() == raw


def test_json_writes_kafka_connect_shapes() -> None:
    schema = Schema.struct(
        ("price", Schema.decimal(10, 2)),
        ("day", Schema.date()),
        ("at", Schema.time()),
        ("ts", Schema.timestamp()),
        ("blob", Schema.bytes_()),
        ("ids", Schema.map_(Schema.of(FieldType.INT32, optional=False), Schema.string())),
        ("nan", Schema.of(FieldType.FLOAT64)),
        ("n", Schema.of(FieldType.INT8, optional=False)),
    )
    row = {
        "price": decimal_of(-12345, 2),
        "day": 1,
        "at": 86_399_999_999,  # 23:59:59.999999
        "ts": 1_500_999,
        "blob": b"\x01\x02",
        "ids": [(7, "seven")],
        "nan": math.nan,
        "n": -1,
    }
    raw = _converter("JsonConverter").encoder(schema).arrow(from_physical([row], schema))[0]
    doc = json.loads(raw.as_py())
    assert doc["payload"] == {
        "price": "z8c=",  # -12345 as two's complement bytes 0xCF 0xC7, like BigInteger
        "day": 1,
        "at": 86_399_999,  # Kafka's int32 milliseconds, rounded down
        "ts": 1500,
        "blob": "AQI=",
        "ids": [[7, "seven"]],
        "nan": "NaN",
        "n": -1,
    }
    fields = {f["field"]: f for f in doc["schema"]["fields"]}
    assert doc["schema"]["type"] == "struct"
    assert fields["price"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert fields["price"]["parameters"]["scale"] == "2"
    assert fields["day"]["name"] == "org.apache.kafka.connect.data.Date"
    assert fields["at"] == {  # as Kafka writes a Time: int32 (of milliseconds)
        "field": "at",
        "name": "org.apache.kafka.connect.data.Time",
        "optional": True,
        "type": "int32",
        "version": 1,
    }
    assert fields["ts"] == {
        "field": "ts",
        "name": "org.apache.kafka.connect.data.Timestamp",
        "optional": True,
        "type": "int64",
        "version": 1,
    }
    assert fields["n"] == {"field": "n", "optional": False, "type": "int8"}
    numeric = _converter(
        "JsonConverter", **{"decimal.format": "NUMERIC", "schemas.enable": "false"}
    )
    raw = numeric.encoder(schema).arrow(from_physical([row], schema))[0].as_py()
    assert raw.startswith(b'{"price":-123.45,"day":1,')


TIMES = Schema.struct(("t", Schema.time()))
#: 00:00:00, 23:59:59.999999, 12:34:56.000001, 00:00:00.000001, null
TIME_ROWS = [{"t": v} for v in (0, 86_399_999_999, 45_296_000_001, 1, None)]


def test_avro_carries_microsecond_times_exactly(registry: SqliteSchemaRegistry) -> None:
    converter = _converter("AvroConverter", registry)
    array = from_physical(TIME_ROWS, TIMES)
    assert array.type == pa.struct([("t", pa.time64("us"))])
    for encoder in (converter.encoder(TIMES), converter.encoder(Schema.time())):
        # flat schemas are written with numpy, others with fastavro: check both
        assert encoder.arrow_mode == "vectorised"
    nested = Schema.struct(("l", Schema.array(Schema.time())))
    for schema, values in ((TIMES, array), (nested, from_physical([{"l": [0, 1]}], nested))):
        topic = converter.encoder(schema).arrow(values)
        result = converter.decoder(schema).arrow(topic)
        assert result.errors is None
        assert result.values.to_pylist() == values.to_pylist()
    assert array.to_pylist() == [
        {"t": time(0)},
        {"t": time(23, 59, 59, 999_999)},
        {"t": time(12, 34, 56, 1)},
        {"t": time(0, 0, 0, 1)},
        {"t": None},
    ]
    # a `long` on the wire (after the union branch 1 of ["null", long])
    raw = converter.encoder(TIMES).arrow(array)[1].as_py()
    assert raw[5:] == b"\x02\xfe\xff\xba\xdd\x83\x05"


def test_avro_refuses_a_time_outside_a_day(registry: SqliteSchemaRegistry) -> None:
    converter = _converter("AvroConverter", registry)
    schema = Schema.struct(("t", Schema.time(optional=False)))
    topic = converter.encoder(schema).arrow(from_physical([{"t": 0}], schema))[0].as_py()
    for micros in (86_400_000_000, -1):
        zigzag = (micros << 1) ^ (micros >> 63)
        varint = bytearray()
        while zigzag >= 0x80:
            varint.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        varint.append(zigzag)
        result = converter.decoder(schema).arrow(pa.array([topic[:5] + bytes(varint)]))
        assert result.errors.to_pylist() == [f"value.t: {micros} is not a time of day in µs"]
        assert result.values.to_pylist() == [None]


def test_json_carries_times_as_kafka_milliseconds() -> None:
    """Kafka's wire format: int32 ms of the day; the sub-millisecond digits are cut (rounding
    down, as for timestamps), so 23:59:59.999999 reads back as 23:59:59.999."""
    for options in JSON_OPTIONS:
        converter = _converter("JsonConverter", **options)
        topic = converter.encoder(TIMES).arrow(from_physical(TIME_ROWS, TIMES))
        payloads = [json.loads(raw) for raw in topic.to_pylist()]
        if options.get("schemas.enable") != "false":
            assert {p["schema"]["fields"][0]["type"] for p in payloads} == {"int32"}
            payloads = [p["payload"] for p in payloads]
        assert payloads == [{"t": v} for v in (0, 86_399_999, 45_296_000, 0, None)]
        result = converter.decoder(TIMES).arrow(topic)
        assert result.errors is None
        assert result.values.to_pylist() == [
            {"t": time(0)},
            {"t": time(23, 59, 59, 999_000)},
            {"t": time(12, 34, 56)},
            {"t": time(0)},
            {"t": None},
        ]


def test_kafka_written_json_reads_back() -> None:
    """A payload as Kafka's JsonConverter writes it (with its own schema text) decodes."""
    schema = Schema.struct(
        ("id", Schema.of(FieldType.INT32, optional=False)), ("d", Schema.decimal(5, 2))
    )
    raw = json.dumps(
        {
            "schema": {
                "type": "struct",
                "fields": [{"type": "int32", "optional": False, "field": "id"}],
            },
            "payload": {"id": 42, "d": "MDk="},
        }
    ).encode()
    result = _converter("JsonConverter").decoder(schema).arrow(pa.array([raw, None], pa.binary()))
    assert result.errors is None
    assert result.values.to_pylist() == [{"id": 42, "d": decimal_of(12345, 2)}, None]


# -- decoding errors (Arrow forms) -----------------------------------------------------------------
STRUCT = Schema.struct(
    ("a", Schema.of(FieldType.INT32, optional=False)),
    ("b", Schema.bytes_()),
    ("t", Schema.time()),
    ("d", Schema.decimal(4, 1)),
)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": 1', "value is not valid JSON: Expecting ',' delimiter"),
        (b"\xff\xfe", "value is not valid UTF-8"),
        (b'{"a": 1}', 'value has no "schema" and "payload" fields (schemas.enable=true)'),
        (
            b'{"schema": {}, "payload": {"b": "AA=="}}',
            "value.a is null, but its schema is not optional",
        ),
        (b'{"schema": {}, "payload": {"a": "1"}}', "value.a: expected int32, got a string"),
        (b'{"schema": {}, "payload": {"a": 1.5}}', "value.a: expected int32, got the number 1.5"),
        (b'{"schema": {}, "payload": {"a": 3000000000}}', "value.a: 3000000000 is out of range"),
        (b'{"schema": {}, "payload": {"a": 1, "b": "!!"}}', "value.b is not valid base64"),
        (
            b'{"schema": {}, "payload": {"a": 1, "t": 86400000}}',
            "value.t: 86400000 is out of range",
        ),
        (
            b'{"schema": {}, "payload": {"a": 1, "d": "JxA="}}',
            "value.d: 1000.0 does not fit decimal(4,1)",
        ),
        (b'{"schema": {}, "payload": [1]}', "value: expected an object, got an array"),
        (b'{"schema": {}, "payload": null}', "value is null, but its schema is not optional"),
    ],
)
def test_json_decode_errors_name_the_field(raw: bytes, reason: str) -> None:
    schema = Schema.struct(*STRUCT.fields, optional=False)
    good = b'{"schema": {}, "payload": {"a": 7}}'
    result = _converter("JsonConverter").decoder(schema).arrow(pa.array([good, raw], pa.binary()))
    assert result.errors is not None
    assert result.errors[0].as_py() is None
    assert result.errors[1].as_py().startswith(reason), result.errors[1].as_py()
    assert result.values.to_pylist()[1] is None
    assert result.values.to_pylist()[0]["a"] == 7


def test_schemaless_json_without_schema_is_checked_text() -> None:
    converter = _converter("JsonConverter", **{"schemas.enable": "false"})
    assert not converter.needs_schema()
    decoder = converter.decoder(None)
    result = decoder.arrow(pa.array([b'{"x": [1, 2]}', b"nope", None], pa.binary()))
    assert result.values.to_pylist() == ['{"x": [1, 2]}', None, None]
    assert result.errors.to_pylist()[1].startswith("value is not valid JSON")


@pytest.mark.parametrize(
    ("name", "raw", "reason"),
    [
        ("LongConverter", b"\x01\x02\x03", "value has 3 bytes, expected 8"),
        ("IntegerConverter", b"", "value has 0 bytes, expected 4"),
        ("ShortConverter", b"\x00\x01\x02", "value has 3 bytes, expected 2"),
        ("DoubleConverter", b"\x00" * 9, "value has 9 bytes, expected 8"),
        ("FloatConverter", b"\x00", "value has 1 bytes, expected 4"),
    ],
)
def test_numbers_reject_wrong_lengths(name: str, raw: bytes, reason: str) -> None:
    good = b"\x00" * {"Long": 8, "Doub": 8, "Inte": 4, "Floa": 4, "Shor": 2}[name[:4]]
    result = _converter(name).decoder(None).arrow(pa.array([good, raw, None], pa.binary()))
    assert result.errors.to_pylist() == [None, reason, None]
    assert result.values.to_pylist() == [0, None, None]


def test_avro_decode_errors(registry: SqliteSchemaRegistry) -> None:
    schema = Schema.struct(("a", Schema.of(FieldType.INT32, optional=False)))
    converter = _converter("AvroConverter", registry)
    good = converter.encoder(schema).arrow(pa.array([{"a": 5}], arrow_type(schema)))[0].as_py()
    decoder = converter.decoder(schema)
    raws = [good, b"{}", b"\x00\x00\x00\x03\xe7\x02", good[:5], good + b"\x00", b"\x01" + good[1:]]
    result = decoder.arrow(pa.array(raws, pa.binary()))
    errors = result.errors.to_pylist()
    assert errors[0] is None and result.values[0].as_py() == {"a": 5}
    assert errors[1].startswith("value is not Avro with a schema id (expected byte 0x00")
    assert errors[2] == "value names Avro schema id 999, which the registry lacks"
    assert errors[3].startswith("value is not valid Avro for schema id")
    assert errors[4] == "value has 1 bytes after its Avro value"
    assert errors[5].startswith("value is not Avro with a schema id")


def test_avro_encode_rejects_null_required_fields(registry: SqliteSchemaRegistry) -> None:
    schema = Schema.struct(("a", Schema.of(FieldType.INT32, optional=False)))
    encoder = _converter("AvroConverter", registry).encoder(schema)
    with pytest.raises(
        RecordError, match=r"record 1: value.a is null, but its schema is not optional"
    ):
        encoder.arrow(pa.array([{"a": 1}, {"a": None}], arrow_type(schema)))
    with pytest.raises(RecordError, match=r"record 0: value\.a is null"):
        _converter("JsonConverter").encoder(schema).arrow(
            pa.array([{"a": None}], arrow_type(schema))
        )


def test_avro_reads_older_versions_by_their_id(registry: SqliteSchemaRegistry) -> None:
    """A topic whose schema gained an optional field: old records decode with the new schema."""
    v1 = Schema.struct(("a", Schema.of(FieldType.INT32, optional=False)), name="com.x.R")
    v2 = Schema.struct(
        ("a", Schema.of(FieldType.INT32, optional=False)), ("b", Schema.string()), name="com.x.R"
    )
    old = (
        _converter("AvroConverter", registry)
        .encoder(v1)
        .arrow(pa.array([{"a": 1}], arrow_type(v1)))
    )
    new = (
        _converter("AvroConverter", registry)
        .encoder(v2)
        .arrow(pa.array([{"a": 2, "b": "x"}], arrow_type(v2)))
    )
    result = _converter("AvroConverter", registry).decoder(v2).arrow(pa.concat_arrays([old, new]))
    assert result.errors is None
    assert result.values.to_pylist() == [{"a": 1, "b": None}, {"a": 2, "b": "x"}]


def test_avro_schema_mapping() -> None:
    schema = Schema.struct(
        ("1st field", Schema.of(FieldType.INT8, optional=False)),
        ("ts", Schema.timestamp()),
        ("m", Schema.map_(Schema.of(FieldType.INT64, optional=False), Schema.decimal(9, 3))),
        ("t", Schema.time(optional=False)),
        name="com.example.Row",
    )
    avro = avro_schema(schema)
    assert avro["type"] == "record" and avro["name"] == "Row"
    first, ts, m, t = avro["fields"]
    assert first == {"name": "_1st_field", "type": {"type": "int", "connect.type": "int8"}}
    assert t == {"name": "t", "type": {"type": "long", "logicalType": "time-micros"}}
    assert ts == {
        "name": "ts",
        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        "default": None,
    }
    entry = m["type"][1]["items"]
    assert entry["type"] == "record"
    assert entry["fields"][1]["type"][1] == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 9,
        "scale": 3,
    }


# -- schemas in Kafka Connect's JSON form ----------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(schema=schemas())
def test_connect_json_schema_round_trip(schema: Schema) -> None:
    assert from_connect(json.loads(canonical(schema))) == schema
    assert from_connect(to_connect(schema)) == schema


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "schema: expected an object, got list"),
        ({"type": "int128"}, "schema.type: unknown type 'int128'"),
        ({"type": "int32", "optional": "yes"}, "schema.optional: expected true or false"),
        ({"type": "int64", "name": "org.apache.kafka.connect.data.Date"}, "must have type int32"),
        (
            {"type": "int32", "name": "org.apache.kafka.connect.data.Time"},
            "schema: org.apache.kafka.connect.data.Time must have type int64, not int32",
        ),
        (
            {"type": "struct", "fields": [{"type": "int8"}]},
            "schema.fields[0]: needs a string 'field'",
        ),
        ({"type": "array"}, "schema.items: expected an object, got NoneType"),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "x"},
            },
            "scale and precision must be integers",
        ),
    ],
)
def test_bad_connect_schemas_are_reported(data: Any, message: str) -> None:
    with pytest.raises(SchemaFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_connect(data)


def test_an_int32_time_is_refused_not_read_as_microseconds() -> None:
    kafka_time = {"type": "int32", "name": "org.apache.kafka.connect.data.Time"}
    with pytest.raises(SchemaFormatError) as caught:
        from_connect(kafka_time)
    assert "sluice's Time is int64 microseconds; an int32 Time is Kafka's milliseconds" in str(
        caught.value
    )
    # sluice's own form, and Kafka's form only where the JSON envelope needs it
    assert to_connect(Schema.time())["type"] == "int64"
    assert to_connect(Schema.array(Schema.time()), kafka=True)["items"]["type"] == "int32"
    assert from_connect(to_connect(Schema.time(optional=False))) == Schema.time(optional=False)


def test_kafka_decimal_without_precision_reads_as_38() -> None:
    data = {
        "type": "bytes",
        "optional": False,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2"},
    }
    assert from_connect(data) == Schema.decimal(38, 2, optional=False)


# -- registry --------------------------------------------------------------------------------------
def test_registry_versions_subjects_and_ids(registry: SqliteSchemaRegistry) -> None:
    one, two = canonical(Schema.string()), canonical(Schema.of(FieldType.INT64))
    first = registry.register("t-value", one)
    assert (first.version, registry.register("t-value", one).version) == (1, 1)
    second = registry.register("t-value", two)
    assert second.version == 2 and second.id != first.id
    assert registry.register("u-value", one).id == first.id  # ids are global per schema text
    assert registry.latest("t-value") == second
    assert [v.version for v in registry.versions("t-value")] == [1, 2]
    assert registry.subjects() == ["t-value", "u-value"]
    assert registry.by_id(first.id) == one and registry.by_id(999) is None
    assert registry.latest("nope-value") is None
    import pickle

    again = pickle.loads(pickle.dumps(registry))
    assert again.latest("t-value") == second


# -- configuration errors --------------------------------------------------------------------------
def test_converter_names_aliases_and_errors() -> None:
    assert converter_class("org.apache.kafka.connect.json.JsonConverter", "k") is JsonConverter
    assert (
        converter_class(
            "org.apache.rocketmq.connect.runtime.converter.record.json.JsonConverter", "k"
        )
        is JsonConverter
    )
    assert converter_class("io.confluent.connect.avro.AvroConverter", "k") is AvroConverter
    for name in ("Double", "Float", "Integer", "Long", "Short", "ByteArray", "String"):
        rocket = f"org.apache.rocketmq.connect.runtime.converter.record.{name}Converter"
        assert converter_class(rocket, "k").__name__ == f"{name}Converter"
    assert converter_class("org.apache.kafka.connect.converters.LongConverter", "k").__name__ == (
        "LongConverter"
    )
    assert converter_class("org.apache.kafka.connect.storage.StringConverter", "k").__name__ == (
        "StringConverter"
    )
    with pytest.raises(ConfigException, match=r"key.converter: unknown converter 'Nope'; known: "):
        converter_class("Nope", "key.converter")
    with pytest.raises(
        ConfigException, match=r"value.converter: cannot load converter 'no.such.C'"
    ):
        converter_class("no.such.C", "value.converter")
    with pytest.raises(
        ConfigException, match=r"value.converter: 'pathlib.Path' is not a Converter"
    ):
        converter_class("pathlib.Path", "value.converter")


class UpperConverter(JsonConverter):
    """A plugin converter (found by dotted path or after `register`)."""


def test_plugin_converters_by_path_and_register() -> None:
    assert converter_class("tests.unit.test_converters.UpperConverter", "k") is UpperConverter
    register(UpperConverter, "com.example.Upper")
    assert converter_class("com.example.Upper", "k") is UpperConverter


def test_entry_point_converters(monkeypatch: pytest.MonkeyPatch) -> None:
    import sluice.converters as module

    class EntryPoint:
        def __init__(self, name: str, target: Any) -> None:
            self.name, self.target = name, target

        def load(self) -> Any:
            if isinstance(self.target, Exception):
                raise self.target
            return self.target

    points = [EntryPoint("upper", UpperConverter), EntryPoint("broken", ImportError("no module x"))]
    monkeypatch.setattr(
        module, "entry_points", lambda group: points if group == "sluice.converters" else []
    )
    assert converter_class("upper", "value.converter") is UpperConverter
    with pytest.raises(
        ConfigException, match=r"cannot load converter plugin 'broken': no module x"
    ):
        converter_class("broken", "value.converter")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"schemas.enable": "maybe"}, r"value.converter.schemas.enable: expected a boolean"),
        (
            {"decimal.format": "hex"},
            r"value.converter.decimal.format: must be one of BASE64, NUMERIC",
        ),
        ({"schemas.cache.size": "-1"}, r"value.converter.schemas.cache.size: must be at least 0"),
    ],
)
def test_bad_options_name_the_full_key(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigException, match=message):
        _converter("JsonConverter", **options)


def test_encoders_reject_schemas_they_cannot_write() -> None:
    with pytest.raises(
        ConfigException, match=r"value.converter: LongConverter cannot convert string"
    ):
        _converter("LongConverter").encoder(Schema.string())
    with pytest.raises(ConfigException, match=r"ByteArrayConverter cannot convert struct<`a`:int>"):
        _converter("ByteArrayConverter").encoder(Schema.struct(("a", Schema.of(FieldType.INT32))))
    with pytest.raises(
        ConfigException, match=r"value.converter: AvroConverter needs the runtime's"
    ):
        _converter("AvroConverter").encoder(Schema.string())


def test_missing_and_conflicting_topic_schemas(registry: SqliteSchemaRegistry) -> None:
    from sluice.engine.converters import plan_decoders

    config = {"value.converter": "JsonConverter"}
    with pytest.raises(
        ConfigException,
        match=r"value.converter: JsonConverter needs the value "
        r"schema of topic\(s\) a, b, and none is registered",
    ):
        plan_decoders(config, ["a", "b"], registry)
    registry.register("a-value", canonical(Schema.string()))
    with pytest.raises(
        ConfigException, match=r"topic\(s\) b have no registered value schema yet \(a do\)"
    ):
        plan_decoders(config, ["a", "b"], registry)
    # different schemas: a decoder per topic (the sink then runs fused)
    registry.register("b-value", canonical(Schema.of(FieldType.INT64)))
    mixed = plan_decoders(config, ["a", "b"], registry)
    assert mixed.mixed
    assert mixed.of("a").value.schema == Schema.string()
    assert mixed.of("b").value.schema == Schema.of(FieldType.INT64)
    assert mixed.of("a").key is mixed.of("b").key  # keys alike: one decoder
    registry.register("b-value", canonical(Schema.string()))
    same = plan_decoders(config, ["a", "b"], registry)
    assert not same.mixed and same.value.schema == Schema.string()
    # schemaless JSON with no registered schema: the JSON text, as a STRING
    plain = {"value.converter": "JsonConverter", "value.converter.schemas.enable": "false"}
    assert plan_decoders(plain, ["c"], registry).value.schema == Schema.string()

    # Avro (no SQL form): a topic without a schema yet takes it when its first records come
    avro = {"value.converter": "AvroConverter"}
    late = plan_decoders(avro, ["c"], registry)
    with pytest.raises(
        ConfigException,
        match=r"value.converter: AvroConverter needs the value schema of topic 'c', and none "
        r"is registered",
    ):
        late.resolve_late()  # what a sink on the JVM path does when it starts
    schema = Schema.struct(("id", Schema.of(FieldType.INT64)))
    encoder = _converter("AvroConverter", registry).encoder(schema)
    records = encoder.arrow(pa.array([{"id": 7}], schema.to_arrow()))
    registry.register("c-value", canonical(schema))  # the source's first micro-batch
    decoded = pickle.loads(pickle.dumps(late)).value.arrow(records)  # on an executor
    assert decoded.values.to_pylist() == [{"id": 7}] and decoded.errors is None
    both = plan_decoders(avro, ["a", "d"], registry)  # one known, one not yet: decoded apart
    assert both.mixed and both.of("a").value.schema == Schema.string()


def test_check_errors_raises_the_first_record_error() -> None:
    from sluice.engine.converters import check_errors

    batch = pa.RecordBatch.from_pydict(
        {
            "key": [None, None],
            "value": ["ok", None],
            "error": [None, "JsonConverter: record t/3@17: value is not valid JSON: …"],
            "raw_key": pa.array([None, None], pa.binary()),
            "raw_value": pa.array([None, b"{"], pa.binary()),
        }
    )
    with pytest.raises(ConnectException, match=r"^JsonConverter: record t/3@17: value is not"):
        check_errors(batch)
    assert check_errors(batch.slice(0, 1)).schema.names == ["key", "value"]


def test_spark_times_come_back_as_microseconds() -> None:
    from sluice.engine.converters import sluice_frame, spark_frame_schema

    value = Schema.struct(("t", Schema.time()), ("l", Schema.array(Schema.time())))
    rows = [{"t": 86_399_999_999, "l": [1, None]}, None]
    ours = pa.RecordBatch.from_arrays([from_physical(rows, value)], names=["value"])
    spark = spark_frame_schema(ours.schema)
    assert spark.field("value").type == pa.struct(
        [("t", pa.time64("ns")), ("l", pa.list_(pa.time64("ns")))]
    )
    back = sluice_frame(ours.cast(spark))
    assert back.schema == ours.schema and back.to_pylist() == ours.to_pylist()
    assert sluice_frame(back) is back  # nothing to do
    nanos = pa.RecordBatch.from_arrays(
        [pa.array([1_001], pa.int64()).cast(pa.time64("ns"))], names=["value"]
    )
    with pytest.raises(ConnectException, match=r"a TIME value has digits below the microsecond"):
        sluice_frame(nanos)


def test_physical_types() -> None:
    schema = Schema.struct(("d", Schema.date()), ("l", Schema.array(Schema.timestamp())))
    assert physical_type(schema) == pa.struct([("d", pa.int32()), ("l", pa.list_(pa.int64()))])


# -- JSON text after the value --------------------------------------------------------------------


def test_text_after_an_envelope_is_ignored_but_not_after_a_bare_value() -> None:
    schema = Schema.of(FieldType.INT32)
    raw = pa.array([b' {"schema": {}, "payload": 5} trailing', b"5 trailing"], pa.binary())
    assert _converter("JsonConverter").decoder(schema).arrow(
        raw.slice(0, 1)
    ).values.to_pylist() == [5]
    bare = _converter("JsonConverter", **{"schemas.enable": "false"}).decoder(schema)
    assert bare.arrow(raw.slice(1)).errors.to_pylist()[0].startswith("value is not valid JSON")


def test_a_misspelt_converter_gets_did_you_mean() -> None:
    with pytest.raises(ConfigException) as exc:
        converter_class("JsonConvertor", "value.converter")
    assert exc.value.key == "value.converter"
    assert "unknown converter 'JsonConvertor'; did you mean JsonConverter?" in str(exc.value)
    assert "known:" not in str(exc.value)  # one suggestion, not the whole list
    with pytest.raises(ConfigException) as exc:
        converter_class("org.apache.kafka.connect.json.JsonConvertr", "key.converter")
    assert "did you mean org.apache.kafka.connect.json.JsonConverter?" in str(exc.value)
    with pytest.raises(ConfigException) as exc:
        converter_class("com.example.Mine", "key.converter")
    assert "did you mean" not in str(exc.value)  # nothing close: no guess
