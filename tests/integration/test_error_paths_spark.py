"""Error paths of the engine and runtime that need a SparkSession (the others are in
tests/unit/test_error_paths.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.engine.converters import converter_for, schema_of
from sluice.sdk import ConfigException


@pytest.mark.spark
def test_converter_errors_name_the_key(spark) -> None:
    with pytest.raises(ConfigException, match=r"value.converter: unknown converter 'Avro'"):
        converter_for({"value.converter": "Avro"}, "value.converter")
    from pyspark.sql.types import IntegerType

    raw = converter_for({"value.converter": "ByteArrayConverter"}, "value.converter")
    with pytest.raises(
        ConfigException, match=r"^value.converter: ByteArrayConverter cannot convert int"
    ):
        raw.encoder(schema_of(IntegerType()))
    alias = "org.apache.rocketmq.connect.runtime.converter.record.StringConverter"
    assert type(converter_for({"key.converter": alias}, "key.converter")).__name__ == (
        "StringConverter"
    )


@pytest.mark.spark
def test_runner_refuses_double_start_and_reset_while_running(spark, tmp_path: Path) -> None:
    from sluice.runtime.runner import ConnectorRunner

    src = tmp_path / "in.txt"
    src.write_text("a\n")
    runner = ConnectorRunner(spark, tmp_path / "store")
    try:
        config = {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "t",
        }
        runner.start("src", config)
        with pytest.raises(ConfigException, match=r"connector 'src' is already running"):
            runner.start("src", config)
        with pytest.raises(ConfigException, match=r"running; stop it before a reset"):
            runner.reset_run("src")
        first = runner.current_run("src")
        runner.stop("src")
        assert runner.reset_run("src") != first
    finally:
        runner.close()
