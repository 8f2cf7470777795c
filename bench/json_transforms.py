"""Benchmark: a JSON-converted pipeline with a 3-transform chain vs the same without transforms.

A source of N records with a small struct value (`id` bigint, `name` string, `amount` double,
`flag` boolean, `ts` timestamp), `value.converter=JsonConverter` (schemas enabled), a topic, and a
sink with the same converter that only counts what it receives. Both connectors start together on
a fresh store; a run ends when the sink has committed every record. Runs:

  no transforms   JSON both sides (Spark SQL `to_json` / `from_json`, JVM path)
  3-step chain    on the source: ReplaceField$Value (drop `flag`) → Cast$Value (`amount` to
                  float32) → sql (a filter that keeps every record, `upper(name)`, a computed
                  column)
  sql only        the `sql` step alone
  tolerance=all   no transforms, `errors.tolerance=all` with a dead-letter topic on both sides
                  (no record fails: the price of being ready to)

The chain keeps every record and the topic, so every run moves the same data and the sink starts
at once; the ratio is the transforms' cost. Each configuration runs `--repeat` times, in a rotating
order, and the fastest run counts (the machine is shared).
Usage: python bench/json_transforms.py [--records 5000000] [--tasks 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

HERE = os.path.dirname(os.path.abspath(__file__))
# Spark's Python workers import this module's connector classes by name.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)

from _wait import until  # noqa: E402  (run as a script: bench/ is on sys.path)
from sluice.sdk import (  # noqa: E402
    ConfigDef,
    ConfigKey,
    ConnectRecord,
    FieldType,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    Schema,
    SinkConnector,
    SinkTask,
    SourceConnector,
)

VALUE = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("name", Schema.string()),
    ("amount", Schema.of(FieldType.FLOAT64)),
    ("flag", Schema.of(FieldType.BOOLEAN)),
    ("ts", Schema.timestamp()),
    name="bench.Order",
)
_CONFIG = ConfigDef(
    ConfigKey("records", type="int", default=1_000_000),
    ConfigKey("parts", type="int", default=2),
    ConfigKey("connect.topicname"),
)
_BATCH = 100_000
NAMES = pa.array([f"customer {i}" for i in range(1024)], pa.string())


class StructTask(ReplayableSourceTask):
    """`records` records split into `parts` partitions, read as Arrow batches (no Python loop)."""

    def start(self, config: Mapping[str, str]) -> None:
        parsed = _CONFIG.parse(config)
        self.records, self.parts = parsed["records"], parsed["parts"]

    def partitions(self) -> list[RecordPartition]:
        return [{"part": str(p)} for p in range(self.parts)]

    def _bounds(self, partition: RecordPartition) -> tuple[int, int]:
        p = int(partition["part"])
        return self.records * p // self.parts, self.records * (p + 1) // self.parts

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        first, last = self._bounds(partition)
        done = start["next"] if start else first
        step = limit.max_rows or last
        return {"next": min(last, done + step)}

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch] | Iterator[ConnectRecord]:
        first = start["next"] if start else self._bounds(partition)[0]
        for lo in range(first, end["next"], _BATCH):
            hi = min(end["next"], lo + _BATCH)
            ids = pa.array(range(lo, hi), pa.int64())
            value = pa.StructArray.from_arrays(
                [
                    ids,
                    NAMES.take(pc.bit_wise_and(ids, 1023)),
                    pc.multiply(ids.cast(pa.float64()), 0.25),
                    pc.equal(pc.bit_wise_and(ids, 1), 0),
                    pc.multiply(ids, 1000).cast(pa.timestamp("us", tz="UTC")),
                ],
                fields=list(VALUE.to_arrow()),
            )
            yield pa.RecordBatch.from_arrays([value], names=["value"])


class StructSource(SourceConnector):
    """Bench source: small struct values, replayable."""

    config_def = _CONFIG
    task_class = StructTask

    def value_schema(self) -> Schema:
        return VALUE

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]


_SINK = ConfigDef(ConfigKey("count.file", doc="where the driver appends delivered counts"))


class CountTask(SinkTask):
    """Receives decoded batches and only counts them (the bench measures the pipeline)."""

    def start(self, config: Mapping[str, str]) -> None:
        self.count = 0

    def put(self, records: list[ConnectRecord]) -> None:  # pragma: no cover - put_batch is used
        self.count += len(records)

    def put_batch(self, batch: pa.RecordBatch) -> None:
        self.count += batch.num_rows

    def flush(self, batch_id: Any) -> int:
        return self.count


class CountSink(SinkConnector):
    """Bench sink: appends each committed micro-batch's record count to `count.file`."""

    config_def = _SINK
    task_class = CountTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    def commit(self, batch_id: Any, messages: list[Any]) -> None:
        with open(self.config["count.file"], "a") as f:
            f.write(f"{sum(m or 0 for m in messages)}\n")


def run(spark: Any, out: str, records: int, tasks: int, chain: dict[str, str]) -> dict[str, float]:
    """One run; `chain` holds source keys, and `errors.*` keys there apply to the sink too."""
    from sluice.runtime.runner import ConnectorRunner

    root = os.path.join(out, "store-json")
    shutil.rmtree(root, ignore_errors=True)
    runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
    json_ = {"value.converter": "JsonConverter"}
    counts = os.path.join(root, "delivered.txt")
    topic = "orders"
    # The sink can start at once: the source registered the topic's schema when it started.
    start = time.perf_counter()
    runner.start(
        "src",
        {
            "connector.class": "json_transforms.StructSource",
            "records": str(records),
            "parts": str(tasks),
            "max.tasks": str(tasks),
            "connect.topicname": "orders",
            **json_,
            **chain,
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "json_transforms.CountSink",
            "count.file": counts,
            "connect.topicnames": topic,
            "max.tasks": str(tasks),
            **json_,
            **{
                k: v.replace("dlq", "sink-dlq") for k, v in chain.items() if k.startswith("errors.")
            },
        },
    )

    def in_topic() -> int:
        return runner.bus.count(topic)

    def delivered() -> int:
        if not os.path.exists(counts):
            return 0
        with open(counts) as f:
            return sum(int(line) for line in f if line.strip())

    until(lambda: in_topic() >= records, runner)
    hop1 = time.perf_counter() - start
    until(lambda: delivered() >= records, runner)
    total = time.perf_counter() - start
    runner.close()
    return {"source hop": hop1, "end to end": total}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sys.path.insert(0, HERE)
    from sluice.engine.session import build_session

    spark = build_session(log_level="ERROR")
    sql = (
        "SELECT topic, key, named_struct('id', value.id, 'name', upper(value.name), "
        "'amount', value.amount, 'ts', value.ts, 'cents', CAST(value.amount * 100 AS BIGINT)) "
        "AS value, timestamp, headers, partition_hash FROM records WHERE value.amount >= 0"
    )
    chain = {
        "transforms": "drop,cast,shape",
        "transforms.drop.class": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.drop.exclude": "flag",
        "transforms.cast.class": "org.apache.kafka.connect.transforms.Cast$Value",
        "transforms.cast.spec": "amount:float32",
        "transforms.shape.class": "sql",
        "transforms.shape.query": sql,
    }
    sql_only = {
        "transforms": "shape",
        "transforms.shape.class": "sql",
        "transforms.shape.query": sql.replace(
            "'ts', value.ts", "'flag', value.flag, 'ts', value.ts"
        ),
    }
    warm = max(args.records // 20, 10_000)
    run(spark, out, warm, args.tasks, {})  # warm-up: Python workers, JIT, codegen paths
    tolerant = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders-dlq"}
    configs = {
        "no transforms": {},
        "3-step chain": chain,
        "sql only": sql_only,
        "tolerance=all": tolerant,
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    names = list(configs)
    for rep in range(args.repeat):
        # Rotate the order: a run late in a series tends to be slower (a longer-lived JVM).
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            extra = configs[name]
            result = run(spark, out, args.records, args.tasks, extra)
            runs[name].append(result)
            print(f"run {rep + 1}, {name}: {result}", flush=True)
    results = {name: min(rs, key=lambda r: r["end to end"]) for name, rs in runs.items()}
    base = results["no transforms"]["end to end"]
    print(
        f"\n{args.records:,} records, JsonConverter both sides, max.tasks={args.tasks}, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'run':<16}{'source hop s':>14}{'end to end s':>14}{'records/s':>12}{'x none':>8}")
    for name, r in results.items():
        print(
            f"{name:<16}{r['source hop']:>14.2f}{r['end to end']:>14.2f}"
            f"{args.records / r['end to end']:>12,.0f}{r['end to end'] / base:>8.2f}"
        )
    spark.stop()


if __name__ == "__main__":
    main()
