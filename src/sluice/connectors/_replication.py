"""What the message-queue replicators (RocketMQ, Kafka) share: which source topics to copy, how
topics are renamed, which task owns which source queue, and which target queue a record goes to.

Keys (both families):

* ``source.topics`` — topics to copy, separated by ``,`` or ``;``; or
* ``source.topics.regex`` — a regular expression the whole topic name must match (the topic list
  is looked at again every 10 s, so new matching topics are picked up);
* ``topic.rename.format`` (default ``${topic}``) — the name a copied topic gets; ``${topic}`` is
  replaced by the original name (``${topic}-copy``, ``dc2.${topic}``, or a fixed name).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from sluice.sdk import ConfigException, ConfigKey, RecordPartition, partition_key

TOPIC_KEYS = (
    ConfigKey("source.topics", type="list", default=None, doc="topics to copy (, or ;)"),
    ConfigKey("source.topics.regex", default=None, doc="or: a regex the topic names match"),
    ConfigKey("topic.rename.format", default="${topic}", doc="new name; ${topic} = old name"),
)
#: Task configs carry which share of the source queues each task reads.
TASK_INDEX, TASK_COUNT = "task.index", "task.count"

_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_.-]{1,127}")  # RocketMQ's rule, plus Kafka's "."


def topic_filter(values: Mapping[str, Any]) -> Callable[[str], bool] | list[str]:
    """The explicit topic list, or a predicate on topic names (the regex); exactly one of the
    two keys must be set."""
    topics, regex = values["source.topics"], values["source.topics.regex"]
    if topics and regex:
        raise ConfigException(
            "source.topics.regex", "set either source.topics or source.topics.regex, not both"
        )
    if topics:
        return list(dict.fromkeys(topics))
    if not regex:
        raise ConfigException(
            "source.topics", "required key is missing (or set source.topics.regex)"
        )
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise ConfigException("source.topics.regex", f"invalid regular expression: {exc}") from None
    return lambda topic: pattern.fullmatch(topic) is not None


def renamed(fmt: str, topic: str) -> str:
    """``topic.rename.format`` applied to ``topic``."""
    return fmt.replace("${topic}", topic)


def check_rename(fmt: str) -> None:
    """Raise `ConfigException` unless ``fmt`` gives valid topic names."""
    sample = renamed(fmt, "topic")
    if not _TOPIC_NAME.fullmatch(sample):
        raise ConfigException(
            "topic.rename.format",
            f"gives {sample!r} for topic 'topic', not a valid topic name "
            "(letters, digits, %|_.- and at most 127 characters)",
        )


def task_shares(max_tasks: int, queues: int, config: Mapping[str, str]) -> list[dict[str, str]]:
    """One config per task: ``min(max_tasks, queues)`` tasks (at least one), each owning the
    source queues `owns` gives it."""
    count = max(1, min(max_tasks, queues))
    return [{**config, TASK_INDEX: str(i), TASK_COUNT: str(count)} for i in range(count)]


def owns(config: Mapping[str, str], partition: RecordPartition) -> bool:
    """Whether the task with this config reads ``partition`` (a stable hash of the partition)."""
    count = int(config.get(TASK_COUNT, "1"))
    index = int(config.get(TASK_INDEX, "0"))
    return zlib.crc32(partition_key(partition).encode()) % count == index


def target_queue(queue_id: int, queues: int) -> int:
    """The target queue of a record read from sluice queue ``queue_id``: the same number modulo
    the target's queue count, so a sluice queue's order (one key, one source queue) is kept."""
    return queue_id % queues
