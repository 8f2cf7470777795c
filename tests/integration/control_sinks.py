"""Sinks that use the SinkTaskContext (loaded by class path in the tests)."""

from __future__ import annotations

import json
import os

from sluice.sdk import ConfigDef, ConfigKey, ConnectRecord, SinkConnector, SinkTask

CONFIG = ConfigDef(ConfigKey("path"), ConfigKey("connect.topicnames", type="list"))


class ResetOnceTask(SinkTask):
    """Records every value; the first time it sees data, asks to re-read its queues from 0."""

    def start(self, config):
        self.path = CONFIG.parse(config)["path"]

    def put(self, records: list[ConnectRecord]) -> None:
        with open(self.path, "a") as f:
            for r in records:
                f.write(json.dumps({"value": r.value, "offset": r.offset}) + "\n")
        marker = self.path + ".reset"
        if records and not os.path.exists(marker):
            open(marker, "w").close()
            for partition in self.context.assignment():
                self.context.reset_offset(partition, {"queueOffset": 0})


class ResetOnceSink(SinkConnector):
    config_def = CONFIG
    task_class = ResetOnceTask

    def task_configs(self, max_tasks):
        return [dict(self.config) for _ in range(max_tasks)]
