"""A sink's dead-letter and own-topic appenders, as the runner builds them, note a broker outage
met by their commits in the status of every task of the sink (`retrying`), as its reader does.
librdkafka's mock cluster gives the outage in the middle of a commit (see test_bus_kafka)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.runtime.runner import ConnectorRunner
from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import KafkaHarness, MockKafkaCluster, read_all, topic_frame
from tests.integration.test_bus_kafka import _down_after_journal, _outage_bus

pytestmark = pytest.mark.spark

kafka_mock = bus_helpers.kafka_mock


def test_the_dead_letter_and_own_topic_appenders_note_an_outage_for_every_task(
    spark: Any, tmp_path: Path, kafka_mock: MockKafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = _outage_bus(kafka_mock, tmp_path, outage_s=120)
    topic = KafkaHarness(kafka_mock).new_topic(bus, 1)
    made: dict[str, Any] = {}  # the appenders the runner makes, by the end of their writer id
    real = bus.topic_appender

    def recording(**kwargs: Any) -> Any:
        made[kwargs["writer_id"].rsplit("/", 1)[1]] = appender = real(**kwargs)
        return appender

    monkeypatch.setattr(bus, "topic_appender", recording)
    runner = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=100, bus=bus)
    try:
        running = runner.start(
            "hook",
            {
                "connector.class": "org.apache.rocketmq.connect.http.sink.HttpSinkConnector",
                "connect.topicnames": topic,
                "url": "http://127.0.0.1:9/never-called",  # the topic stays empty
                "max.tasks": "2",
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": "hook-dlq",
                "retry.topic.name": "hook-retry",
            },
        )
        # the appenders cross to Spark with the plan: a micro-batch ran with them
        wait_until(lambda: running.query.lastProgress is not None, 120, "a micro-batch")
        assert running.failure() is None, running.failure()
    finally:
        runner.close()
    assert len(running.task_configs) == 2
    for kind, target in (("dlq", "hook-dlq"), ("own", "hook-retry")):
        _ride_out_an_outage(made[kind], target, bus, kafka_mock, runner, monkeypatch)


def _ride_out_an_outage(
    appender: Any,
    target: str,
    bus: Any,
    cluster: MockKafkaCluster,
    runner: ConnectorRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The appender's commit meets a cluster that goes away after its journal: while it retries,
    both tasks of `hook` have a note; once through, none (its retries counted once)."""
    before = runner.counters.get("hook").get("total-retries", 0)
    staged = appender.write(iter([topic_frame(target, [b"letter"], route=[0])]), 0)
    _down_after_journal(monkeypatch, bus, cluster)
    notes: list[dict] = []

    def pause(self: Any, seconds: float) -> None:
        notes.append(runner.counters.retrying(0).get("hook", {}))
        cluster.set_up()  # the outage ends after one failed attempt

    monkeypatch.setattr(type(bus.log), "_pause", pause)
    try:
        appender.commit([staged], 0)
    finally:
        cluster.set_up()
        monkeypatch.undo()
    assert notes and set(notes[0]) == {0, 1}, notes
    assert "BusUnavailable: kafka bootstrap.servers=" in notes[0][0]["error"]
    assert runner.counters.retrying(0) == {}
    assert runner.counters.get("hook")["total-retries"] == before + len(notes)
    assert [r["value"] for r in read_all(bus, target, 0, 0, 10)] == [b"letter"]
