"""Child process of the poll-only / dead-letter crash test: two sources until killed.

Usage: python replay_child.py STORE_ROOT QUEUE_DIR MAX_POLL RECORDS READ_MAX_ROWS RAW_FILE OUT_FILE

- `queue`: the poll-only `CappedQueueSource` over QUEUE_DIR's message files (at most MAX_POLL per
  poll) → topic `polled`, the message text as the value;
- `people`: `PacedBadRecordSource` (RECORDS records, READ_MAX_ROWS per micro-batch) → topic
  `people` (key: the id as text), the records that do not fit the schema → dead-letter topic
  `people-dlq` (errors.tolerance=all);
- `raw` → `out`: a file source over RAW_FILE (JSON lines, some malformed, appended by the test)
  → topic `raw` → a file sink into OUT_FILE reading it with the JsonConverter (schema `raw-value`:
  one INT32 field `a`), the lines it cannot decode → dead-letter topic `raw-dlq`.
"""

from __future__ import annotations

import os
import sys

from sluice.converters import canonical
from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from sluice.sdk import FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, queue_dir, max_poll, records, read_max_rows, raw_file, out_file = sys.argv[1:8]
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
    # the sink side: a JSON sink needs its topic's schema before it can plan (a Spark frame)
    SqliteSchemaRegistry(os.path.join(root, "schemas.sqlite")).register(
        "raw-value", canonical(Schema.struct(("a", Schema.of(FieldType.INT32))))
    )
    runner.start(
        "raw",
        {
            "connector.class": "FileSourceConnector",
            "filename": raw_file,
            "connect.topicname": "raw",
        },
    )
    runner.start(
        "out",
        {
            "connector.class": "FileSinkConnector",
            "filename": out_file,
            "connect.topicnames": "raw",
            "read.max.rows": "500",  # batches back to back while the test appends lines
            "value.converter": "JsonConverter",
            "value.converter.schemas.enable": "false",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "raw-dlq",
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
