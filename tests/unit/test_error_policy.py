"""The pure logic of `sluice.engine.errors`: settings, dead letters, their log lines, NOT NULL."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from sluice.engine.errors import (
    DEAD_LETTER_TYPE,
    DeadLetter,
    ErrorPolicy,
    ErrorReporter,
    record_letter,
    render,
    required_nulls,
    sink_dead_letters,
    split_errors,
)
from sluice.engine.settings import error_policy
from sluice.sdk import ConfigException, ConnectRecord

T0 = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)


class Counters:
    """Records what the runtime adds to a connector's counters."""

    def __init__(self) -> None:
        self.seen: list[dict[str, int]] = []

    def add(self, connector: str, increments: dict[str, int]) -> None:
        self.seen.append(increments)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for increments in self.seen:
            for k, v in increments.items():
                out[k] = out.get(k, 0) + v
        return out


def test_defaults_are_kafka_connects() -> None:
    assert error_policy({}) == ErrorPolicy()
    assert not ErrorPolicy().tolerate and ErrorPolicy().context_headers


def test_both_anchors_names_of_the_context_switch() -> None:
    kafka = {"errors.tolerance": "all", "errors.deadletterqueue.context.headers.enable": "false"}
    assert not error_policy(kafka).context_headers
    rocketmq = {"errors.deadletterqueue.context.properties.enable": "false"}
    assert not error_policy(rocketmq).context_headers


def test_queue_count_from_write_then_read_nums() -> None:
    both = {
        "errors.deadletterqueue.write.queue.nums": "3",
        "errors.deadletterqueue.read.queue.nums": "5",
    }
    assert error_policy(both).dlq_queues == 3
    assert error_policy({"errors.deadletterqueue.read.queue.nums": "5"}).dlq_queues == 5


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"errors.tolerance": "ALL"}, "errors.tolerance"),
        ({"errors.deadletterqueue.topic.name": "dlq"}, "errors.deadletterqueue.topic.name"),
        ({"errors.log.include.messages": "2x"}, "errors.log.include.messages"),
        (
            {"errors.deadletterqueue.read.queue.nums": "-1"},
            "errors.deadletterqueue.read.queue.nums",
        ),
    ],
)
def test_bad_settings_name_their_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigException) as info:
        error_policy(config)
    assert info.value.key == key


def test_a_sink_may_not_dead_letter_into_what_it_reads() -> None:
    config = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "in"}
    with pytest.raises(ConfigException, match="would be read again"):
        error_policy(config, reads=["other", "in"])
    assert error_policy(config, reads=["other"]).dlq_topic == "in"


def _bad_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["t", "t", "t"],
            "queue_id": [0, 1, 1],
            "queue_offset": [5, 6, 7],
            "key": [None, None, None],
            "value": ["ok", None, None],
            "timestamp": pa.array([T0] * 3, pa.timestamp("us", tz="UTC")),
            "headers": [None, '{"h": "1"}', None],
            "error": [None, "J: record t/1@6: key is not JSON", "J: record t/1@7: value bad"],
            "raw_key": [None, b"k", None],
            "raw_value": [None, b"v", b"w"],
        }
    )


def test_split_errors_and_the_stage_of_each_dead_letter() -> None:
    good, bad = split_errors(_bad_batch())
    assert good.num_rows == 1 and "error" not in good.schema.names
    letters = sink_dead_letters(bad, {"key": "KeyConv", "value": "ValueConv"})
    assert [(x.stage, x.class_name) for x in letters] == [
        ("KEY_CONVERTER", "KeyConv"),
        ("VALUE_CONVERTER", "ValueConv"),
    ]
    first = letters[0]
    assert (first.key, first.value, first.headers) == (b"k", b"v", {"h": "1"})
    assert (first.topic, first.partition, first.offset) == ("t", "1", "6")


def test_a_batch_without_errors_is_passed_whole() -> None:
    batch = _bad_batch().slice(0, 1)
    good, bad = split_errors(batch)
    assert bad is None and good.num_rows == 1
    plain = batch.select(["topic", "value"])
    assert split_errors(plain) == (plain, None)


def _letter(**changes: object) -> DeadLetter:
    base = {
        "key": b"\xff\x00",
        "value": b'{"a": oops}',
        "timestamp": T0,
        "headers": {"h": "1"},
        "topic": "t",
        "partition": "2",
        "offset": "9",
        "stage": "VALUE_CONVERTER",
        "class_name": "JsonConverter",
        "exception_class": "sluice.converters.RecordError",
        "message": "value is not valid JSON",
    }
    return DeadLetter(**{**base, **changes})  # type: ignore[arg-type]


def test_deliver_logs_counts_and_writes_rows(caplog: pytest.LogCaptureFixture) -> None:
    policy = ErrorPolicy(tolerate=True, log=True, log_messages=True, dlq_topic="dlq")
    reporter = ErrorReporter(policy, "conn")
    letters = reporter.letters([_letter(), _letter(offset="10")], task_id=3)
    assert letters.type == DEAD_LETTER_TYPE
    counters = Counters()
    with caplog.at_level(logging.WARNING, logger="sluice.errors"):
        rows = reporter.deliver(letters, counters)
    assert rows is not None and rows.column("topic").to_pylist() == ["dlq", "dlq"]
    headers = json.loads(rows.column("headers")[0].as_py())
    assert headers["h"] == "1" and headers["__connect.errors.task.id"] == "3"
    assert headers["__connect.errors.exception.stacktrace"] == "value is not valid JSON"
    assert counters.totals()["total-record-errors"] == 2 == counters.totals()["total-errors-logged"]
    line = caplog.records[0].getMessage()
    assert "task conn-3" in line and "stage 'VALUE_CONVERTER'" in line and "offset=9" in line
    assert "sent to dlq" in line
    assert "key=base64:/wA= value='{\"a\": oops}'" in line  # include.messages


def test_without_a_topic_nothing_is_written_and_messages_stay_out_of_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = ErrorReporter(ErrorPolicy(tolerate=True, log=True), "conn")
    with caplog.at_level(logging.WARNING, logger="sluice.errors"):
        assert reporter.deliver(reporter.letters([_letter()], 0)) is None
    assert "oops" not in caplog.text and "skipped" in caplog.text
    assert reporter.deliver(reporter.letters([], 0)) is None


def test_a_source_records_dead_letter_renders_it_as_json() -> None:
    record = ConnectRecord(
        value={"price": Decimal("1.50"), "at": T0, "raw": b"\x01"},
        key=7,
        partition={"file": "a"},
        offset={"line": 3},
        extensions={"h": "1"},
    )
    letter = record_letter(record, "people", ValueError("bad"), "pkg.Task")
    assert json.loads(letter.value) == {
        "price": "1.50",
        "at": "2026-11-21 08:00:00+00:00",
        "raw": "AQ==",
    }
    assert letter.key == b"7" and letter.topic == "people" and letter.stage == "TASK_POLL"
    assert json.loads(letter.offset) == {"line": 3}
    assert letter.exception_class == "builtins.ValueError"
    assert render(None) is None and render(b"x") == b"x"


def test_required_nulls_finds_nested_not_null_fields() -> None:
    inner = pa.struct([pa.field("c", pa.int32(), nullable=False)])
    type_ = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", inner)])
    value = pa.array(
        [{"a": 1, "b": {"c": 1}}, {"a": None, "b": None}, None, {"a": 2, "b": {"c": None}}],
        type_,
    )
    batch = pa.RecordBatch.from_arrays([value], names=["value"])
    found = {path: mask.to_pylist() for path, mask in required_nulls(batch)}
    # row 2 is a null value (allowed); row 1's b is null (optional), so b.c is not checked there
    assert found == {
        "value.a": [False, True, False, False],
        "value.b.c": [False, False, False, True],
    }
    assert required_nulls(batch.slice(0, 1)) == []


def test_a_failing_dead_letter_write_is_counted_and_fails_the_task() -> None:
    from sluice.engine.sink import SinkPlan, SinkRunner

    class Broken:
        def write(self, batches: object, partition_id: int) -> None:
            raise OSError("disk full")

    counters = Counters()
    policy = ErrorPolicy(tolerate=True, dlq_topic="dlq")
    plan = SinkPlan(
        "dst",
        "run",
        object,  # type: ignore[arg-type]
        {},
        ({},),
        counters=counters,
        errors=ErrorReporter(policy, "dst"),
        dlq=Broken(),  # type: ignore[arg-type]
    )
    _, bad = split_errors(_bad_batch())
    assert bad is not None
    with pytest.raises(OSError, match="disk full"):
        SinkRunner(plan)._report([bad], 0)
    assert counters.seen == [{"deadletterqueue-produce-failures": 1}]


def test_a_failing_dead_letter_commit_is_counted_and_fails_the_batch() -> None:
    from sluice.engine.sink import SinkPlan, SinkRunner, _TaskResult

    class Broken:
        def commit(self, receipts: object, batch_id: int) -> None:
            raise ConnectionError("broker away")

    counters = Counters()
    plan = SinkPlan(
        "dst",
        "run",
        object,  # type: ignore[arg-type]
        {},
        ({},),
        counters=counters,
        errors=ErrorReporter(ErrorPolicy(tolerate=True, dlq_topic="dlq"), "dst"),
        dlq=Broken(),  # type: ignore[arg-type]
    )
    receipt = _TaskResult(0, None, [], errors=1, dead_letters=["segment"])
    with pytest.raises(ConnectionError, match="broker away"):
        SinkRunner(plan).commit([receipt], 4)  # before the sink's own commit: nothing committed
    assert counters.seen == [{"deadletterqueue-produce-failures": 1}]
