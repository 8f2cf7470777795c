"""Child process of the JDBC crash and outage tests: JDBC source → topic → JDBC sink until killed.

Usage: python jdbc_child.py STORE_ROOT SOURCE_URL SINK_URL TABLE [KEY=VALUE ...]

SOURCE_URL / SINK_URL are `connection.url`s (user root, no password); TABLE is copied from the
source (incrementing on `id`) into a table of the same name (upsert on `id`). Extra KEY=VALUE
pairs go to both connectors (`source.` / `sink.` prefixed ones to one of them).
"""

from __future__ import annotations

import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def main() -> None:
    root, source_url, sink_url, table = sys.argv[1:5]
    extra = dict(arg.split("=", 1) for arg in sys.argv[5:])
    both = {k: v for k, v in extra.items() if not k.startswith(("source.", "sink."))}
    only = {
        side: {k[len(side) + 1 :]: v for k, v in extra.items() if k.startswith(side + ".")}
        for side in ("source", "sink")
    }
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    runner.start(
        "src",
        {
            "connector.class": "JdbcSourceConnector",
            "connection.url": source_url,
            "connection.user": "root",
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": table,
            "connect.topicname": "copy",
            "value.converter": "AvroConverter",
            **both,
            **only["source"],
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": sink_url,
            "connection.user": "root",
            "connect.topicnames": "copy",
            "table.name.format": table,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "id",
            "value.converter": "AvroConverter",
            **both,
            **only["sink"],
        },
    )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
