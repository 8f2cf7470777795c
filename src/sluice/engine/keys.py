"""Configuration keys the runtime itself reads from every connector config."""

from __future__ import annotations

from sluice.sdk import ConfigDef, ConfigKey

RUNTIME_KEYS = ConfigDef(
    ConfigKey("max.tasks", type="int", default=1, min=1, doc="upper bound of tasks (partitions)"),
    ConfigKey("read.max.rows", type="int", default=None, min=1, doc="rows per micro-batch"),
    ConfigKey("read.max.bytes", type="int", default=None, min=1, doc="bytes per micro-batch"),
    ConfigKey("errors.retry.timeout", type="int", default=0, min=-1, doc="ms; -1 = forever"),
    ConfigKey("errors.retry.delay.max.ms", type="int", default=60_000, min=0, doc="backoff cap"),
)
