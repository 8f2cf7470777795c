"""errors.tolerance=all on the source side (no anchor has it): records that do not fit the
connector's schema, or that the converter cannot encode, go to the dead-letter topic as JSON text
with `__connect.errors.*` headers; the good ones reach the topic exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.integration.bad_sources import value_of
from tests.integration.test_dead_letters import ERROR_HEADERS, topic_records

pytestmark = pytest.mark.spark

SOURCE = "tests.integration.bad_sources.BadRecordSource"
TOLERANT = {
    "errors.tolerance": "all",
    "errors.deadletterqueue.topic.name": "people-dlq",
    "errors.log.enable": "true",
}


def _healthy(runner: Any) -> None:
    failure = runner.running["src"].failure()
    assert failure is None, failure


def _wait_for(runner: Any, good: int, dead: int) -> None:
    def done() -> bool:
        _healthy(runner)
        return runner.bus.count("people") >= good and runner.bus.count("people-dlq") >= dead

    wait_until(done, 180, f"{good} records and {dead} dead letters")
    assert runner.bus.count("people") == good
    assert runner.bus.count("people-dlq") == dead


def _letters(runner: Any) -> dict[int, dict[str, Any]]:
    """The dead letters by record id (the rendered value's id, or the number in its text)."""
    out = {}
    for letter in topic_records(runner, "people-dlq"):
        value = json.loads(letter["value"])
        key = value["id"] if isinstance(value["id"], int) else int(value["id"].split()[-1])
        out[key] = {"value": value, "headers": json.loads(letter["headers"])}
    return out


def test_fused_source_dead_letters_schema_and_converter_failures(runner: Any) -> None:
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "100",
            "connect.topicname": "people",
            "key.converter": "LongConverter",
            "value.converter": "AvroConverter",  # no SQL form: the fused path
            **TOLERANT,
        },
    )
    _wait_for(runner, good=80, dead=20)
    letters = _letters(runner)
    assert sorted(letters) == [i for i in range(100) if i % 10 in (3, 7)]
    for i, letter in letters.items():
        headers = letter["headers"]
        assert letter["value"] == value_of(i)
        assert set(headers) >= ERROR_HEADERS
        assert headers["origin"] == "bad-source"  # the record's own headers are kept
        assert headers["__connect.errors.topic"] == "people"
        assert headers["__connect.errors.connector.name"] == "src"
        if i % 10 == 3:  # does not match the schema: the task's record is wrong
            assert headers["__connect.errors.stage"] == "TASK_POLL"
            assert headers["__connect.errors.class.name"].endswith("bad_sources.BadRecordTask")
            assert json.loads(headers["__connect.errors.offset"]) == {"next": i + 1}
            assert json.loads(headers["__connect.errors.partition"]) == {"source": "bad"}
            assert (
                "field 'value' does not match type" in headers["__connect.errors.exception.message"]
            )
        else:  # fits the schema but a required field is null: the converter refuses it
            assert headers["__connect.errors.stage"] == "VALUE_CONVERTER"
            assert headers["__connect.errors.class.name"] == "AvroConverter"
            assert (
                "value.name is null, but its schema is not optional"
                in (headers["__connect.errors.exception.message"])
            )
    counters = runner.counters.get("src")
    assert counters["total-record-errors"] == counters["total-records-skipped"] == 20
    assert counters["deadletterqueue-produce-requests"] == 20


def test_jvm_source_with_transforms_dead_letters_records_off_schema(
    runner: Any, tmp_path: Path
) -> None:
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "50",
            "nulls": "false",
            "connect.topicname": "people",
            "value.converter": "JsonConverter",
            "transforms": "tag",
            "transforms.tag.class": "InsertField$Value",
            "transforms.tag.static.field": "source",
            "transforms.tag.static.value": "bad",
            **TOLERANT,
        },
    )
    _wait_for(runner, good=45, dead=5)
    letters = _letters(runner)
    assert sorted(letters) == [3, 13, 23, 33, 43]
    assert all(x["headers"]["__connect.errors.stage"] == "TASK_POLL" for x in letters.values())
    values = [json.loads(r["value"])["payload"] for r in topic_records(runner, "people")]
    assert sorted(v["id"] for v in values) == [i for i in range(50) if i % 10 != 3]
    assert all(v["source"] == "bad" for v in values)  # the transform ran on the good ones


def test_without_tolerance_a_bad_source_record_fails_the_task(runner: Any) -> None:
    runner.start(
        "src",
        {"connector.class": SOURCE, "count": "10", "connect.topicname": "people"},
    )
    wait_until(lambda: runner.running["src"].failure() is not None, 180, "the source to fail")
    cause, _ = runner.running["src"].failure()
    assert "record 3 of the batch: field 'value' does not match type" in cause
    assert runner.bus.count("people") == 0  # nothing of the failed batch is committed


def test_a_source_dead_letter_topic_needs_tolerance(runner: Any) -> None:
    with pytest.raises(ConfigException, match=r"needs errors\.tolerance=all"):
        runner.start(
            "src",
            {
                "connector.class": SOURCE,
                "connect.topicname": "people",
                "errors.deadletterqueue.topic.name": "people-dlq",
            },
        )
