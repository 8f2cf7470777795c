"""A sink whose every `put` takes as long as `slow.seconds` says, for tests that need a worker
caught in the middle of a micro-batch (its write job is running when the worker is asked to stop).

It touches `slow.marker` when a `put` starts (so the test knows the batch is in its write job) and
`slow.marker` + ".done" when one ends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from sluice.sdk import ConfigDef, ConfigKey, ConnectRecord, SinkConnector, SinkTask

KEYS = ConfigDef(
    ConfigKey("slow.marker", doc="file touched when a put starts"),
    ConfigKey("slow.seconds", type="int", default=600, doc="how long each put takes"),
)


class SlowSinkTask(SinkTask):
    """Waits in `put`, delivering nothing."""

    def start(self, config: Mapping[str, str]) -> None:
        values = KEYS.parse(config)
        self.marker = Path(values["slow.marker"])
        self.seconds = values["slow.seconds"]

    def put(self, records: list[ConnectRecord]) -> None:
        if not records:
            return
        self.marker.touch()
        time.sleep(self.seconds)
        Path(f"{self.marker}.done").touch()


class SlowSinkConnector(SinkConnector):
    """One task that takes `slow.seconds` over each non-empty put."""

    config_def = KEYS
    task_class = SlowSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]
