"""Test connectors with typed records (Spark's Python workers import them from here).

`TypedSource` writes `count` records whose value has every schema type (nested struct, array,
map, decimal(38,10), date, time, timestamp, bytes, unicode text…) and whose key is the record's
INT64 id. `ArrowDirSink` stores each batch it receives as an Arrow IPC file, so a test can compare
exactly what a sink got.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sluice.sdk import (
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

ADDRESS = Schema.struct(
    ("city", Schema.string(optional=False)),
    ("zip", Schema.of(FieldType.INT32)),
    name="com.example.Address",
)
TYPED = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("tiny", Schema.of(FieldType.INT8)),
    ("small", Schema.of(FieldType.INT16)),
    ("flag", Schema.of(FieldType.BOOLEAN)),
    ("ratio", Schema.of(FieldType.FLOAT32)),
    ("score", Schema.of(FieldType.FLOAT64)),
    ("name", Schema.string()),
    ("price", Schema.decimal(38, 10)),
    ("day", Schema.date()),
    ("at", Schema.time()),
    ("ts", Schema.timestamp()),
    ("blob", Schema.bytes_()),
    ("tags", Schema.array(Schema.string())),
    ("attrs", Schema.map_(Schema.string(), Schema.of(FieldType.INT64))),
    ("address", ADDRESS),
    name="com.example.Typed",
)


def typed_row(i: int) -> dict[str, Any]:
    """Record `i`'s value (every fourth one has its optional fields null)."""
    if i % 4 == 3:
        return {
            "id": i,
            **{f.name: None for f in TYPED.fields if f.name != "id"},
        }
    return {
        "id": i,
        "tiny": (i % 256) - 128,
        "small": -(i % 30000),
        "flag": i % 2 == 0,
        "ratio": 0.5 * i,
        "score": i / 7,
        "name": f"naïve 😀 {i}",
        "price": Decimal(f"{'-' if i % 2 else ''}1234567890123456789012345678.{i:010d}"),
        "day": date(1970, 1, 1).fromordinal(date(2020, 1, 1).toordinal() + i),
        # microseconds, sub-millisecond digits included (23:59:59.999999 for i = 22)
        "at": (
            time(23, 59, 59, 999_999)
            if i == 22
            else time(i % 24, i % 60, i % 60, (i * 1001) % 1_000_000)
        ),
        "ts": datetime(2024, 2, 29, 12, 0, 0, i % 1_000_000, tzinfo=UTC),
        "blob": bytes([i % 256, 0, 255]),
        "tags": [f"t{i}", None, "é"],
        "attrs": [("a", i), ("b", None)],
        "address": {"city": f"Zürich {i}", "zip": 8000 + i},
    }


_SOURCE = ConfigDef(
    ConfigKey("count", type="int", default=10),
    ConfigKey("connect.topicname"),
)


class TypedTask(ReplayableSourceTask):
    """Records 0..count-1, replayable by index."""

    def start(self, config: Mapping[str, str]) -> None:
        self.count = _SOURCE.parse(config)["count"]

    def partitions(self) -> list[RecordPartition]:
        return [{"typed": "all"}]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        return {"next": self.count}

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterable[ConnectRecord]:
        for i in range(start["next"] if start else 0, end["next"]):
            yield ConnectRecord(value=typed_row(i), key=i, offset={"next": i + 1})


class TypedSource(SourceConnector):
    """A source of `count` typed records (key: the INT64 id, value: `TYPED`)."""

    config_def = _SOURCE
    task_class = TypedTask

    def key_schema(self) -> Schema:
        return Schema.of(FieldType.INT64)

    def value_schema(self) -> Schema:
        return TYPED

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]


_SINK = ConfigDef(ConfigKey("dir", doc="folder for the Arrow files"))


class ArrowDirTask(SinkTask):
    """Writes every batch it gets to `<dir>/<uuid>.arrow`."""

    def start(self, config: Mapping[str, str]) -> None:
        self.dir = _SINK.parse(config)["dir"]
        os.makedirs(self.dir, exist_ok=True)

    def put(self, records: list[ConnectRecord]) -> None:  # pragma: no cover - put_batch is used
        raise NotImplementedError

    def put_batch(self, batch: pa.RecordBatch) -> None:
        path = os.path.join(self.dir, f"{uuid.uuid4().hex}.arrow")
        with pa.OSFile(path + ".tmp", "wb") as sink, pa.ipc.new_file(sink, batch.schema) as w:
            w.write_batch(batch)
        os.replace(path + ".tmp", path)


class ArrowDirSink(SinkConnector):
    """Test sink: the batches it receives, as Arrow files (at-least-once)."""

    config_def = _SINK
    task_class = ArrowDirTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


def read_dir(folder: str) -> pa.Table | None:
    """Everything an `ArrowDirSink` stored in `folder`, sorted by key (None if nothing yet)."""
    if not os.path.isdir(folder):
        return None
    tables = []
    for name in os.listdir(folder):
        if name.endswith(".arrow"):
            with pa.memory_map(os.path.join(folder, name)) as source:
                tables.append(pa.ipc.open_file(source).read_all())
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive").sort_by("queue_offset")


# -- a source whose partitions differ in shape ---------------------------------------------------
PERSON = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("name", Schema.string()),
)
ORDER = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("amount", Schema.decimal(10, 2)),
    ("at", Schema.timestamp()),
)
SHAPES = {"people": PERSON, "orders": ORDER}


def shaped_row(shape: str, i: int) -> dict[str, Any]:
    """Record `i` of partition `shape`."""
    if shape == "people":
        return {"id": i, "name": f"person {i} ☃"}
    return {
        "id": i,
        "amount": Decimal(f"{i}.{i % 100:02d}"),
        "at": datetime(2024, 1, 1, 0, 0, i % 60, i, tzinfo=UTC),
    }


_SHAPED = ConfigDef(
    ConfigKey("count", type="int", default=10),
    ConfigKey("topic.prefix", default="shaped-"),
    ConfigKey("connect.topicname", default=""),
    ConfigKey("stray", type="bool", default=False, doc="own a partition no schema lists"),
)


class ShapedTask(TypedTask):
    """`count` records in each of the partitions `people` and `orders`, each to its own topic."""

    def start(self, config: Mapping[str, str]) -> None:
        keys = _SHAPED.parse(config)
        self.count, self.prefix, self.stray = keys["count"], keys["topic.prefix"], keys["stray"]

    def partitions(self) -> list[RecordPartition]:
        return [{"shape": s} for s in (*SHAPES, *(["stray"] if self.stray else []))]

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterable[ConnectRecord]:
        shape = partition["shape"]
        for i in range(start["next"] if start else 0, end["next"]):
            yield ConnectRecord(
                value=shaped_row(shape, i), topic=self.prefix + shape, offset={"next": i + 1}
            )


class ShapedSource(SourceConnector):
    """Two partitions of different value schemas (`PERSON`, `ORDER`), like two tables."""

    config_def = _SHAPED
    task_class = ShapedTask

    def value_schemas(self) -> list[tuple[RecordPartition, Schema]]:
        return [({"shape": s}, schema) for s, schema in SHAPES.items()]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]
