"""Child process for the crash tests: file source → topic → file sink until killed.

Usage: python pipeline_child.py STORE_ROOT SOURCE_FILE SINK_FILE [FUSED]
"""

from __future__ import annotations

import sys
import time

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner


def main() -> None:
    root, source, sink = sys.argv[1:4]
    fused = sys.argv[4] if len(sys.argv) > 4 else "true"
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": source,
            "connect.topicname": "crash",
            "read.max.rows": "100000",
            "pipeline.fused": fused,
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "FileSinkConnector",
            "filename": sink,
            "connect.topicnames": "crash",
            "read.max.rows": "70000",
            "pipeline.fused": fused,
        },
    )
    print("RUNNING", flush=True)
    while True:
        for running in runner.running.values():
            if running.query.exception() is not None:
                print(f"FAILED {running.name}: {running.query.exception()}", flush=True)
                sys.exit(3)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
