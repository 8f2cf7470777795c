"""Child process of the poll-only / dead-letter crash test: two sources until killed.

Usage: python replay_child.py STORE_ROOT QUEUE_DIR MAX_POLL RECORDS READ_MAX_ROWS

- `queue`: the poll-only `CappedQueueSource` over QUEUE_DIR's message files (at most MAX_POLL per
  poll) → topic `polled`, the message text as the value;
- `people`: `PacedBadRecordSource` (RECORDS records, READ_MAX_ROWS per micro-batch) → topic
  `people` (key: the id as text), the records that do not fit the schema → dead-letter topic
  `people-dlq` (errors.tolerance=all).
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, queue_dir, max_poll, records, read_max_rows = sys.argv[1:6]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    runner.start(
        "queue",
        {
            "connector.class": "tests.e2e.replay_sources.CappedQueueSource",
            "queue.dir": queue_dir,
            "max.poll.records": max_poll,
            "connect.topicname": "polled",
            "value.converter": "StringConverter",
        },
    )
    runner.start(
        "people",
        {
            "connector.class": "tests.e2e.replay_sources.PacedBadRecordSource",
            "count": records,
            "read.max.rows": read_max_rows,
            "connect.topicname": "people",
            "key.converter": "StringConverter",
            "value.converter": "JsonConverter",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "people-dlq",
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
