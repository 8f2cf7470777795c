"""Sinks whose `put` or `flush` fails on purpose (loaded by class path in the tests)."""

from __future__ import annotations

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
