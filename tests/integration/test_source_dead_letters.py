"""errors.tolerance=all on the source side (no anchor has it): records that do not fit the
connector's schema, or that the converter cannot encode, go to the dead-letter topic as JSON text
with `__connect.errors.*` headers; the good ones reach the topic exactly once."""

from __future__ import annotations

import json
import re
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


def _people(count: int, value_converter: str, **extra: str) -> dict[str, str]:
    """A BadRecordSource config writing `count` records to the topic `people`."""
    return {
        "connector.class": SOURCE,
        "count": str(count),
        "connect.topicname": "people",
        "value.converter": value_converter,
        **extra,
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
        if "payload" in value:  # the value converter wrote it; the key converter refused it
            value = value["payload"]
        key = value["id"] if isinstance(value["id"], int) else int(value["id"].split()[-1])
        out[key] = {"value": value, "headers": json.loads(letter["headers"])}
    return out


PICKY = "tests.integration.bad_sources.PickyConverter"
REFUSED = {0, 25, 50, 75}  # keys PickyConverter cannot write
OFF_SCHEMA = "does not match type|is null, but its schema is not optional"


def _check(runner: Any, letters: dict[int, dict[str, Any]], count: int, transformed: bool) -> None:
    assert sorted(letters) == sorted(
        {i for i in range(count) if i % 10 in (3, 7)} | (REFUSED & set(range(count)))
    )
    for i, letter in letters.items():
        headers = letter["headers"]
        assert set(headers) >= ERROR_HEADERS
        assert headers["origin"] == "bad-source"  # the record's own headers are kept
        assert headers["__connect.errors.topic"] == "people"
        assert headers["__connect.errors.connector.name"] == "src"
        message = headers["__connect.errors.exception.message"]
        if i % 10 in (3, 7):  # does not fit the schema: the task's record is wrong
            assert letter["value"] == value_of(i)
            assert headers["__connect.errors.stage"] == "TASK_POLL"
            assert headers["__connect.errors.class.name"].endswith("bad_sources.BadRecordTask")
            assert re.search(OFF_SCHEMA, message), message
        else:  # fits the schema, but the key converter refuses it
            # after the transforms: the dead letter shows what the converter was given
            extra = {"source": "bad"} if transformed else {}
            assert letter["value"] == {**value_of(i), **extra}
            assert headers["__connect.errors.stage"] == "KEY_CONVERTER"
            assert headers["__connect.errors.class.name"] == "PickyConverter"
            assert f"key {i} is a multiple of 25" in message
    counters = runner.counters.get("src")
    assert counters["total-record-errors"] == counters["total-records-skipped"] == len(letters)
    assert counters["deadletterqueue-produce-requests"] == len(letters)


def test_fused_source_dead_letters_what_it_cannot_write(runner: Any) -> None:
    runner.start(
        "src",
        {
            "connector.class": SOURCE,
            "count": "100",
            "connect.topicname": "people",
            "key.converter": PICKY,
            "value.converter": "AvroConverter",  # no SQL form: the fused path
            **TOLERANT,
        },
    )
    _wait_for(runner, good=76, dead=24)
    letters = _letters(runner)
    _check(runner, letters, 100, transformed=False)
    for i in (3, 13):  # a record that does not fit the schema names its source position
        headers = letters[i]["headers"]
        assert json.loads(headers["__connect.errors.offset"]) == {"next": i + 1}
        assert json.loads(headers["__connect.errors.partition"]) == {"source": "bad"}


@pytest.mark.parametrize("transforms", [False, True], ids=["json", "json-with-a-transform"])
def test_jvm_source_dead_letters_what_it_cannot_write(runner: Any, transforms: bool) -> None:
    """JSON runs in the JVM: off-schema records bypass the transforms; those the converters
    refuse are dead-lettered after them, in the topic writer."""
    config = {
        "connector.class": SOURCE,
        "count": "50",
        "connect.topicname": "people",
        "key.converter": PICKY,
        "value.converter": "JsonConverter",
        **TOLERANT,
    }
    if transforms:
        config |= {
            "transforms": "tag",
            "transforms.tag.class": "InsertField$Value",
            "transforms.tag.static.field": "source",
            "transforms.tag.static.value": "bad",
        }
    runner.start("src", config)
    _wait_for(runner, good=38, dead=12)
    _check(runner, _letters(runner), 50, transformed=transforms)
    values = [json.loads(r["value"])["payload"] for r in topic_records(runner, "people")]
    assert sorted(v["id"] for v in values) == [
        i for i in range(50) if i % 10 not in (3, 7) and i not in REFUSED
    ]
    if transforms:
        assert all(v["source"] == "bad" for v in values)  # the transform ran on the good ones


@pytest.mark.parametrize("converter", ["AvroConverter", "JsonConverter"], ids=["fused", "jvm"])
def test_dead_letters_name_the_task_the_status_shows(runner: Any, converter: str) -> None:
    """One task whose range is cut over 3 Spark partitions: every dead letter says task 0."""
    config = _people(100, converter, split="true", **{"max.tasks": "3", "key.converter": PICKY})
    running = runner.start("src", {**config, **TOLERANT})
    assert len(running.task_configs) == 1
    _wait_for(runner, good=76, dead=24)
    letters = _letters(runner)
    _check(runner, letters, 100, transformed=False)
    assert {letter["headers"]["__connect.errors.task.id"] for letter in letters.values()} == {"0"}


@pytest.mark.parametrize("transforms", [False, True], ids=["fused", "jvm"])
def test_a_null_required_field_fails_the_task_naming_it(runner: Any, transforms: bool) -> None:
    """Arrow does not check NOT NULL and Spark would crash on it: sluice names the field."""
    config = _people(10, "AvroConverter", kinds="null")
    if transforms:
        config |= {"transforms": "t", "transforms.t.class": "sql"}
        config["transforms.t.query"] = "SELECT * FROM records"
    runner.start("src", config)
    wait_until(lambda: runner.running["src"].failure() is not None, 180, "the source to fail")
    cause, _ = runner.running["src"].failure()
    assert "record 7 of the batch: field 'value.name' is null, but its schema is not optional" in (
        cause
    ), cause
    assert runner.bus.count("people") == 0


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
