"""Configuration keys the runtime itself reads from every connector config."""

from __future__ import annotations

from sluice.converters._compatibility import LEVELS
from sluice.sdk import ConfigDef, ConfigKey

#: `errors.*` besides the retry keys (see `sluice.engine.errors`).
ERROR_KEYS = ConfigDef(
    ConfigKey("errors.tolerance", default="none", choices=("none", "all"), doc="none | all"),
    ConfigKey("errors.log.enable", type="bool", default=False, doc="log tolerated records"),
    ConfigKey(
        "errors.log.include.messages", type="bool", default=False, doc="log keys and values too"
    ),
    ConfigKey("errors.deadletterqueue.topic.name", default="", doc="dead-letter topic"),
    ConfigKey(
        "errors.deadletterqueue.write.queue.nums", type="int", default=None, min=1, doc="queues"
    ),
    ConfigKey(
        "errors.deadletterqueue.read.queue.nums", type="int", default=None, min=1, doc="queues"
    ),
    ConfigKey(
        "errors.deadletterqueue.context.properties.enable",
        type="bool",
        default=None,
        doc="add __connect.errors.* headers (default true)",
    ),
    ConfigKey(
        "errors.deadletterqueue.context.headers.enable",
        type="bool",
        default=None,
        doc="Kafka Connect's name of …context.properties.enable",
    ),
)

RUNTIME_KEYS = ConfigDef(
    ConfigKey("max.tasks", type="int", default=1, min=1, doc="upper bound of tasks (partitions)"),
    ConfigKey("read.max.rows", type="int", default=None, min=1, doc="rows per micro-batch"),
    ConfigKey("read.max.bytes", type="int", default=None, min=1, doc="bytes per micro-batch"),
    ConfigKey("errors.retry.timeout", type="int", default=0, min=-1, doc="ms; -1 = forever"),
    ConfigKey("errors.retry.delay.max.ms", type="int", default=60_000, min=0, doc="backoff cap"),
    *ERROR_KEYS.keys.values(),
    # sluice.runtime.herder.restarts: a query failed by a transient Spark error restarts by itself
    ConfigKey(
        "restart.transient.max.attempts",
        type="int",
        default=5,
        min=0,
        doc="automatic restarts after a transient Spark failure; 0 = none of any kind",
    ),
    ConfigKey(
        "restart.transient.backoff.max.ms",
        type="int",
        default=60_000,
        min=1000,
        doc="the restarts' backoff doubles from 1 s up to this",
    ),
    ConfigKey(
        "restart.retriable.timeout.ms",
        type="int",
        default=600_000,
        min=-1,
        doc="how long a query failed by a server being away is restarted; -1 = forever, 0 = never",
    ),
    # sluice.converters._compatibility: the level of the subjects this connector registers
    ConfigKey(
        "schema.compatibility",
        default=None,
        choices=LEVELS,
        doc="compatibility of new schema versions (default: the worker's, BACKWARD)",
    ),
)

#: `pipeline.fused=false` forces the JVM path; a value that is not a boolean names the key.
PIPELINE_KEYS = ConfigDef(
    ConfigKey(
        "pipeline.fused",
        type="bool",
        default=True,
        doc="false forces the JVM path (records cross into Spark rows and back)",
    ),
)

#: The keys a sink connector's config carries besides its own.
SINK_KEYS = ConfigDef(
    ConfigKey("connect.topicnames", type="list", doc="topics the sink reads (Kafka: topics)"),
    # Where a new sink connector (no stored position for a queue) starts. FIRST, unlike
    # RocketMQ Connect's LAST, so that a sink created after its source reads what the topic holds.
    ConfigKey(
        "consume.from.where",
        default="CONSUME_FROM_FIRST_OFFSET",
        choices=("CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_LAST_OFFSET"),
        doc="where a new sink starts in queues without a stored position",
    ),
    ConfigKey(
        "task.group.id",
        default=None,
        pattern=r"[%|a-zA-Z0-9_-]{1,255}",  # RocketMQ's rule for group names
        doc="consumer group the sink's offsets are committed under (default connect-<name>)",
    ),
)
