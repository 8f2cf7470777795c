"""Child process of the CDC crash test: PostgreSQL CDC → topic → MariaDB (JDBC sink) until killed.

Usage: python cdc_child.py STORE_ROOT PG_URL MY_URL TABLE SLOT [SNAP_TABLE SNAP_SLOT]

TABLE (`schema.table`) is captured from PostgreSQL through slot and publication SLOT into topic
`cdc.<schema>.<table>` (`snapshot.mode=never`, Avro) and applied to a MariaDB table named after
it. With SNAP_TABLE, a second connector snapshots that table first (`snapshot.mode=initial`,
2 tasks) through SNAP_SLOT, in JSON so the test can read the records back, into its own mirror.
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.conftest import wait_until
from tests.e2e.child_watch import watch_until_killed


def mirror(runner: ConnectorRunner, name: str, pg_url: str, my_url: str, table: str, **extra):
    """A CDC source of `table` and the JDBC sink applying its change events."""
    runner.start(
        name,
        {
            "connector.class": "PostgresCdcSourceConnector",
            "connection.url": pg_url,
            "connection.user": "root",
            "topic.prefix": "cdc",
            "table.include.list": table,
            "read.max.rows": "500",  # many small micro-batches: kills land between and inside them
            **extra,
        },
    )
    if extra["value.converter"] == "JsonConverter":
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
        f"{name}-mirror",
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": my_url,
            "connection.user": "root",
            "connect.topicnames": f"cdc.{table}",
            "table.name.format": table.split(".", 1)[1],
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "value.converter": extra["value.converter"],
        },
    )


def main() -> None:
    root, pg_url, my_url, table, slot = sys.argv[1:6]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    common = {"slot.name": slot, "publication.name": slot}
    mirror(
        runner,
        "cdc",
        pg_url,
        my_url,
        table,
        **common,
        **{"snapshot.mode": "never", "value.converter": "AvroConverter"},
    )
    if len(sys.argv) > 7:
        snap_table, snap_slot = sys.argv[6:8]
        mirror(
            runner,
            "snap",
            pg_url,
            my_url,
            snap_table,
            **{
                "slot.name": snap_slot,
                "publication.name": snap_slot,
                "snapshot.mode": "initial",
                "max.tasks": "2",  # the snapshot's chunks read by two Spark partitions
                "value.converter": "JsonConverter",
            },
        )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
