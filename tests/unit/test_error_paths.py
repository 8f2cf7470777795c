"""Error paths of the engine, bus, runtime and file connectors that need no Spark job."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from sluice.connectors.file import FileSourceTask
from sluice.runtime.plugins import resolve_connector
from sluice.sdk import ConfigException, ConnectException, SourceConnector


class NoTaskSource(SourceConnector):
    """Plans no task at all (a broken plugin)."""

    task_class = FileSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return []


def test_connector_class_errors_name_the_class() -> None:
    with pytest.raises(ConfigException, match=r"connector.class: cannot load 'nowhere\.Thing'"):
        resolve_connector("nowhere.Thing")
    with pytest.raises(ConfigException, match=r"'pathlib\.Path' is not a SourceConnector"):
        resolve_connector("pathlib.Path")
    assert resolve_connector("org.apache.rocketmq.connect.file.FileSinkConnector").__name__ == (
        "FileSinkConnector"
    )
    assert resolve_connector("tests.unit.test_error_paths:NoTaskSource") is NoTaskSource


def test_planning_no_task_is_an_error(tmp_path: Path) -> None:
    from sluice.engine import parse_settings
    from sluice.engine.source import plan_source

    settings = parse_settings({"connector.class": "x"}, "source")
    with pytest.raises(ConfigException, match=r"max.tasks: connector 'x' planned no tasks"):
        plan_source(
            "x", NoTaskSource(), {}, settings, run="r", staging_dir=str(tmp_path), positions=None
        )


def test_sink_max_tasks_must_be_positive() -> None:
    from sluice.engine import parse_settings

    config = {"connector.class": "x", "connect.topicnames": "t"}
    with pytest.raises(ConfigException, match=r"max.tasks: must be at least 1, got 0"):
        parse_settings({**config, "max.tasks": "0"}, "sink")
    with pytest.raises(ConfigException, match=r"max.tasks: expected an integer, got 'two'"):
        parse_settings({**config, "tasks.max": "two"}, "sink")


def test_file_ranges_that_do_not_match_the_file_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\n")
    task = FileSourceTask()
    task.start({"filename": str(path), "connect.topicname": "t"})
    part = task.partitions()[0]
    with pytest.raises(ConnectException, match=r"range ends mid-line at byte 6"):
        list(task.read(part, None, {"position": 6}))
    with pytest.raises(ConnectException, match=r"ended at byte 8, before 20"):
        list(task.read(part, None, {"position": 20}))


def test_topic_writer_rejects_records_without_a_topic(tmp_path: Path) -> None:
    from sluice.bus.embedded import EmbeddedBus

    appender = EmbeddedBus(tmp_path).topic_appender(writer_id="w")
    batch = pa.RecordBatch.from_arrays(
        [
            pa.nulls(1, pa.string()),
            pa.nulls(1, pa.binary()),
            pa.array([b"v"]),
            pa.nulls(1, pa.timestamp("us", tz="UTC")),
            pa.nulls(1, pa.string()),
            pa.array([1], pa.int32()),
        ],
        names=["topic", "key", "value", "timestamp", "headers", "route"],
    )
    with pytest.raises(ValueError, match=r"a record has no topic: set connect.topicname"):
        appender.write(iter([batch]), 0)


def test_reader_continues_from_the_oldest_retained_offset(tmp_path: Path) -> None:
    from sluice.bus.embedded import EmbeddedBus
    from sluice.bus.embedded.spark import STORED_SCHEMA

    bus = EmbeddedBus(tmp_path, default_queues=1)
    bus.create_topic("t")
    for n in range(3):
        rows = pa.RecordBatch.from_arrays(
            [
                pa.nulls(10, pa.binary()),
                pa.array([f"{n}-{i}".encode() for i in range(10)]),
                pa.nulls(10, pa.timestamp("us", tz="UTC")),
                pa.nulls(10, pa.string()),
            ],
            schema=STORED_SCHEMA,
        )
        segment = bus.log.stage("t", 0, rows)
        bus.log.commit("w", n, [segment])
    bus.maintain(retention_bytes=segment.bytes)  # keeps only the newest segment: 20..29
    reader = bus.topic_reader(
        name="c", topics=["t"], max_tasks=1, control_path=str(tmp_path / "c.json"), positions=None
    )
    stream = reader(options={}).streamReader(schema=None)
    from pyspark.sql.datasource import InputPartition

    batches = list(stream.read(InputPartition([("t", 0, 5, 30)])))
    offsets = [o for b in batches for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(20, 30))


def test_failure_cause_picks_the_innermost_python_error() -> None:
    from sluice.runtime.runner import failure_cause

    trace = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Writing job failed.\n"
        "org.apache.spark.SparkException: Job aborted\n"
        '  File "x.py", line 3, in read\n'
        "ValueError: outer\n"
        "sluice.sdk._errors.RetriableException: database went away\n"
        "\tat org.apache.spark.api.python.BasePythonRunner\n"
    )
    assert failure_cause(trace) == "RetriableException: database went away"
    assert failure_cause("org.apache.spark.SparkException: only JVM\nmore") == (
        "org.apache.spark.SparkException: only JVM"
    )
    assert failure_cause("") == "unknown failure"


def test_retry_policy_config_and_exhaustion() -> None:
    from sluice.engine import parse_settings
    from sluice.engine.retry import RetryPolicy
    from sluice.sdk import RetriableException

    with pytest.raises(ConfigException, match=r"errors.retry.timeout: must be at least -1"):
        parse_settings({"connector.class": "x", "errors.retry.timeout": "-5"}, "source")
    with pytest.raises(ConfigException, match=r"errors.retry.delay.max.ms: expected an integer"):
        parse_settings({"connector.class": "x", "errors.retry.delay.max.ms": "soon"}, "source")
    parsed = parse_settings(
        {"connector.class": "x", "errors.retry.timeout": "-1", "errors.retry.delay.max.ms": "5"},
        "x",
    )
    assert parsed.retry == RetryPolicy(timeout_ms=-1, max_delay_ms=5)
    calls: list[int] = []

    def always() -> None:
        calls.append(1)
        raise RetriableException("down")

    policy = RetryPolicy(timeout_ms=700, max_delay_ms=300)  # room for at least one backoff
    with pytest.raises(ConnectException, match=r"op failed after \d+ retries .*: down") as err:
        policy.call(always, "op")
    retries = int(re.search(r"after (\d+) retries", str(err.value))[1])
    assert retries >= 1 and len(calls) == retries + 1
    with pytest.raises(ValueError, match="not retriable"):
        policy.call(lambda: (_ for _ in ()).throw(ValueError("not retriable")), "op")
