"""A task attempt in a process of its own, for the part tests: writes its part of a micro-batch
through the bus's `PartWriter` in two halves and waits on stdin in between.

Usage: python part_child.py BUS_JSON STATE_DIR WRITER BATCH TASK TOPIC ROWS

`BUS_JSON` holds worker keys (`bus=kafka` + `bootstrap.servers`, or `bus=rocketmq` +
`namesrvAddr`). The part's rows are `part_rows(ROWS)` routed to the topic's queues by
`part_route`. The child sends the first half (Kafka: delivered to the broker inside the part's
open transaction; RocketMQ: stored), prints `SENT`, waits for a line on stdin, sends the rest and
finishes: it prints `DONE` and exits 0, or prints `FAILED <error>` and exits 3.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from sluice.bus import create_bus
from sluice.bus.base import STORED_SCHEMA


def part_rows(n: int) -> list[bytes]:
    """The values a part test writes (distinct, in order)."""
    return [f"row-{i:06d}".encode() for i in range(n)]


def part_route(n: int) -> list[int]:
    """Which queue each row goes to (two queues, runs of several rows each)."""
    return [(i // 7) % 2 for i in range(n)]


def stored(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([None] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(
                STORED_SCHEMA.field("timestamp").type
            ),
            pa.array([None] * n, pa.string()),
        ],
        schema=STORED_SCHEMA,
    )


def add_rows(part: object, topic: str, values: list[bytes], route: list[int]) -> None:
    for queue in (0, 1):
        rows = [v for v, q in zip(values, route, strict=True) if q == queue]
        if rows:
            part.add(topic, queue, stored(rows))  # type: ignore[attr-defined]


def main() -> None:
    props_json, state, writer, batch, task, topic, count = sys.argv[1:8]
    props = json.loads(props_json)
    bus = create_bus(props["bus"], props, state)
    part = bus.log.part_writer(writer, int(batch), int(task))
    values, route = part_rows(int(count)), part_route(int(count))
    half = len(values) // 2
    try:
        add_rows(part, topic, values[:half], route[:half])
        # make the first half reach the broker before saying so
        if props["bus"] == "kafka":
            part.client.producer.flush(30)  # type: ignore[attr-defined]
        else:
            part._send(topic, part.topics[topic])  # type: ignore[attr-defined]
        print("SENT", flush=True)
        sys.stdin.readline()
        add_rows(part, topic, values[half:], route[half:])
        part.finish()
    except Exception as exc:
        print(f"FAILED {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
