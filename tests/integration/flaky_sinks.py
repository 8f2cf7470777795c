"""Sinks whose `put` or `flush` fails or stalls on purpose (loaded by class path in the tests)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sluice.sdk import (
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    RetriableException,
    SinkConnector,
    SinkTask,
)

CONFIG = ConfigDef(
    ConfigKey("path"),
    ConfigKey("connect.topicnames", type="list"),
    ConfigKey("failures", type="int", default=3),
    ConfigKey("fail.in", default="put", choices=("put", "flush")),
)


class FlakyTask(SinkTask):
    """Raises RetriableException on its first `failures` calls to put (or, with
    `fail.in=flush`, to flush, put only buffering), then writes the values."""

    def start(self, config):
        options = CONFIG.parse(config)
        self.path, self.left = options["path"], options["failures"]
        self.in_flush, self.buffer = options["fail.in"] == "flush", []

    def _fail_first_calls(self) -> None:
        if self.left != 0:
            self.left -= 1
            raise RetriableException("the target is briefly unavailable")

    def put(self, records: list[ConnectRecord]) -> None:
        if self.in_flush:
            self.buffer.extend(records)
            return
        self._fail_first_calls()
        with open(self.path, "a") as f:
            f.writelines(f"{r.value}\n" for r in records)

    def flush(self, batch_id):
        if self.in_flush and self.buffer:
            self._fail_first_calls()
            with open(self.path, "a") as f:
                f.writelines(f"{r.value}\n" for r in self.buffer)
            self.buffer = []


class FlakySink(SinkConnector):
    config_def = CONFIG
    task_class = FlakyTask

    def task_configs(self, max_tasks):
        return [dict(self.config) for _ in range(max_tasks)]


def lines_in_topic(runner: Any, src: Path, lines: int, topic: str = "t") -> None:
    """Write `r0`…`r<lines-1>` to `src` and copy them into `topic` with a file source `src`
    on `runner` (a ConnectorRunner), waiting until the topic holds them all."""
    from tests.conftest import wait_until  # not at import: Spark's workers load this module

    src.write_text("".join(f"r{i}\n" for i in range(lines)))
    conf = {"connector.class": "FileSourceConnector", "filename": str(src)}
    runner.start("src", {**conf, "connect.topicname": topic})
    wait_until(lambda: runner.bus.count(topic) == lines, 60, f"{lines} in the topic")


GATED = ConfigDef(ConfigKey("path"), ConfigKey("connect.topicnames", type="list"))


class GatedTask(SinkTask):
    """Writes the values in `put` (at-least-once, no batch dedupe), then holds its first
    `flush` until a file `<path>.gate` exists, having created `<path>.flushing`: a test can stop
    the query while a micro-batch is in its commit phase."""

    def start(self, config):
        self.path, self.held = GATED.parse(config)["path"], False

    def put(self, records: list[ConnectRecord]) -> None:
        with open(self.path, "a") as f:
            f.writelines(f"{r.value}\n" for r in records)

    def flush(self, batch_id):
        if self.held or not os.path.exists(self.path):
            return
        self.held = True
        open(self.path + ".flushing", "w").close()
        while not os.path.exists(self.path + ".gate"):
            time.sleep(0.05)


class GatedSink(SinkConnector):
    config_def = GATED
    task_class = GatedTask

    def task_configs(self, max_tasks):
        return [dict(self.config) for _ in range(max_tasks)]
