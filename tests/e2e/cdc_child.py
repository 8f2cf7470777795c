"""Child process of the CDC crash test: PostgreSQL CDC → topic → MariaDB (JDBC sink) until killed.

Usage: python cdc_child.py STORE_ROOT PG_URL MY_URL TABLE SLOT [SNAPSHOT_MODE]

TABLE (`schema.table`) is captured from PostgreSQL through slot and publication SLOT into topic
`cdc.<schema>.<table>` and applied to a MariaDB table named after it.
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.conftest import wait_until
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, pg_url, my_url, table, slot = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "never"
    # the snapshot test reads the topic's records back: JSON it can decode without a registry
    converter = "AvroConverter" if mode == "never" else "JsonConverter"
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    runner.start(
        "cdc",
        {
            "connector.class": "PostgresCdcSourceConnector",
            "connection.url": pg_url,
            "connection.user": "root",
            "topic.prefix": "cdc",
            "table.include.list": table,
            "slot.name": slot,
            "publication.name": slot,
            "snapshot.mode": mode,
            "max.tasks": "2",  # snapshot chunks read by two Spark partitions
            "read.max.rows": "500",  # many small micro-batches: kills land between and inside them
            "value.converter": converter,
        },
    )
    if converter == "JsonConverter":
        # its schema is registered with the first records (the topic is the records' own)
        log, topic = runner.bus.log, f"cdc.{table}"
        wait_until(
            lambda: (
                log.topic_exists(topic)
                and sum(q.max_offset for q in log.offsets(topic).values()) > 0
            ),
            300,
            "the first change events",
        )
    runner.start(
        "mirror",
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": my_url,
            "connection.user": "root",
            "connect.topicnames": f"cdc.{table}",
            "table.name.format": table.split(".", 1)[1],
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "value.converter": converter,
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
