"""A Python streaming data source of ten rows per micro-batch, read by the class-archive builder
(`sluice.engine.class_archive`) so that the JVM loads the classes of Spark's Python planner and
Python reader before it writes its archive."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class WarmSource(DataSource):
    """Rows `(id: long)`, ten per micro-batch, for as long as the query runs."""

    @classmethod
    def name(cls) -> str:
        return "sluice_class_archive_warm"

    def schema(self) -> str:
        return "id long"

    def streamReader(self, schema) -> DataSourceStreamReader:  # type: ignore[no-untyped-def]
        return _Reader()


class _Reader(DataSourceStreamReader):
    def __init__(self) -> None:
        self.end = 0

    def initialOffset(self) -> dict:
        return {"end": 0}

    def latestOffset(self) -> dict:
        self.end += 10
        return {"end": self.end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((start["end"], end["end"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        first, last = partition.value
        for i in range(first, last):
            yield (i,)

    def commit(self, end: dict) -> None:
        pass
