"""A test source whose records are sometimes wrong (Spark's Python workers import it from here).

`BadRecordSource` writes `count` records of `PERSON` (key: the INT64 id), from one task (whose
range the runtime cuts over `max.tasks` Spark partitions with `split=true`), or from `tasks` tasks
(task k writes ids k*count to (k+1)*count - 1, from its own partition). Record i's value does
not match the schema when i % 10 == 3 (`id` is text; kind "off-schema") or i % 10 == 7 (`name`,
a required field, is null; kind "null"); `kinds` picks which occur. `PickyConverter` refuses
keys that are multiples of 25.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from sluice.converters import Encoder, RecordError, StringConverter
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
    SourceConnector,
)

PERSON = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("name", Schema.string(optional=False)),
    name="com.example.Person",
)
_CONFIG = ConfigDef(
    ConfigKey("count", type="int", default=100, min=0, doc="how many records"),
    ConfigKey("kinds", type="list", default=["off-schema", "null"], doc="which bad records"),
    ConfigKey("split", type="bool", default=False, doc="let the runtime cut ranges (max.tasks)"),
    ConfigKey("tasks", type="int", default=1, min=1, doc="how many tasks"),
    ConfigKey("task.index", type="int", default=0, min=0, doc="which task this is (internal)"),
)


def value_of(i: int, kinds: tuple[str, ...] = ("off-schema", "null")) -> dict[str, object]:
    """Record i's value, as the source writes it."""
    if i % 10 == 3 and "off-schema" in kinds:
        return {"id": f"number {i}", "name": f"p{i}"}
    if i % 10 == 7 and "null" in kinds:
        return {"id": i, "name": None}
    return {"id": i, "name": f"p{i}"}


class BadRecordTask(ReplayableSourceTask):
    """Replays records [start, end) of its one partition: `{"source": "bad"}` (task k of
    several: `{"source": "bad-k"}`)."""

    def start(self, config: Mapping[str, str]) -> None:
        keys = _CONFIG.parse(config)
        self.count, self.kinds = keys["count"], tuple(keys["kinds"])
        self.cuts = keys["split"]
        index = keys["task.index"]
        self.first = index * self.count
        self.partition = {"source": "bad" if keys["tasks"] == 1 else f"bad-{index}"}

    def partitions(self) -> list[RecordPartition]:
        return [self.partition]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        return {"next": self.count}

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        lo, hi = (start["next"] if start else 0), end["next"]
        cuts = sorted({lo + (hi - lo) * k // parts for k in range(1, parts)} - {lo, hi})
        return [{"next": c} for c in cuts] if self.cuts else []

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterable[ConnectRecord]:
        for n in range(start["next"] if start else 0, end["next"]):
            i = self.first + n
            yield ConnectRecord(
                value=value_of(i, self.kinds),
                key=i,
                offset={"next": n + 1},
                extensions={"origin": "bad-source"},
            )


class BadRecordSource(SourceConnector):
    """A source of `count` records, some of them wrong (see the module docstring)."""

    config_def = _CONFIG
    task_class = BadRecordTask

    def key_schema(self) -> Schema:
        return Schema.of(FieldType.INT64)

    def value_schema(self) -> Schema:
        return PERSON

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        tasks = min(int(self.config.get("tasks", "1")), max_tasks)
        return [{**self.config, "task.index": str(k)} for k in range(tasks)]


class _PickyEncoder(Encoder):
    arrow_mode = "python"

    def arrow(self, array: pa.Array) -> pa.Array:
        out = []
        for i, v in enumerate(array.to_pylist()):
            if v is not None and v % 25 == 0:
                raise RecordError(i, f"{self.role} {v} is a multiple of 25")
            out.append(None if v is None else str(v).encode())
        return pa.array(out, pa.binary())


class PickyConverter(StringConverter):
    """Writes integers as text, but refuses multiples of 25 (a converter that can fail)."""

    def encoder(self, schema: Schema) -> Encoder:
        return _PickyEncoder(self.name, self.role, schema)
