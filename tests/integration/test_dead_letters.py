"""errors.tolerance=all on the sink side: bad records skip the sink and land in the dead-letter
topic with `__connect.errors.*` headers; counters match (fused, JVM and transformed pipelines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.converters import canonical
from sluice.sdk import ConfigException, FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.conftest import wait_until
from tests.integration.test_converters_pipeline import _file_into_topic
from tests.integration.typed_connectors import read_dir

pytestmark = pytest.mark.spark

SINK = "tests.integration.typed_connectors.ArrowDirSink"
ERROR_HEADERS = {
    f"__connect.errors.{name}"
    for name in (
        "topic",
        "partition",
        "offset",
        "connector.name",
        "task.id",
        "stage",
        "class.name",
        "exception.class.name",
        "exception.message",
        "exception.stacktrace",
    )
}


def topic_records(runner: Any, topic: str) -> list[dict[str, Any]]:
    """Every record retained in `topic`, with its queue and offset."""
    log = runner.bus.log
    out = []
    for queue, r in sorted(log.offsets(topic).items()):
        for first, batch in log.read(topic, queue, r.min_offset, r.max_offset):
            for i, row in enumerate(batch.to_pylist()):
                out.append({**row, "queue": queue, "offset": row.get("offset", first + i)})
    return out


def _check_dead_letters(runner: Any, bad: list[str], stage: str, converter: str) -> None:
    letters = topic_records(runner, "ext-dlq")
    assert sorted(r["value"].decode() for r in letters) == sorted(bad)
    originals = {(r["queue"], r["offset"]): r for r in topic_records(runner, "ext")}
    for letter in letters:
        headers = json.loads(letter["headers"])
        assert set(headers) >= ERROR_HEADERS, headers
        assert headers["__connect.errors.topic"] == "ext"
        assert headers["__connect.errors.connector.name"] == "dst"
        assert headers["__connect.errors.stage"] == stage
        assert headers["__connect.errors.class.name"] == converter
        assert headers["__connect.errors.exception.class.name"] == "sluice.converters.RecordError"
        position = (
            int(headers["__connect.errors.partition"]),
            int(headers["__connect.errors.offset"]),
        )
        original = originals[position]  # the header names the record's real queue and offset
        assert original["value"] == letter["value"]
        assert letter["timestamp"] == original["timestamp"]
        assert (
            f"record ext/{position[0]}@{position[1]}: value "
            in (headers["__connect.errors.exception.message"])
        )


def _counters_match(runner: Any, n: int) -> None:
    wanted = {
        "total-record-errors": n,
        "total-records-skipped": n,
        "total-record-failures": n,
        "deadletterqueue-produce-requests": n,
        "total-errors-logged": n,
    }
    wait_until(
        lambda: {k: runner.counters.get("dst").get(k) for k in wanted} == wanted,
        30,
        f"counters {wanted}, have {runner.counters.get('dst')}",
    )
    assert "deadletterqueue-produce-failures" not in runner.counters.get("dst")


TOLERANT = {
    "errors.tolerance": "all",
    "errors.deadletterqueue.topic.name": "ext-dlq",
    "errors.log.enable": "true",
    "errors.log.include.messages": "true",
}


def _json_sink(tmp_path: Path, lines: list[str], runner: Any, **errors: str) -> dict[str, str]:
    """A JSON sink config over topic `ext`, after `lines` were written to it (schema registered)."""
    registry = SqliteSchemaRegistry(runner.root + "/schemas.sqlite")
    registry.register("ext-value", canonical(Schema.struct(("a", Schema.of(FieldType.INT32)))))
    _file_into_topic(runner, tmp_path, lines, "ext")
    return {
        "connector.class": SINK,
        "dir": str(tmp_path / "out"),
        "connect.topicnames": "ext",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        **errors,
    }


@pytest.mark.parametrize("transforms", [False, True], ids=["jvm", "jvm-with-transforms"])
def test_ten_percent_malformed_json_goes_to_the_dead_letter_topic(
    runner: Any, tmp_path: Path, transforms: bool
) -> None:
    lines = [f'{{"a": oops{i}}}' if i % 10 == 3 else f'{{"a": {i}}}' for i in range(200)]
    bad = [line for line in lines if "oops" in line]
    config = _json_sink(tmp_path, lines, runner, **TOLERANT)
    good = [i for i in range(200) if i % 10 != 3]
    if transforms:  # the filter would drop a bad record (its value is null) if it saw it
        config |= {
            "transforms": "even",
            "transforms.even.class": "sql",
            "transforms.even.query": "SELECT * FROM records WHERE value.a % 2 = 0",
        }
        good = [i for i in good if i % 2 == 0]
    runner.start("dst", config)

    def delivered() -> list[int]:
        assert runner.running["dst"].failure() is None, runner.running["dst"].failure()
        table = read_dir(str(tmp_path / "out"))
        return [] if table is None else [v["a"] for v in table.column("value").to_pylist()]

    wait_until(lambda: len(delivered()) >= len(good), 180, f"{len(good)} good records")
    wait_until(lambda: runner.bus.count("ext-dlq") >= len(bad), 60, "the dead letters")
    assert sorted(delivered()) == good
    _check_dead_letters(runner, bad, "VALUE_CONVERTER", "JsonConverter")
    _counters_match(runner, len(bad))


def test_the_fused_avro_sink_tolerates_garbage(runner: Any, tmp_path: Path) -> None:
    """Avro decoding runs in the fused (Arrow-only) path: the same guarantees there."""
    runner.start(
        "typed",
        {
            "connector.class": "tests.integration.typed_connectors.TypedSource",
            "count": "30",
            "connect.topicname": "ext",
            "value.converter": "AvroConverter",
        },
    )
    wait_until(lambda: runner.bus.count("ext") >= 30, 120, "30 Avro records")
    bad = ["not avro", "\x00\x00\x00\x00\x63 nor this"]
    _file_into_topic(runner, tmp_path, bad, "ext")
    wait_until(lambda: runner.bus.count("ext") >= 32, 120, "the garbage")
    runner.start(
        "dst",
        {
            "connector.class": SINK,
            "dir": str(tmp_path / "out"),
            "connect.topicnames": "ext",
            "value.converter": "AvroConverter",
            **TOLERANT,
        },
    )

    def delivered() -> int:
        assert runner.running["dst"].failure() is None, runner.running["dst"].failure()
        table = read_dir(str(tmp_path / "out"))
        return 0 if table is None else table.num_rows

    wait_until(lambda: delivered() >= 30 and runner.bus.count("ext-dlq") >= 2, 180, "all records")
    assert delivered() == 30
    _check_dead_letters(runner, bad, "VALUE_CONVERTER", "AvroConverter")
    _counters_match(runner, 2)


def test_without_context_headers_a_dead_letter_keeps_only_its_own(
    runner: Any, tmp_path: Path
) -> None:
    config = _json_sink(
        tmp_path,
        ['{"a": 1}', "{oops"],
        runner,
        **{
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "ext-dlq",
            "errors.deadletterqueue.context.headers.enable": "false",
            "errors.deadletterqueue.write.queue.nums": "2",
        },
    )
    runner.start("dst", config)
    wait_until(lambda: runner.bus.count("ext-dlq") == 1, 180, "the dead letter")
    [letter] = topic_records(runner, "ext-dlq")
    assert letter["value"] == b"{oops" and letter["headers"] is None
    assert runner.bus.describe("ext-dlq").queues == 2


def test_tolerance_all_without_a_topic_skips_and_counts(runner: Any, tmp_path: Path) -> None:
    config = _json_sink(
        tmp_path, ['{"a": 1}', "{oops", '{"a": 3}'], runner, **{"errors.tolerance": "all"}
    )
    runner.start("dst", config)
    wait_until(lambda: runner.counters.get("dst").get("total-records-skipped") == 1, 180, "skip")
    table = read_dir(str(tmp_path / "out"))
    assert sorted(v["a"] for v in table.column("value").to_pylist()) == [1, 3]
    assert "deadletterqueue-produce-requests" not in runner.counters.get("dst")


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ({"errors.tolerance": "some"}, "errors.tolerance", "must be one of none, all"),
        (
            {"errors.deadletterqueue.topic.name": "d"},
            "errors.deadletterqueue.topic.name",
            "needs errors.tolerance=all",
        ),
        (
            {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "ext"},
            "errors.deadletterqueue.topic.name",
            "is a topic this sink reads",
        ),
        (
            {
                "errors.deadletterqueue.context.headers.enable": "true",
                "errors.deadletterqueue.context.properties.enable": "false",
            },
            "errors.deadletterqueue.context.headers.enable",
            "contradicts",
        ),
        (
            {"errors.deadletterqueue.write.queue.nums": "0"},
            "errors.deadletterqueue.write.queue.nums",
            "at least 1",
        ),
        ({"errors.log.enable": "loud"}, "errors.log.enable", "expected a boolean"),
    ],
)
def test_bad_error_settings_name_the_key(
    runner: Any, tmp_path: Path, extra: dict[str, str], key: str, message: str
) -> None:
    config = {"connector.class": SINK, "dir": str(tmp_path), "connect.topicnames": "ext", **extra}
    with pytest.raises(ConfigException, match=message) as info:
        runner.start("dst", config)
    assert info.value.key == key
    assert "dst" not in runner.running
