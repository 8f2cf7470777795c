"""A sink connector's reader keys: `consume.from.where` (where a new sink starts) and
`task.group.id` (the consumer group its offsets are committed under), each with its errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.bus.kafka import KafkaBus
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import ConfigException
from tests.conftest import wait_until
from tests.integration import bus_helpers
from tests.integration.bus_helpers import RealKafka, unique

pytestmark = pytest.mark.spark

kafka_cluster = bus_helpers.kafka_cluster  # the session fixture: the real broker


def _source(path: Path, topic: str) -> dict[str, str]:
    return {
        "connector.class": "FileSourceConnector",
        "filename": str(path),
        "connect.topicname": topic,
    }


def _sink(path: Path, topic: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "FileSinkConnector",
        "filename": str(path),
        "connect.topicnames": topic,
        **extra,
    }


def _topic_rows(runner: ConnectorRunner, topic: str) -> int:
    if not runner.bus.log.topic_exists(topic):
        return 0
    return sum(q.max_offset - q.min_offset for q in runner.bus.log.offsets(topic).values())


def _first_trigger_done(runner: ConnectorRunner, name: str) -> bool:
    """Whether the query of `name` finished its first trigger, so its reader has fixed where it
    starts (`initialOffset`). Spark reports a trigger that found no data at once the first time
    (then every `noDataProgressEventInterval`). Its status message is no such sign: an idle
    reader waits inside `latestOffset`, and "Waiting for data to arrive" may last no time at all
    before the next trigger (the test timed out once on it under load)."""
    query = runner.running[name].query
    assert query.exception() is None, query.exception()
    return query.lastProgress is not None


def test_consume_from_last_offset_skips_what_the_topic_held(
    runner: ConnectorRunner, tmp_path: Path
) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"old {i}\n" for i in range(100)))
    runner.start("src", _source(src, "t"))
    wait_until(lambda: _topic_rows(runner, "t") == 100, 60, "100 records in the topic")
    runner.stop("src")
    runner.start("dst", _sink(dst, "t", **{"consume.from.where": "CONSUME_FROM_LAST_OFFSET"}))
    wait_until(lambda: _first_trigger_done(runner, "dst"), 60, "the sink to plan its start")
    new = "".join(f"new {i}\n" for i in range(50))
    with open(src, "a") as f:
        f.write(new)
    runner.start("src", _source(src, "t"))
    wait_until(lambda: dst.exists() and dst.stat().st_size >= len(new), 60, "the new lines")
    assert dst.read_text() == new


def test_consume_from_first_offset_is_the_default(runner: ConnectorRunner, tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    text = "".join(f"line {i}\n" for i in range(100))
    src.write_text(text)
    runner.start("src", _source(src, "t"))
    wait_until(lambda: _topic_rows(runner, "t") == 100, 60, "100 records in the topic")
    runner.start("dst", _sink(dst, "t"))
    wait_until(lambda: dst.exists() and dst.stat().st_size >= len(text), 60, "every line")
    assert dst.read_text() == text


@pytest.fixture
def kafka_runner(
    spark: object, tmp_path: Path, kafka_cluster: RealKafka
) -> Iterator[ConnectorRunner]:
    bus = KafkaBus(tmp_path / "bus", bootstrap_servers=kafka_cluster.bootstraps, timeout_s=20)
    r = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=100, bus=bus)
    yield r
    r.close()


def test_task_group_id_names_the_consumer_group(
    kafka_runner: ConnectorRunner, tmp_path: Path, kafka_cluster: RealKafka
) -> None:
    topic = unique()
    kafka_cluster.create_topic(topic, 2)
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    text = "".join(f"line {i}\n" for i in range(100))
    src.write_text(text)
    kafka_runner.start("src", _source(src, topic))
    kafka_runner.start("dst", _sink(dst, topic, **{"task.group.id": "replica-group"}))
    wait_until(lambda: dst.exists() and dst.stat().st_size >= len(text), 60, "every line")
    assert dst.read_text() == text
    log = kafka_runner.bus.log

    def at_end() -> bool:  # the partitions' ends: 100 records and a commit marker per batch
        ends = {r.queue: r.max_offset for r in kafka_runner.bus.describe(topic).ranges}
        return log.group_offsets("replica-group", topic) == ends

    wait_until(at_end, 60, "offsets committed under task.group.id")
    assert all(o < 0 for o in log.group_offsets("connect-dst", topic).values())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"consume.from.where": "CONSUME_FROM_TIMESTAMP"},
            r"^consume.from.where: must be one of CONSUME_FROM_FIRST_OFFSET, "
            r"CONSUME_FROM_LAST_OFFSET, got 'CONSUME_FROM_TIMESTAMP'",
        ),
        ({"task.group.id": "no spaces"}, r"^task.group.id: 'no spaces' does not match"),
        ({"task.group.id": "g" * 256}, r"^task.group.id: 'g{256}' does not match"),
    ],
)
def test_bad_reader_keys_name_the_key(
    runner: ConnectorRunner, tmp_path: Path, extra: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigException, match=message):
        runner.start("dst", _sink(tmp_path / "out.txt", "t", **extra))
    assert "dst" not in runner.running
