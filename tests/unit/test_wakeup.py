"""Idle readers wake at the first change (sluice.sdk.wakeup): file watches, a file source's input,
an embedded topic's commits; and a commit whose doorbell never rang (the worker killed between
the two) is still found."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import sluice.bus.embedded.log as embedded_log
import sluice.sdk.wakeup as wakeup
from sluice.bus.embedded import EmbeddedBus
from sluice.bus.spark import ReaderControl, TopicReaderPlan, topic_reader
from sluice.connectors.file.source import FileSourceConnector
from sluice.engine import parse_settings
from sluice.engine.source import plan_source, source_data_source
from sluice.sdk.wakeup import FileWatch, idle_wait, wait_for_new
from tests.conftest import wait_until

#: long enough that a reader that was not woken never answers while the test waits for it
FOREVER_S = 3600.0


class Background:
    """Runs `call` in a thread; `result` once it returned."""

    def __init__(self, call: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

        def run() -> None:
            try:
                self.result = call()
            except BaseException as exc:
                self.error = exc
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def wait(self, what: str) -> Any:
        wait_until(self.done.is_set, 60, what)
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture(params=["inotify", "polling"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "polling":
        monkeypatch.setattr(wakeup, "_inotify", lambda: None)
    return request.param


def _later(action: Any) -> None:
    threading.Timer(0.05, action).start()


def test_a_watch_wakes_on_create_append_utime_and_replace(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "f"
    watch = FileWatch([str(path)])
    watch.arm()
    assert watch.wait(0.05) is False  # nothing happened: it times out
    steps = [
        ("created", lambda: path.write_text("a\n")),
        ("appended", lambda: path.open("a").write("b\n")),
        ("utime", lambda: os.utime(path)),
        ("replaced", lambda: (path.rename(tmp_path / "old"), path.write_text("new\n"))),
        ("appended to the new file", lambda: path.open("a").write("c\n")),
    ]
    for what, action in steps:
        watch.arm()
        _later(action)
        woke = Background(lambda: watch.wait(FOREVER_S))
        assert woke.wait(f"the watch to notice: {what}") is True, what
    watch.close()


def test_arm_forgets_what_came_before(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "f"
    path.write_text("a\n")
    watch = FileWatch([str(path)])
    watch.arm()
    with path.open("a") as f:
        f.write("before the next arm\n")
    watch.arm()
    assert watch.wait(0.1) is False
    watch.close()


def test_wait_for_new_asks_again_at_each_change(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("")
    asked: list[int] = []

    def latest() -> int:
        asked.append(1)
        return path.stat().st_size

    watch = FileWatch([str(path)])
    # new already: answered at once, asked once
    path.write_text("x")
    assert wait_for_new(watch, 0, latest, FOREVER_S) == 1
    # nothing new: waits, and answers the new end once the file grows
    _later(lambda: path.open("a").write("yz"))
    assert Background(lambda: wait_for_new(watch, 1, latest, FOREVER_S)).wait("growth") == 3
    # nothing new and nothing happens: the start again once the wait is over
    assert wait_for_new(watch, 3, latest, 0.05) == 3
    watch.close()


def test_a_reader_without_a_watch_is_asked_once_and_pauses_only_when_idle(monkeypatch) -> None:
    # nothing wakes such a reader: after a look that found nothing it pauses (IDLE_PAUSE_S), so an
    # idle query looks about twice a second whatever the trigger; one that found records does not
    pauses: list[float] = []
    monkeypatch.setattr(wakeup.time, "sleep", pauses.append)
    answers = iter([3, 5])
    assert wait_for_new(None, 3, lambda: next(answers), FOREVER_S) == 3
    assert pauses == [wakeup.IDLE_PAUSE_S]
    assert wait_for_new(None, 3, lambda: next(answers), FOREVER_S) == 5
    assert pauses == [wakeup.IDLE_PAUSE_S]
    # the pause is never longer than the wait the caller allows
    assert wait_for_new(None, 3, lambda: 3, 0.05) == 3
    assert pauses == [wakeup.IDLE_PAUSE_S, 0.05]


def test_idle_wait_covers_the_trigger_interval_within_bounds() -> None:
    assert idle_wait(0) == wakeup.IDLE_WAIT_S
    assert idle_wait(2500) == 2.5
    assert idle_wait(600_000) == wakeup.MAX_IDLE_WAIT_S


def _reader(bus: EmbeddedBus, tmp_path: Path, topic: str) -> Any:
    plan = TopicReaderPlan(
        name="sink",
        log=bus.log,
        topics=(topic,),
        control=ReaderControl(str(tmp_path / "control.json")),
        idle_wait_s=FOREVER_S,
    )
    return topic_reader(plan)(options={}).streamReader(schema=None)


def _record(value: bytes) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([None], pa.binary()),
            "value": pa.array([value], pa.binary()),
            "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
            "headers": pa.array(["{}"], pa.string()),
        }
    )


def test_an_idle_topic_reader_wakes_when_a_commit_publishes(tmp_path: Path) -> None:
    bus = EmbeddedBus(tmp_path / "bus", default_queues=1)
    bus.create_topic("t", 1)
    reader = _reader(bus, tmp_path, "t")
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert start["q"] == {"t/0": 0}
    waiting = Background(lambda: reader.latestOffset(start, ReadAllAvailable()))
    _later(lambda: bus.log.append("t", 0, _record(b"one")))
    end = waiting.wait("the reader to wake at the commit")
    assert end["q"] == {"t/0": 1}
    reader.stop()


def test_ring_creates_a_missing_bell_private_and_wakes_its_watchers(tmp_path: Path) -> None:
    bell = tmp_path / "bell"
    watch = FileWatch([str(bell)])
    watch.arm()
    wakeup.ring(bell)
    assert watch.wait(30) is True
    assert bell.stat().st_mode & 0o777 == 0o600
    watch.arm()
    wakeup.ring(bell)  # an existing bell: its times change
    assert watch.wait(30) is True
    wakeup.ring(tmp_path / "no-such-folder" / "bell")  # cannot ring: no error, nothing made
    assert not (tmp_path / "no-such-folder").exists()
    watch.close()


def test_a_commit_whose_doorbell_never_rang_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker killed between the publish and the doorbell: the bell is a hint, never what
    decides what a reader reads."""
    bus = EmbeddedBus(tmp_path / "bus", default_queues=1)
    bus.create_topic("t", 1)

    class Killed(BaseException):
        pass

    def killed(_topic_dir: Path) -> None:
        raise Killed

    monkeypatch.setattr(embedded_log, "_ring", killed)
    with pytest.raises(Killed):
        bus.log.append("t", 0, _record(b"published, bell lost"))
    monkeypatch.undo()
    # the next reader (a restarted worker's) answers with the record at once, without a wait
    reader = _reader(bus, tmp_path, "t")
    end = Background(lambda: reader.latestOffset({"q": {"t/0": 0}}, ReadAllAvailable())).wait(
        "a reader over a commit with no doorbell"
    )
    assert end["q"] == {"t/0": 1}
    rows = [row for _, batch in bus.log.read("t", 0, 0, 1) for row in batch.to_pylist()]
    assert [r["value"] for r in rows] == [b"published, bell lost"]
    reader.stop()


def test_an_idle_file_source_wakes_when_its_file_grows(tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text("")
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(data),
        "connect.topicname": "t",
    }
    plan = plan_source(
        "src",
        FileSourceConnector(),
        config,
        parse_settings(config, "source"),
        run="r",
        staging_dir=str(tmp_path / "staging"),
        positions=None,
        idle_wait_s=FOREVER_S,
    )
    reader = source_data_source(plan)(options={}).streamReader(schema=None)
    start = {"p": {}}
    waiting = Background(lambda: reader.latestOffset(start, ReadAllAvailable()))
    _later(lambda: data.open("a").write("a line\n"))
    end = waiting.wait("the source to wake at the append")
    assert list(end["p"].values()) == [{"position": 7}]
    reader.stop()


def test_a_broker_bus_without_room_for_doorbells_reads_without_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The bells are a hint: a state directory where their folder cannot be made (here a file
    stands where a folder should be) leaves the reader looking every IDLE_PAUSE_S, with a
    warning, instead of failing its query."""
    from sluice.bus.kafka import KafkaLog

    (tmp_path / "not-a-folder").write_text("")
    log = KafkaLog(tmp_path / "not-a-folder" / "bus", bootstrap_servers="127.0.0.1:1")
    assert log.doorbells_ring_for_every_write is False
    assert log.doorbells(["t"]) == []
    assert "no doorbells for topics ['t']" in caplog.text
    good = KafkaLog(tmp_path / "bus", bootstrap_servers="127.0.0.1:1")
    (bell,) = good.doorbells(["a.b_c-d"])
    assert bell == str(tmp_path / "bus" / "bells" / "a.b_c-d")
    assert (tmp_path / "bus" / "bells").is_dir()
