"""Child process of the lake crash test: one topic into Parquet, Delta and Iceberg until killed.

Usage: python lake_child.py STORE_ROOT LAKE_DIR [READ_MAX_ROWS]

The topic `orders` (filled by the test) → `ParquetSinkConnector` (LAKE/parquet),
`DeltaSinkConnector` (LAKE/delta) and `IcebergSinkConnector` (LAKE/warehouse, table
`shop.orders`), two tasks each, partitioned by `region`, a small micro-batch (READ_MAX_ROWS per
queue, default 1000) so that the kill lands among many commits.
"""

from __future__ import annotations

import os
import sys

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from tests.e2e.child_watch import watch_until_killed


def targets(lake: str) -> dict[str, dict[str, str]]:
    """Each sink's own keys (the test reads the tables back with them)."""
    return {
        "parquet": {
            "connector.class": "ParquetSinkConnector",
            "path": os.path.join(lake, "parquet"),
        },
        "delta": {
            "connector.class": "DeltaSinkConnector",
            "delta.table.path": os.path.join(lake, "delta"),
        },
        "iceberg": {
            "connector.class": "IcebergSinkConnector",
            "iceberg.warehouse": os.path.join(lake, "warehouse"),
            "iceberg.table": "shop.orders",
        },
    }


def main() -> None:
    root, lake = sys.argv[1:3]
    rows = sys.argv[3] if len(sys.argv) > 3 else "1000"
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    for kind, target in targets(lake).items():
        runner.start(
            f"lake-{kind}",
            {
                **target,
                "connect.topicnames": "orders",
                "partition.fields": "region",
                "max.tasks": "2",
                "read.max.rows": rows,
            },
        )
    watch_until_killed(runner)


if __name__ == "__main__":
    main()
