"""SQL in a connector config reads the records and nothing else (sluice.engine.sql_guard): the
ways Spark SQL reaches outside a query are refused at planning, naming the key, before anything
runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.engine.transforms import apply_transforms, parse_transforms
from sluice.runtime.plugins import resolve_transform
from sluice.sdk import ConfigException

pytestmark = pytest.mark.spark


def _plan(spark: Any, config: dict[str, str]) -> Any:
    df = spark.createDataFrame(
        [("t", "k", "v", None, None)],
        "topic string, key string, value string, timestamp timestamp, headers map<string,string>",
    )
    return apply_transforms(spark, df, parse_transforms(config, resolve_transform))


def _sql(query: str) -> dict[str, str]:
    return {"transforms": "s", "transforms.s.class": "sql", "transforms.s.query": query}


def test_statements_that_are_not_queries_are_refused_and_not_run(
    spark: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    for query, said in [
        ("SET spark.sql.runSQLOnFiles=true", "not a SetCommand"),
        ("ADD JAR /tmp/evil.jar", "not a AddJarsCommand"),
        ("CREATE TEMPORARY FUNCTION f AS 'x.Y' USING JAR '/tmp/x.jar'", "CreateFunctionCommand"),
        ("CREATE TEMPORARY VIEW v AS SELECT 1", "not a CreateViewCommand"),
        ("FROM records INSERT INTO t SELECT *", "INSERT is not allowed"),
        ("EXECUTE IMMEDIATE 'SET a=b'", "EXECUTE IMMEDIATE is not allowed"),
        (f"SELECT TRANSFORM(value) USING 'touch {marker}' AS (value) FROM records", "TRANSFORM"),
    ]:
        with pytest.raises(ConfigException) as raised:
            _plan(spark, _sql(query))
        assert raised.value.key == "transforms.s.query", query
        assert said in str(raised.value), (query, str(raised.value))
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"  # the SET did not run
    assert not marker.exists()


def test_java_calls_and_commands_in_subqueries_are_refused(spark: Any) -> None:
    for query in [
        "SELECT topic, key, reflect('java.lang.System', 'getenv', 'HOME') AS value, "
        "timestamp, headers FROM records",
        "SELECT topic, key, (SELECT java_method('java.lang.System', 'exit', 1)) AS value, "
        "timestamp, headers FROM records",
        "SELECT topic, key, (SELECT max(v) FROM (SELECT TRANSFORM(value) USING 'id' AS (v) "
        "FROM records)) AS value, timestamp, headers FROM records",
    ]:
        with pytest.raises(ConfigException, match="is not allowed") as raised:
            _plan(spark, _sql(query))
        assert raised.value.key.startswith("transforms.s"), query


def test_files_cannot_be_read_by_path_and_plain_queries_still_work(spark: Any) -> None:
    stolen = (
        "SELECT topic, key, (SELECT first(value) FROM text.`/etc/hostname`) AS value, "
        "timestamp, headers FROM records"
    )
    with pytest.raises(ConfigException, match=r"invalid SQL.*/etc/hostname") as raised:
        _plan(spark, _sql(stolen))
    assert raised.value.key == "transforms.s"
    fine = _plan(
        spark,
        _sql("SELECT topic, key, upper(value) AS value, timestamp, headers FROM records"),
    )
    assert [r.value for r in fine.collect()] == ["V"]
