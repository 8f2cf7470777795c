"""The SDK's contracts a connector author relies on: derived delivery, every bad key reported,
and the Spark-free harness driving the file connectors."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from sluice.connectors.file import FileSinkConnector, FileSourceTask
from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSourceConnector
from sluice.connectors.redis import RedisListSourceConnector
from sluice.runtime.herder import BadRequest, validation
from sluice.runtime.plugins import PluginRegistry, delivery_of
from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectRecord,
    Delivery,
    InvalidConfig,
    ReadLimit,
    SinkConnector,
)
from sluice.testing import SinkHarness, SourceHarness


def test_delivery_follows_the_task_base_class_or_the_sink_config() -> None:
    assert RedisListSourceConnector.delivery({}) is Delivery.AT_LEAST_ONCE  # a poll-only task
    assert FileSinkConnector.delivery({}) is Delivery.EXACTLY_ONCE
    assert JdbcSinkConnector.delivery({}) is Delivery.AT_LEAST_ONCE  # insert.mode=insert
    assert JdbcSinkConnector.delivery({"insert.mode": "Upsert"}) is Delivery.EXACTLY_ONCE
    assert SinkConnector.delivery({}) is Delivery.AT_LEAST_ONCE

    class Idempotent(SinkConnector):
        guarantee = Delivery.EXACTLY_ONCE  # declared once, whatever the config

    assert Idempotent.delivery({"any": "thing"}) is Delivery.EXACTLY_ONCE
    assert delivery_of(Idempotent, {}) == "exactly-once"

    class Legacy(FileSinkConnector):
        delivery = "exactly-once"  # a plugin written before delivery was derived

    assert delivery_of(Legacy, {}) == "exactly-once"
    assert delivery_of(JdbcSinkConnector, {"insert.mode": "update"}) == "exactly-once"
    assert delivery_of(str, {}) is None


def test_every_built_in_connector_derives_its_delivery() -> None:
    # a free `delivery = "…"` string (what plugins wrote before) is for third parties only
    from sluice.runtime.plugins import BUILTIN_CONNECTORS

    for name, cls in BUILTIN_CONNECTORS.items():
        assert isinstance(cls.delivery({}), Delivery), name


def test_a_sink_frame_batch_rebuilt_from_records_reads_back_the_same() -> None:
    from sluice.sdk._arrow import batch_from_records, records_from_batch

    records = [
        ConnectRecord(
            value="é",
            key=b"k",
            partition={"topic": "t", "queueId": "3"},
            offset={"queueOffset": 8},
            extensions={"h": "v"},
            topic="t",
        ),
        ConnectRecord(
            value=None,
            key=None,
            partition={"topic": "t", "queueId": "0"},
            offset={"queueOffset": 1},
            topic="t",
        ),
    ]
    again = records_from_batch(batch_from_records(records))
    assert [(r.value, r.key, r.partition, r.offset, r.extensions) for r in again] == [
        ("é", b"k", {"topic": "t", "queueId": "3"}, {"queueOffset": 8}, {"h": "v"}),
        (None, None, {"topic": "t", "queueId": "0"}, {"queueOffset": 1}, {}),
    ]


class _TwoChecks(FileSinkConnector):
    """A connector whose own checks find two bad keys."""

    config_def = ConfigDef(
        ConfigKey("filename", type="path"),
        ConfigKey("connect.topicnames", type="list"),
        ConfigKey("mode", check=lambda v: None if v == "ok" else f"{v!r} is not ok"),
        ConfigKey("level", type="int", default=1, min=1),
    )

    def problems(self, config: Mapping[str, str]) -> list[ConfigException]:
        found = super().problems(config)
        if config.get("color") == "red":
            found.append(ConfigException("color", "red is not allowed with mode=x"))
        return found


def test_every_bad_key_of_a_connector_is_reported(tmp_path: Path) -> None:
    config = {
        "filename": str(tmp_path / "out.txt"),
        "connect.topicnames": "t",
        "mode": "x",
        "level": "0",
        "color": "red",
    }
    with pytest.raises(InvalidConfig) as caught:
        _TwoChecks().validate(config)
    assert [p.key for p in caught.value.problems] == ["mode", "level", "color"]
    assert str(caught.value) == (
        "mode: 'x' is not ok; level: must be at least 1, got 0; "
        "color: red is not allowed with mode=x"
    )
    with pytest.raises(ConfigException, match=r"^mode: 'y' is not ok$"):  # one problem: itself
        _TwoChecks().validate({**config, "mode": "y", "level": "2", "color": "blue"})

    # create-time validation reports each of them once, beside the runtime's own keys
    with pytest.raises(BadRequest) as refused:
        validation.accepted(
            PluginRegistry(),
            "c",
            {"connector.class": f"{__name__}._TwoChecks", "max.tasks": "x", **config},
        )
    # (types and bounds of declared keys first, then the connector's checks)
    assert [e["key"] for e in refused.value.errors] == ["max.tasks", "level", "mode", "color"]


def test_a_check_runs_at_validation_only_never_in_a_task(tmp_path: Path) -> None:
    missing = str(tmp_path / "later.txt")
    problems = FileSinkConnector().problems({"filename": str(tmp_path / "no" / "x")})
    assert [(p.key, p.message.split(": ", 1)[1][:9]) for p in problems] == [
        ("filename", "directory"),
        ("connect.topicnames", "required "),
    ]
    task = FileSourceTask()
    task.start({"filename": missing, "connect.topicname": "t"})  # parse does not check
    assert task.partitions() == [{"filename": missing}]


def test_the_harness_drives_the_file_connectors_end_to_end(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a\nb\nc\n")
    source = SourceHarness(
        FileSourceTask,
        {"filename": str(src), "connect.topicname": "t"},
        limit=ReadLimit(max_rows=2),
    )
    assert [r.value for r in source.next_batch()] == ["a", "b"]
    source = source.restart()
    with open(src, "a") as f:
        f.write("d\n")
    records = source.drain()
    assert [r.value for r in records] == ["c", "d"]

    sink = SinkHarness(
        FileSinkConnector, {"filename": str(dst), "connect.topicnames": "t"}, tasks=2
    )
    sink.deliver([ConnectRecord(v) for v in ("a", "b", "c")])
    sink.deliver([ConnectRecord("a"), ConnectRecord("b")], batch=0)  # replayed: not appended
    sink.deliver(records)
    assert dst.read_text() == "a\nb\nc\nc\nd\n"


def test_offsets_set_by_hand_are_checked_by_the_source() -> None:
    from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
    from sluice.connectors.file.source import FileSourceConnector
    from sluice.connectors.redis.source import RedisStreamSourceConnector
    from sluice.sdk import count_problem

    file = FileSourceConnector()
    partition = {"filename": "/x"}
    assert file.offset_problem(partition, {"position": 0}) is None
    for bad in ({"position": "12"}, {"position": -1}, {"position": False}, {}):
        why = file.offset_problem(partition, bad)
        assert why == f"'position' must be an integer ≥ 0, got {bad.get('position')!r}"
    assert count_problem({"a": 1, "b": 2}, ("a", "b")) is None
    assert count_problem({"a": 1}, ("a", "b")) == "'b' must be an integer ≥ 0, got None"
    redis = RedisStreamSourceConnector()
    assert redis.offset_problem({"stream": "s"}, {"id": "1700000000000-0"}) is None
    for entry in ("17-", "abc", 5, None, "1-2-3"):
        assert "must be a stream entry id" in str(redis.offset_problem({}, {"id": entry}))
    mysql, postgres = MySqlCdcSourceConnector(), PostgresCdcSourceConnector()
    assert mysql.offset_problem({}, {"file": "mariadb-bin.000013", "pos": 4}) is None
    assert mysql.offset_problem({}, {"pos": 4}) == "'file' must name a binlog file, got None"
    assert mysql.offset_problem({}, {"file": "b.1", "pos": "4"}) == (
        "'pos' must be an integer ≥ 0, got '4'"
    )
    assert postgres.offset_problem({}, {"lsn": 1234, "snapshot": {"done": True}}) is None
    assert postgres.offset_problem({}, {"lsn": "0/16B3748"}) is not None
    jdbc = JdbcSourceConnector()
    for good in (
        {"timestamp": "2026-11-24T10:00:00.000001", "incrementing": 5},
        {"incrementing": {"decimal": "1.5"}},
        {"after": [1, "a", {"date": "2026-11-24"}]},
        {"initial": 1700000000000},
    ):
        assert jdbc.offset_problem({}, good) is None, good
    assert jdbc.offset_problem({}, {"timestamp": "yesterday"}) == (
        "'timestamp' must be an ISO date-time (2026-11-24T10:00:00), got 'yesterday'"
    )
    assert jdbc.offset_problem({}, {"incrementing": {"oops": 1}}) == (
        "'incrementing' holds {'oops': 1}, which is not a cursor value"
    )
    assert jdbc.offset_problem({}, {"incrementing": {"decimal": "x"}}) is not None
    assert jdbc.offset_problem({}, {"after": 5}) == "'after' must be a list of cursor values, got 5"
