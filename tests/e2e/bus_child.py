"""Child process for the bus crash tests: file source → topic on a broker bus → file sink.

Usage: python bus_child.py BUS_PROPS_JSON STORE_ROOT SOURCE_FILE SINK_FILE TOPIC

`BUS_PROPS_JSON` holds worker keys (`bus=kafka` + `bootstrap.servers`, or `bus=rocketmq` +
`namesrvAddr`); the bus is built from them as the worker does (`WorkerConfig.create_bus`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner
from sluice.runtime.worker_config import WorkerConfig


def main() -> None:
    props_json, root, source, sink, topic = sys.argv[1:6]
    props = {**json.loads(props_json), "storePathRootDir": root}
    bus = WorkerConfig.from_properties(props).create_bus()
    spark = build_session(
        {"spark.master": "local[2]", "spark.driver.memory": "1g"}, log_level="ERROR"
    )
    runner = ConnectorRunner(spark, os.path.abspath(root), trigger_interval_ms=0, bus=bus)
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": source,
            "connect.topicname": topic,
            "read.max.rows": "20000",
            # two tasks over one file: each micro-batch is two parts, the second after the first
            "max.tasks": "2",
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "FileSinkConnector",
            "filename": sink,
            "connect.topicnames": topic,
            "read.max.rows": "15000",
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
