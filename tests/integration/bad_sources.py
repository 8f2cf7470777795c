"""A test source whose records are sometimes wrong (Spark's Python workers import it from here).

`BadRecordSource` writes `count` records of `PERSON` (key: the INT64 id). Record i's value does
not match the schema when i % 10 == 3 (`id` is text) and misses a required field when
i % 10 == 7 and `nulls=true` (`name` is null: the converter cannot encode it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
    ConfigKey("nulls", type="bool", default=True, doc="records with a null required field"),
)


def value_of(i: int, nulls: bool = True) -> dict[str, object]:
    """Record i's value, as the source writes it."""
    if i % 10 == 3:
        return {"id": f"number {i}", "name": f"p{i}"}
    if i % 10 == 7 and nulls:
        return {"id": i, "name": None}
    return {"id": i, "name": f"p{i}"}


class BadRecordTask(ReplayableSourceTask):
    """Replays records [start, end) of the one partition `{"source": "bad"}`."""

    def start(self, config: Mapping[str, str]) -> None:
        keys = _CONFIG.parse(config)
        self.count, self.nulls = keys["count"], keys["nulls"]

    def partitions(self) -> list[RecordPartition]:
        return [{"source": "bad"}]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        return {"next": self.count}

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterable[ConnectRecord]:
        for i in range(start["next"] if start else 0, end["next"]):
            yield ConnectRecord(
                value=value_of(i, self.nulls),
                key=i,
                offset={"next": i + 1},
                extensions={"origin": "bad-source"},
            )


class BadRecordSource(SourceConnector):
    """A source of `count` records, some of them wrong (see the module docstring)."""

    config_def = _CONFIG
    task_class = BadRecordTask
    delivery = "exactly-once"

    def key_schema(self) -> Schema:
        return Schema.of(FieldType.INT64)

    def value_schema(self) -> Schema:
        return PERSON

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]
