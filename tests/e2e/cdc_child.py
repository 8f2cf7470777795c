"""Child process of the CDC crash test: CDC → topic → the other database (JDBC sink) until killed.

Usage: python cdc_child.py STORE_ROOT SOURCE_URL TARGET_URL TABLE SLOT [SNAP_TABLE SNAP_SLOT]

TABLE (`schema.table`) is captured from the source (`jdbc:postgresql:` → PostgreSQL through slot
and publication SLOT; `jdbc:mysql:` → the MariaDB binlog, replica server id derived from SLOT)
into topic `cdc.<schema>.<table>` (`snapshot.mode=never`, Avro) and applied to a target table
named after it. With SNAP_TABLE, a second connector snapshots that table first
(`snapshot.mode=initial`, 2 tasks) through SNAP_SLOT, in JSON so the test can read the records
back, into its own mirror.
"""

from __future__ import annotations

import sys
import zlib

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.conftest import wait_until
from tests.e2e.child_watch import watch_until_killed


def log_keys(source_url: str, slot: str) -> dict[str, str]:
    """The connector class and where it reads the log: a PostgreSQL slot and publication, or a
    MariaDB replica server id of its own."""
    if source_url.startswith("jdbc:postgresql:"):
        return {
            "connector.class": "PostgresCdcSourceConnector",
            "slot.name": slot,
            "publication.name": slot,
        }
    return {
        "connector.class": "MySqlCdcSourceConnector",
        "database.server.id": str(5400 + zlib.crc32(slot.encode()) % 100_000),
    }


def mirror(runner: ConnectorRunner, name: str, source: str, target: str, table: str, **extra):
    """A CDC source of `table` and the JDBC sink applying its change events."""
    runner.start(
        name,
        {
            "connection.url": source,
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
            "connection.url": target,
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
    root, source, target, table, slot = sys.argv[1:6]
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    mirror(
        runner,
        "cdc",
        source,
        target,
        table,
        **log_keys(source, slot),
        **{"snapshot.mode": "never", "value.converter": "AvroConverter"},
    )
    if len(sys.argv) > 7:
        snap_table, snap_slot = sys.argv[6:8]
        mirror(
            runner,
            "snap",
            source,
            target,
            snap_table,
            **log_keys(source, snap_slot),
            **{
                "snapshot.mode": "initial",
                "max.tasks": "2",  # the snapshot's chunks read by two Spark partitions
                "value.converter": "JsonConverter",
            },
        )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
