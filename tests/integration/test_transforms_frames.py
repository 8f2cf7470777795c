"""Built-in transforms, run as a user configures them on small batch DataFrames in local Spark.

(The checks of names and options that need no Spark are in tests/unit/test_transforms.py.)
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pytest

from sluice.engine.transforms import apply_transforms, parse_transforms
from sluice.runtime.plugins import resolve_transform
from sluice.sdk import ConfigException

pytestmark = pytest.mark.spark

T0 = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
T0_MS = 1714979289123


def frame(spark: Any, key: str, value: str, rows: list[tuple[Any, ...]]) -> Any:
    """Records `(topic, key, value[, timestamp, headers])`; partition_hash counts 0, 1, … ."""
    defaults = (T0, {"h": "1"})
    full = [(*row, *defaults[len(row) - 3 :], index) for index, row in enumerate(rows)]
    ddl = (
        f"topic string, key {key}, value {value}, timestamp timestamp, "
        "headers map<string,string>, partition_hash int"
    )
    return spark.createDataFrame(full, ddl)


def run(spark: Any, df: Any, config: dict[str, str]) -> list[Any]:
    return apply_transforms(spark, df, parse_transforms(config, resolve_transform)).collect()


def values(rows: list[Any]) -> list[Any]:
    return [r.value.asDict() if hasattr(r.value, "asDict") else r.value for r in rows]


def keys(rows: list[Any]) -> list[Any]:
    return [r.key.asDict() if hasattr(r.key, "asDict") else r.key for r in rows]


def fails(spark: Any, df: Any, config: dict[str, str]) -> ConfigException:
    with pytest.raises(ConfigException) as caught:
        run(spark, df, config)
    return caught.value


# --- RocketMQ Connect's set -------------------------------------------------------------------


def test_change_case_value_renames_fields_and_keeps_the_rest(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<first_name:string,last_name:string,user_id:int>",
        [("t", "k1", ("Ada", "Lovelace", 1)), ("t", "k2", None)],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "a",
            "transforms.a.class": "ChangeCase$Value",
            "transforms.a.from": "LOWER_UNDERSCORE",
            "transforms.a.to": "LOWER_CAMEL",
        },
    )
    assert values(rows) == [{"firstName": "Ada", "lastName": "Lovelace", "userId": 1}, None]
    assert keys(rows) == ["k1", "k2"]
    assert [r.partition_hash for r in rows] == [0, 1]
    assert [r.topic for r in rows] == ["t", "t"]
    assert [r.headers for r in rows] == [{"h": "1"}, {"h": "1"}]


def test_change_case_key_by_rocketmq_name(spark: Any) -> None:
    df = frame(spark, "struct<OrderId:int,CustomerName:string>", "string", [("t", (7, "x"), "v")])
    rows = run(
        spark,
        df,
        {
            "transforms": "cc",
            "transforms.cc.class": "org.apache.rocketmq.connect.transforms.ChangeCase$Key",
            "transforms.cc.from": "UPPER_CAMEL",
            "transforms.cc.to": "LOWER_HYPHEN",
        },
    )
    assert keys(rows) == [{"order-id": 7, "customer-name": "x"}]
    assert values(rows) == ["v"]


def test_extract_nested_field_value_and_key(spark: Any) -> None:
    df = frame(
        spark,
        "struct<meta:struct<region:string>>",
        "struct<id:int,address:struct<city:string,zip:string>>",
        [("t", (("eu",),), (1, ("Paris", "75001"))), ("t", ((None,),), (2, None))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "v,k",
            "transforms.v.class": "ExtractNestedField$Value",
            "transforms.v.input.outer.field.name": "address",
            "transforms.v.input.inner.field.name": "city",
            "transforms.v.output.field.name": "city",
            "transforms.k.class": "org.apache.rocketmq.connect.transforms.ExtractNestedField$Key",
            "transforms.k.input.outer.field.name": "meta",
            "transforms.k.input.inner.field.name": "region",
            "transforms.k.output.field.name": "region",
        },
    )
    assert [r.value.city for r in rows] == ["Paris", None]
    assert [r.value.id for r in rows] == [1, 2]
    assert rows[0].value.address.zip == "75001"
    assert [r.key.region for r in rows] == ["eu", None]


def test_pattern_rename_value_with_groups_and_flags(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<COL_name:string,col_age:int,other:int>",
        [("t", "k", ("Ada", 36, 1))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "r",
            "transforms.r.class": "PatternRename$Value",
            "transforms.r.field.pattern": "^col_(\\w+)$",
            "transforms.r.field.pattern.flags": "CASE_INSENSITIVE",
            "transforms.r.field.replacement": "c_$1",
        },
    )
    assert values(rows) == [{"c_name": "Ada", "c_age": 36, "other": 1}]


def test_pattern_rename_key_without_replacement_deletes_the_match(spark: Any) -> None:
    df = frame(spark, "struct<tmp_a:int,tmp_b:int>", "string", [("t", (1, 2), "v")])
    rows = run(
        spark,
        df,
        {
            "transforms": "r",
            "transforms.r.class": "org.apache.rocketmq.connect.transforms.PatternRename$Key",
            "transforms.r.field.pattern": "tmp_",
        },
    )
    assert keys(rows) == [{"a": 1, "b": 2}]


def test_pattern_filter_value_drops_whole_matches_of_a_string(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "string",
        [("t", "1", "DEBUG x"), ("t", "2", "info"), ("t", "3", None), ("t", "4", "xDEBUG x")],
    )
    config = {
        "transforms": "f",
        "transforms.f.class": "PatternFilter$Value",
        "transforms.f.filter.pattern": "DEBUG.*",
    }
    assert keys(run(spark, df, config)) == ["2", "3", "4"]


def test_pattern_filter_struct_fields_and_key_and_rocketmq_pattern_key(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<level:string,msg:string,n:int>",
        [("t", "a", ("DEBUG", "x", 1)), ("t", "b", ("INFO", "secret", 2)), ("t", "c", None)],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "f",
            "transforms.f.class": "org.apache.rocketmq.connect.transforms.PatternFilter$Value",
            "transforms.f.pattern": "DEBUG|secret",
            "transforms.f.fields": "level,msg",
        },
    )
    assert keys(rows) == ["c"]
    key_df = frame(spark, "string", "string", [("t", "drop-me", "v"), ("t", "keep", "v")])
    rows = run(
        spark,
        key_df,
        {
            "transforms": "f",
            "transforms.f.class": "PatternFilter$Key",
            "transforms.f.filter.pattern": "drop-.*",
        },
    )
    assert keys(rows) == ["keep"]


def test_set_maximum_precision_value_fields_and_whole_key(spark: Any) -> None:
    df = frame(
        spark,
        "decimal(30,2)",
        "struct<big:decimal(30,4),small:decimal(5,2),name:string>",
        [("t", Decimal("12.34"), (Decimal("1.2345"), Decimal("1.50"), "n"))],
    )
    out = apply_transforms(
        spark,
        df,
        parse_transforms(
            {
                "transforms": "v,k",
                "transforms.v.class": "SetMaximumPrecision$Value",
                "transforms.v.precision": "10",
                "transforms.k.class": "org.apache.rocketmq.connect.transforms."
                "SetMaximumPrecision$Key",
                "transforms.k.precision": "10",
            },
            resolve_transform,
        ),
    )
    assert out.schema["value"].dataType.simpleString() == (
        "struct<big:decimal(10,4),small:decimal(5,2),name:string>"
    )
    assert out.schema["key"].dataType.simpleString() == "decimal(10,2)"
    row = out.collect()[0]
    assert (row.key, row.value.big, row.value.small) == (
        Decimal("12.34"),
        Decimal("1.2345"),
        Decimal("1.50"),
    )
    unchanged = apply_transforms(
        spark,
        df,
        parse_transforms(
            {
                "transforms": "p",
                "transforms.p.class": "SetMaximumPrecision$Value",
                "transforms.p.precision": "38",
            },
            resolve_transform,
        ),
    )
    assert unchanged.schema == df.schema


def test_set_null_key_and_value(spark: Any) -> None:
    df = frame(spark, "string", "struct<a:int>", [("t", "k", (1,))])
    out = apply_transforms(
        spark,
        df,
        parse_transforms(
            {
                "transforms": "k,v",
                "transforms.k.class": "SetNull$Key",
                "transforms.v.class": "org.apache.rocketmq.connect.transforms.SetNull$Value",
            },
            resolve_transform,
        ),
    )
    assert out.schema["value"].dataType.simpleString() == "struct<a:int>"
    row = out.collect()[0]
    assert (row.key, row.value, row.topic, row.partition_hash) == (None, None, "t", 0)


# --- Kafka Connect's set ------------------------------------------------------------------------


def test_insert_field_value_topic_timestamp_and_static(spark: Any) -> None:
    df = frame(spark, "string", "struct<id:int>", [("orders", "k", (1,)), ("orders", "k", None)])
    rows = run(
        spark,
        df,
        {
            "transforms": "i",
            "transforms.i.class": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.i.topic.field": "src_topic!",
            "transforms.i.timestamp.field": "ts?",
            "transforms.i.static.field": "origin",
            "transforms.i.static.value": "it's \\ here",
        },
    )
    first = rows[0].value
    assert list(first.asDict()) == ["id", "src_topic", "ts", "origin"]
    assert (first.id, first.src_topic, first.origin) == (1, "orders", "it's \\ here")
    assert first.ts.timestamp() == T0.timestamp()
    assert rows[1].value is None  # tombstones stay tombstones


def test_insert_field_key(spark: Any) -> None:
    df = frame(spark, "struct<id:int>", "string", [("orders", (5,), "v")])
    rows = run(
        spark,
        df,
        {
            "transforms": "i",
            "transforms.i.class": "InsertField$Key",
            "transforms.i.topic.field": "topic",
        },
    )
    assert keys(rows) == [{"id": 5, "topic": "orders"}]


def test_replace_field_value_include_exclude_renames(spark: Any) -> None:
    df = frame(spark, "string", "struct<a:int,b:int,c:int,d:int>", [("t", "k", (1, 2, 3, 4))])
    base = {"transforms": "r", "transforms.r.class": "ReplaceField$Value"}
    assert values(
        run(spark, df, {**base, "transforms.r.include": "a,b,c", "transforms.r.exclude": "b"})
    ) == [{"a": 1, "c": 3}]
    assert values(run(spark, df, {**base, "transforms.r.renames": "a:x,d:y"})) == [
        {"x": 1, "b": 2, "c": 3, "y": 4}
    ]
    assert values(
        run(spark, df, {**base, "transforms.r.whitelist": "c,d", "transforms.r.blacklist": "d"})
    ) == [{"c": 3}]


def test_replace_field_key(spark: Any) -> None:
    df = frame(spark, "struct<id:int,tmp:string>", "string", [("t", (1, "x"), "v")])
    rows = run(
        spark,
        df,
        {
            "transforms": "r",
            "transforms.r.class": "org.apache.kafka.connect.transforms.ReplaceField$Key",
            "transforms.r.exclude": "tmp",
            "transforms.r.renames": "id:key_id",
        },
    )
    assert keys(rows) == [{"key_id": 1}]


def test_mask_field_value_default_per_type(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<s:string,i:int,l:bigint,d:double,dec:decimal(5,2),b:boolean,dt:date,"
        "arr:array<int>,st:struct<x:int>,n:string,keep:string>",
        [
            (
                "t",
                "k",
                ("x", 5, 6, 1.5, Decimal("9.99"), True, date(2020, 1, 2), [1], (1,), None, "ok"),
            )
        ],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "m",
            "transforms.m.class": "MaskField$Value",
            "transforms.m.fields": "s,i,l,d,dec,b,dt,arr,st,n",
        },
    )
    assert values(rows) == [
        {
            "s": "",
            "i": 0,
            "l": 0,
            "d": 0.0,
            "dec": Decimal("0.00"),
            "b": False,
            "dt": date(1970, 1, 1),
            "arr": [],
            "st": None,
            "n": None,
            "keep": "ok",
        }
    ]


def test_mask_field_with_replacement_value_and_key(spark: Any) -> None:
    df = frame(
        spark,
        "struct<ssn:string,id:int>",
        "struct<card:string,pin:int,amount:decimal(6,2)>",
        [("t", ("123-45", 9), ("4111", 1234, Decimal("10.00")))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "v,k",
            "transforms.v.class": "MaskField$Value",
            "transforms.v.fields": "card,pin,amount",
            "transforms.v.replacement": "99",
            "transforms.k.class": "org.apache.kafka.connect.transforms.MaskField$Key",
            "transforms.k.fields": "ssn",
            "transforms.k.replacement": "***-'**",
        },
    )
    assert values(rows) == [{"card": "99", "pin": 99, "amount": Decimal("99.00")}]
    assert keys(rows) == [{"ssn": "***-'**", "id": 9}]


def test_cast_whole_value_and_key_fields(spark: Any) -> None:
    df = frame(
        spark,
        "struct<id:string,score:int,at:timestamp,flag:int>",
        "string",
        [("t", ("42", 7, T0, 1), "3")],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "v,k",
            "transforms.v.class": "Cast$Value",
            "transforms.v.spec": "int32",
            "transforms.k.class": "org.apache.kafka.connect.transforms.Cast$Key",
            "transforms.k.spec": "id:int64,score:float64,at:int64,flag:boolean",
        },
    )
    assert values(rows) == [3]
    assert keys(rows) == [{"id": 42, "score": 7.0, "at": T0_MS, "flag": True}]


def test_cast_to_string_follows_kafka_renderings(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<at:timestamp,raw:binary,nested:struct<x:int>,n:int>",
        [("t", "k", (T0, b"\x00\xff", (1,), 5))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "c",
            "transforms.c.class": "Cast$Value",
            "transforms.c.spec": "at:string,raw:STRING,nested:string,n:string",
        },
    )
    assert values(rows) == [
        {"at": "2024-05-06T07:08:09.123Z", "raw": "AP8=", "nested": '{"x":1}', "n": "5"}
    ]


def test_timestamp_converter_value_fields(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<created:string,updated:bigint,day:timestamp>",
        [("t", "k", ("2024-05-06 07:08:09", T0_MS, T0)), ("t", "k", (None, None, None))],
    )
    base = {"transforms": "c", "transforms.c.class": "TimestampConverter$Value"}
    rows = run(
        spark,
        df,
        {
            **base,
            "transforms.c.field": "created",
            "transforms.c.target.type": "unix",
            "transforms.c.format": "yyyy-MM-dd HH:mm:ss",
            "transforms.c.unix.precision": "seconds",
        },
    )
    assert [r.value.created for r in rows] == [1714979289, None]
    rows = run(
        spark,
        df,
        {
            **base,
            "transforms.c.field": "updated",
            "transforms.c.target.type": "string",
            "transforms.c.format": "yyyy/MM/dd HH:mm:ss.SSS",
        },
    )
    assert [r.value.updated for r in rows] == ["2024/05/06 07:08:09.123", None]
    rows = run(spark, df, {**base, "transforms.c.field": "day", "transforms.c.target.type": "Date"})
    assert rows[0].value.day == date(2024, 5, 6)
    rows = run(spark, df, {**base, "transforms.c.field": "day", "transforms.c.target.type": "Time"})
    assert rows[0].value.day == time(7, 8, 9, 123000)  # a Spark TIME: sluice's Time
    rows = run(
        spark,
        df,
        {**base, "transforms.c.field": "updated", "transforms.c.target.type": "Timestamp"},
    )
    assert rows[0].value.updated.timestamp() == T0.timestamp()


def test_times_in_cast_mask_and_timestamp_converter_follow_kafka(spark: Any) -> None:
    """A Time is Spark's TIME(6): Cast gives Kafka's milliseconds of the day and `HH:mm:ss.SSSZ`,
    MaskField midnight, TimestampConverter reads it as that time on 1970-01-01 UTC (as Kafka's
    java.util.Date) and writes it from a timestamp's UTC time of day, microseconds kept."""
    at = time(23, 59, 59, 999_999)
    df = frame(spark, "string", "struct<t:time(6),u:time(6)>", [("t", "k", (at, None))])
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # Kafka works in UTC
    try:
        cast = {"transforms": "c", "transforms.c.class": "Cast$Value"}
        rows = run(spark, df, {**cast, "transforms.c.spec": "t:int32,u:int64"})
        assert values(rows) == [{"t": 86_399_999, "u": None}]
        rows = run(spark, df, {**cast, "transforms.c.spec": "t:string,u:string"})
        assert values(rows) == [{"t": "23:59:59.999Z", "u": None}]
        error = fails(spark, df, {**cast, "transforms.c.spec": "t:boolean"})
        assert error.key == "transforms.c.spec"
        assert "cannot cast 't' of type time(6) to boolean" in str(error)
        mask = {"transforms": "m", "transforms.m.class": "MaskField$Value"}
        rows = run(spark, df, {**mask, "transforms.m.fields": "t,u"})
        assert values(rows) == [{"t": time(0), "u": None}]
        convert = {"transforms": "c", "transforms.c.class": "TimestampConverter$Value"}
        rows = run(
            spark, df, {**convert, "transforms.c.field": "t", "transforms.c.target.type": "unix"}
        )
        assert rows[0].value.t == 86_399_999
        rows = run(
            spark,
            df,
            {
                **convert,
                "transforms.c.field": "t",
                "transforms.c.target.type": "unix",
                "transforms.c.unix.precision": "microseconds",
            },
        )
        assert rows[0].value.t == 86_399_999_999
        rows = run(
            spark,
            df,
            {**convert, "transforms.c.field": "t", "transforms.c.target.type": "Timestamp"},
        )
        day_one = datetime(1970, 1, 1, 23, 59, 59, 999_999, tzinfo=UTC)
        assert rows[0].value.t.timestamp() == day_one.timestamp()
        rows = run(
            spark, df, {**convert, "transforms.c.field": "t", "transforms.c.target.type": "Time"}
        )
        assert rows[0].value.t == at
        stamps = frame(spark, "string", "struct<ts:timestamp>", [("t", "k", (T0,))])
        rows = run(
            spark,
            stamps,
            {**convert, "transforms.c.field": "ts", "transforms.c.target.type": "Time"},
        )
        assert rows[0].value.ts == time(7, 8, 9, 123000)  # the UTC time of day
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_timestamp_converter_whole_key_reads_strings_as_utc_in_any_session_zone(
    spark: Any,
) -> None:
    df = frame(spark, "string", "date", [("t", "2024-05-06T07:08:09Z", date(2024, 5, 6))])
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        rows = run(
            spark,
            df,
            {
                "transforms": "k,v",
                "transforms.k.class": "org.apache.kafka.connect.transforms.TimestampConverter$Key",
                "transforms.k.target.type": "unix",
                "transforms.k.format": "yyyy-MM-dd'T'HH:mm:ss'Z'",
                "transforms.v.class": "TimestampConverter$Value",
                "transforms.v.target.type": "string",
                "transforms.v.format": "yyyy-MM-dd HH:mm",
            },
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert keys(rows) == [T0_MS - 123]
    assert values(rows) == ["2024-05-06 00:00"]


def test_value_to_key(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<id:int,region:string,body:string>",
        [("t", "old", (1, "eu", "x")), ("t", "old", None)],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "v",
            "transforms.v.class": "ValueToKey",
            "transforms.v.fields": "region,id",
        },
    )
    assert keys(rows) == [{"region": "eu", "id": 1}, None]
    assert values(rows)[0] == {"id": 1, "region": "eu", "body": "x"}


def test_extract_field_key_and_value(spark: Any) -> None:
    df = frame(
        spark,
        "struct<id:int,x:int>",
        "struct<payload:string,meta:int>",
        [("t", (1, 2), ("p", 3)), ("t", None, None)],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "k,v",
            "transforms.k.class": "ExtractField$Key",
            "transforms.k.field": "id",
            "transforms.v.class": "org.apache.kafka.connect.transforms.ExtractField$Value",
            "transforms.v.field": "payload",
        },
    )
    assert keys(rows) == [1, None]
    assert values(rows) == ["p", None]


def test_hoist_field_key_and_value(spark: Any) -> None:
    df = frame(spark, "bigint", "string", [("t", 5, "hello"), ("t", None, None)])
    rows = run(
        spark,
        df,
        {
            "transforms": "k,v",
            "transforms.k.class": "HoistField$Key",
            "transforms.k.field": "id",
            "transforms.v.class": "HoistField$Value",
            "transforms.v.field": "line",
        },
    )
    assert keys(rows) == [{"id": 5}, {"id": None}]
    assert values(rows) == [{"line": "hello"}, {"line": None}]


def test_flatten_value_and_key(spark: Any) -> None:
    df = frame(
        spark,
        "struct<a:struct<b:int>>",
        "struct<id:int,user:struct<name:string,addr:struct<city:string>>,tags:array<string>>",
        [("t", ((1,),), (1, ("Ada", ("Paris",)), ["x"])), ("t", (None,), (2, None, None))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "v,k",
            "transforms.v.class": "Flatten$Value",
            "transforms.k.class": "org.apache.kafka.connect.transforms.Flatten$Key",
            "transforms.k.delimiter": "_",
        },
    )
    assert values(rows) == [
        {"id": 1, "user.name": "Ada", "user.addr.city": "Paris", "tags": ["x"]},
        {"id": 2, "user.name": None, "user.addr.city": None, "tags": None},
    ]
    assert keys(rows) == [{"a_b": 1}, {"a_b": None}]


def test_insert_header_and_drop_headers(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "string",
        [
            ("t", "1", "v", T0, {"env": "old", "trace": "x", "keep": "y"}),
            ("t", "2", "v", T0, None),
        ],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "i,d",
            "transforms.i.class": "org.apache.kafka.connect.transforms.InsertHeader",
            "transforms.i.header": "env",
            "transforms.i.value.literal": "prod's",
            "transforms.d.class": "DropHeaders",
            "transforms.d.headers": "trace,missing",
        },
    )
    assert [r.headers for r in rows] == [{"env": "prod's", "keep": "y"}, {"env": "prod's"}]


@pytest.mark.parametrize(
    ("predicate", "negate", "kept"),
    [
        ({"predicate.class": "TopicNameMatches", "predicate.pattern": "logs-.*"}, "false", "12"),
        ({"predicate.class": "TopicNameMatches", "predicate.pattern": "logs-.*"}, "true", "34"),
        ({"predicate.class": "TopicNameMatches", "predicate.pattern": "logs"}, "false", "1234"),
        (
            {
                "predicate.class": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
                "predicate.name": "skip",
            },
            "false",
            "134",
        ),
        ({"predicate.class": "RecordIsTombstone"}, "false", "123"),
    ],
)
def test_filter_drops_records_matching_the_predicate(
    spark: Any, predicate: dict[str, str], negate: str, kept: str
) -> None:
    df = frame(
        spark,
        "string",
        "string",
        [
            ("orders", "1", "v", T0, None),
            ("orders", "2", "v", T0, {"skip": "1"}),
            ("logs-a", "3", "v", T0, {}),
            ("logs-b", "4", None, T0, {"other": "1"}),
        ],
    )
    config = {"transforms": "f", "transforms.f.class": "Filter", "transforms.f.negate": negate}
    config.update({f"transforms.f.{k}": v for k, v in predicate.items()})
    assert "".join(keys(run(spark, df, config))) == kept


# --- chains and hostile names ------------------------------------------------------------------


def test_chain_applies_in_order(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<user_name:string,user_id:int>",
        [("t", "k", ("ada", 1)), ("t", "k", ("bob", 2))],
    )
    config = {
        "transforms": "rename,upper,drop",
        "transforms.rename.class": "ChangeCase$Value",
        "transforms.rename.from": "LOWER_UNDERSCORE",
        "transforms.rename.to": "UPPER_CAMEL",
        # Sees the names the first step made: this fails if the steps run in another order.
        "transforms.upper.class": "sql",
        "transforms.upper.query": "SELECT topic, key, named_struct('UserName', "
        "upper(value.UserName), 'UserId', value.UserId) AS value, timestamp, headers, "
        "partition_hash FROM records",
        "transforms.drop.class": "PatternFilter$Value",
        "transforms.drop.filter.pattern": "BOB",
        "transforms.drop.fields": "UserName",
    }
    assert values(run(spark, df, config)) == [{"UserName": "ADA", "UserId": 1}]
    swapped = {**config, "transforms": "rename,drop,upper"}  # bob is still lower case
    assert values(run(spark, df, swapped)) == [
        {"UserName": "ADA", "UserId": 1},
        {"UserName": "BOB", "UserId": 2},
    ]


def test_hostile_field_names(spark: Any) -> None:
    df = frame(
        spark,
        "string",
        "struct<`we``ird`:string,`it's`:int,`a b`:struct<`c\"d`:string>,`x\\y`:string>",
        [("t", "k", ("w", 1, ('q"',), "bs"))],
    )
    rows = run(
        spark,
        df,
        {
            "transforms": "r,m,i,f,k",
            "transforms.r.class": "ReplaceField$Value",
            "transforms.r.renames": "we`ird:new`name,it's:it is",
            "transforms.m.class": "MaskField$Value",
            "transforms.m.fields": "x\\y",
            "transforms.m.replacement": "'; DROP TABLE x; --",
            "transforms.i.class": "InsertField$Value",
            "transforms.i.static.field": "s`t'a t\"ic",
            "transforms.i.static.value": "`v' \"",
            "transforms.f.class": "Flatten$Value",
            "transforms.f.delimiter": "`",
            "transforms.k.class": "ValueToKey",
            "transforms.k.fields": 'new`name,a b`c"d',
        },
    )
    assert values(rows) == [
        {
            "new`name": "w",
            "it is": 1,
            'a b`c"d': 'q"',
            "x\\y": "'; DROP TABLE x; --",
            "s`t'a t\"ic": "`v' \"",
        }
    ]
    assert keys(rows) == [{"new`name": "w", 'a b`c"d': 'q"'}]


# --- option errors ------------------------------------------------------------------------------

STRUCT_VALUE = "struct<a:int,b:string,inner:struct<x:int>,ts:timestamp>"


@pytest.mark.parametrize(
    ("options", "key"),
    [
        # missing required keys
        ({"class": "ChangeCase$Value", "from": "LOWER_CAMEL"}, "transforms.e.to"),
        ({"class": "ExtractField$Key"}, "transforms.e.field"),
        ({"class": "MaskField$Value"}, "transforms.e.fields"),
        ({"class": "Cast$Value"}, "transforms.e.spec"),
        ({"class": "TimestampConverter$Value"}, "transforms.e.target.type"),
        ({"class": "InsertHeader", "header": "h"}, "transforms.e.value.literal"),
        ({"class": "Filter", "predicate.class": "HasHeaderKey"}, "transforms.e.predicate.name"),
        ({"class": "PatternFilter$Value"}, "transforms.e.filter.pattern"),
        ({"class": "SetMaximumPrecision$Value"}, "transforms.e.precision"),
        (
            {"class": "TimestampConverter$Value", "field": "ts", "target.type": "string"},
            "transforms.e.format",
        ),
        # bad enums and malformed values
        ({"class": "ChangeCase$Value", "from": "CAMEL", "to": "LOWER_CAMEL"}, "transforms.e.from"),
        ({"class": "TimestampConverter$Value", "target.type": "date"}, "transforms.e.target.type"),
        (
            {"class": "TimestampConverter$Value", "target.type": "Date", "unix.precision": "ms"},
            "transforms.e.unix.precision",
        ),
        ({"class": "Cast$Value", "spec": "a:int128"}, "transforms.e.spec"),
        ({"class": "Filter", "predicate.class": "Always"}, "transforms.e.predicate.class"),
        (
            {"class": "Filter", "predicate.class": "RecordIsTombstone", "negate": "maybe"},
            "transforms.e.negate",
        ),
        ({"class": "ReplaceField$Value", "renames": "a-b"}, "transforms.e.renames"),
        (
            {"class": "PatternRename$Value", "field.pattern": "(", "field.replacement": "x"},
            "transforms.e.field.pattern",
        ),
        (
            {"class": "PatternRename$Value", "field.pattern": "a", "field.pattern.flags": "NOPE"},
            "transforms.e.field.pattern.flags",
        ),
        (
            {"class": "PatternRename$Value", "field.pattern": "a", "field.replacement": "$2"},
            "transforms.e.field.replacement",
        ),
        ({"class": "SetMaximumPrecision$Value", "precision": "ten"}, "transforms.e.precision"),
        ({"class": "InsertField$Value", "offset.field": "o"}, "transforms.e.offset.field"),
        (
            {"class": "PatternFilter$Value", "filter.pattern": "x", "filter.types": "INT32"},
            "transforms.e.filter.types",
        ),
        # unknown fields, found when the query is planned
        ({"class": "ExtractField$Value", "field": "nope"}, "transforms.e.field"),
        ({"class": "ReplaceField$Value", "include": "a,nope"}, "transforms.e.include"),
        ({"class": "ReplaceField$Value", "blacklist": "nope"}, "transforms.e.blacklist"),
        ({"class": "ReplaceField$Value", "renames": "nope:x"}, "transforms.e.renames"),
        ({"class": "ReplaceField$Value", "renames": "a:b"}, "transforms.e.renames"),
        ({"class": "MaskField$Value", "fields": "a,nope"}, "transforms.e.fields"),
        (
            {"class": "MaskField$Value", "fields": "a", "replacement": "x"},
            "transforms.e.replacement",
        ),
        ({"class": "Cast$Value", "spec": "nope:int32"}, "transforms.e.spec"),
        ({"class": "Cast$Value", "spec": "int32"}, "transforms.e.spec"),
        ({"class": "Cast$Value", "spec": "inner:int32"}, "transforms.e.spec"),
        ({"class": "ValueToKey", "fields": "a,nope"}, "transforms.e.fields"),
        (
            {"class": "TimestampConverter$Value", "field": "nope", "target.type": "unix"},
            "transforms.e.field",
        ),
        (
            {"class": "TimestampConverter$Value", "field": "b", "target.type": "unix"},
            "transforms.e.format",
        ),
        (
            {"class": "TimestampConverter$Value", "field": "inner", "target.type": "unix"},
            "transforms.e.field",
        ),
        ({"class": "InsertField$Value", "topic.field": "a"}, "transforms.e.topic.field"),
        (
            {
                "class": "ExtractNestedField$Value",
                "input.outer.field.name": "nope",
                "input.inner.field.name": "x",
                "output.field.name": "y",
            },
            "transforms.e.input.outer.field.name",
        ),
        (
            {
                "class": "ExtractNestedField$Value",
                "input.outer.field.name": "inner",
                "input.inner.field.name": "nope",
                "output.field.name": "y",
            },
            "transforms.e.input.inner.field.name",
        ),
        ({"class": "PatternFilter$Value", "filter.pattern": "x"}, "transforms.e.fields"),
        (
            {"class": "PatternFilter$Value", "filter.pattern": "x", "fields": "a"},
            "transforms.e.fields",
        ),
        ({"class": "ChangeCase$Key", "from": "LOWER_CAMEL", "to": "UPPER_CAMEL"}, "transforms.e"),
    ],
)
def test_option_errors_name_the_key(spark: Any, options: dict[str, str], key: str) -> None:
    df = frame(spark, "string", STRUCT_VALUE, [("t", "k", (1, "b", (1,), T0))])
    config = {"transforms": "e", **{f"transforms.e.{k}": v for k, v in options.items()}}
    error = fails(spark, df, config)
    assert error.key == key
    assert str(error).startswith(key + ":")


def test_unknown_field_errors_name_the_field(spark: Any) -> None:
    df = frame(spark, "string", STRUCT_VALUE, [("t", "k", (1, "b", (1,), T0))])
    error = fails(
        spark,
        df,
        {
            "transforms": "e",
            "transforms.e.class": "ReplaceField$Value",
            "transforms.e.exclude": "zz",
        },
    )
    assert "'zz'" in str(error) and error.key == "transforms.e.exclude"


def test_renames_that_collide_are_rejected(spark: Any) -> None:
    df = frame(spark, "string", "struct<user_id:int,USER_ID:int>", [("t", "k", (1, 2))])
    error = fails(
        spark,
        df,
        {
            "transforms": "e",
            "transforms.e.class": "ChangeCase$Value",
            "transforms.e.from": "LOWER_UNDERSCORE",
            "transforms.e.to": "LOWER_CAMEL",
        },
    )
    assert error.key == "transforms.e.to" and "'userId'" in str(error)


# --- Kafka's top-level predicates --------------------------------------------------------------


def _predicate_frame(spark: Any) -> Any:
    return frame(
        spark,
        "string",
        "string",
        [
            ("orders", "1", "a", T0, None),
            ("logs-a", "2", "b", T0, {"skip": "1"}),
            ("logs-b", "3", None, T0, {}),
        ],
    )


@pytest.mark.parametrize(
    ("negate", "kept"),
    [("false", ["1"]), ("true", ["2", "3"])],
)
def test_filter_with_a_top_level_predicate(spark: Any, negate: str, kept: list[str]) -> None:
    config = {
        "transforms": "dropLogs",
        "transforms.dropLogs.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.dropLogs.predicate": "isLogs",
        "transforms.dropLogs.negate": negate,
        "predicates": "isLogs",
        "predicates.isLogs.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isLogs.pattern": "logs-.*",
    }
    assert keys(run(spark, _predicate_frame(spark), config)) == kept


def test_a_predicate_gates_a_column_transform(spark: Any) -> None:
    config = {
        "transforms": "mark",
        "transforms.mark.class": "InsertHeader",
        "transforms.mark.header": "seen",
        "transforms.mark.value.literal": "yes",
        "transforms.mark.predicate": "hasSkip",
        "predicates": "hasSkip,tomb",
        "predicates.hasSkip.type": "HasHeaderKey",
        "predicates.hasSkip.name": "skip",
        "predicates.tomb.type": "RecordIsTombstone",
    }
    rows = run(spark, _predicate_frame(spark), config)
    assert [r.headers for r in rows] == [None, {"skip": "1", "seen": "yes"}, {}]


def test_filter_alone_drops_everything(spark: Any) -> None:
    config = {"transforms": "f", "transforms.f.class": "Filter"}
    assert run(spark, _predicate_frame(spark), config) == []


def test_a_predicate_on_a_sql_transform_is_refused(spark: Any) -> None:
    config = {
        "transforms": "s",
        "transforms.s.class": "sql",
        "transforms.s.query": "SELECT * FROM records",
        "transforms.s.predicate": "p",
        "predicates": "p",
        "predicates.p.type": "RecordIsTombstone",
    }
    with pytest.raises(ConfigException, match="predicates apply to transforms that compile"):
        run(spark, _predicate_frame(spark), config)
