"""Benchmark: the file connectors' tasks driven directly, without Spark (what the connector code
itself costs, free of Spark's noise).

  source  FileSourceTask: `latest` then `read` over the whole file in 64 MiB ranges (the default
          read limit), Arrow batches out;
  sink    FileSinkTask `put_batch` of those batches, `flush`, then the connector's `commit`.

Times are CPU seconds of this process (user + system, `time.process_time`), not wall time: on a
shared machine they vary far less. Prints the same table shape as file_pipeline.py, so
`bench/ab.py` can compare two trees with it.
Usage: python -m bench.file_tasks [--lines 2000000] [--out bench/out]   (from the repository root)
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import pyarrow as pa
from bench.file_pipeline import make_file

from sluice.connectors.file import FileSinkConnector, FileSinkTask, FileSourceTask
from sluice.sdk import BatchId, ReadLimit, SinkTaskContext


def read_all(path: str) -> list[pa.RecordBatch]:
    task = FileSourceTask()
    task.start({"filename": path, "connect.topicname": "t"})
    part, start, out = task.partitions()[0], None, []
    limit = ReadLimit(max_bytes=64 << 20)
    while (end := task.latest(part, start, limit)) != start:
        out.extend(task.read(part, start, end))
        start = end
    return out


def write_all(path: str, batches: list[pa.RecordBatch]) -> None:
    config = {"filename": path, "connect.topicnames": "t"}
    connector = FileSinkConnector()
    connector.start(config)
    batch_id = BatchId("bench", 0)
    task = FileSinkTask()
    task.context = SinkTaskContext(task_id=0, batch_id=batch_id)
    task.start(config)
    for batch in batches:
        task.put_batch(batch)
    connector.commit(batch_id, [task.flush(batch_id)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    src = os.path.join(args.out, "tasks-input.txt")
    make_file(src, args.lines)
    dst_dir = os.path.join(args.out, "tasks-out")
    shutil.rmtree(dst_dir, ignore_errors=True)
    os.makedirs(dst_dir)
    dst = os.path.join(dst_dir, "out.txt")
    size = os.path.getsize(src)
    warm = os.path.join(args.out, "tasks-warm.txt")  # first Arrow calls load their kernels
    make_file(warm, 1000)
    write_all(os.path.join(dst_dir, "warm.txt"), read_all(warm))
    began = time.process_time()
    batches = read_all(src)
    read = time.process_time() - began
    began = time.process_time()
    write_all(dst, batches)
    written = time.process_time() - began
    with open(src, "rb") as a, open(dst, "rb") as b:
        assert a.read() == b.read(), "the sink file differs from the source"
    print(f"{'step':<36}{'CPU s':>9}{'lines/s':>14}{'MB/s':>9}")
    for name, seconds in (("source: latest + read", read), ("sink: put_batch + commit", written)):
        print(
            f"{name:<36}{seconds:>9.3f}{args.lines / seconds:>14,.0f}{size / 1e6 / seconds:>9.1f}"
        )


if __name__ == "__main__":
    main()
