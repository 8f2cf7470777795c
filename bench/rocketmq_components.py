"""Benchmark: the stages of the RocketMQ bus path, each alone, on one queue.

Times, for ``--messages`` file-source-like lines (text values, no key, no extensions):
  stage    ``RocketMQLog.stage_for`` (encoding on the executor, Arrow staging file);
  commit   ``RocketMQLog.commit`` (journal, SEND_BATCH_MESSAGE round trips, wait readable);
  pull     the PULL_MESSAGE round trips alone (response bodies, nothing decoded);
  decode   decoding those bodies into reader rows (no network);
  read     ``RocketMQLog.read`` of the whole range (pull + decode, as the topic reader does).

Needs a broker (``--namesrv``, default $SLUICE_ROCKETMQ_NAMESRV or 127.0.0.1:9876).

Usage: python bench/rocketmq_components.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.rocketmq import RocketMQLog


def lines(n: int) -> pa.Table:
    values = pa.array(
        [f"line {i:09d} of the benchmark input, some words".encode() for i in range(n)]
    )
    return pa.table(
        {
            "key": pa.nulls(n, pa.binary()),
            "value": values,
            "timestamp": pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(
                STORED_SCHEMA.field("timestamp").type
            ),
            "headers": pa.nulls(n, pa.string()),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument(
        "--namesrv", default=os.environ.get("SLUICE_ROCKETMQ_NAMESRV", "127.0.0.1:9876")
    )
    args = parser.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory() as state:
        the_log = RocketMQLog(state, namesrv_addr=args.namesrv)
        topic = f"bench-c-{uuid.uuid4().hex[:8]}"
        the_log.create_topic(topic, 1)
        table = lines(n)
        times: dict[str, float] = {}

        t = time.perf_counter()
        seg = the_log.stage_for("bench", topic, 0, table)
        times["stage"] = time.perf_counter() - t

        t = time.perf_counter()
        the_log.commit("bench", 0, [seg])
        times["commit"] = time.perf_counter() - t

        _broker, qid, address = the_log._queue(topic, 0)
        t = time.perf_counter()
        bodies = list(the_log._pull(topic, 0, qid, address, 0, n))
        times["pull"] = time.perf_counter() - t

        t = time.perf_counter()
        rows = sum(b.num_rows for _, b in the_log._decode(bodies, n))
        times["decode"] = time.perf_counter() - t
        assert rows == n, rows

        t = time.perf_counter()
        rows = sum(b.num_rows for _, b in the_log.read(topic, 0, 0, n))
        times["read"] = time.perf_counter() - t
        assert rows == n, rows
        the_log.delete_topic(topic)
        the_log.close()
    print(f"{n:,} messages, one queue, load average {os.getloadavg()[0]:.1f}")
    for name, seconds in times.items():
        print(f"{name:<8} {seconds:7.2f} s  {n / seconds:>12,.0f} msg/s")


if __name__ == "__main__":
    main()
