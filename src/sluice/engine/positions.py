"""The narrow view of the position store that the Spark adapters need."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sluice.sdk import OffsetStorageReader, RecordOffset, RecordPartition, partition_key


class PositionStore(Protocol):
    """Committed positions per connector, keyed by `partition_key(partition)`. Must pickle."""

    def load(self, connector: str) -> dict[str, RecordOffset]: ...

    def save(self, connector: str, positions: Mapping[str, RecordOffset]) -> None: ...


class StoreOffsetReader(OffsetStorageReader):
    """`OffsetStorageReader` over a `PositionStore` (what `SourceTaskContext` hands a task)."""

    def __init__(self, store: PositionStore | None, connector: str) -> None:
        self._positions = store.load(connector) if store is not None else {}

    def offset(self, partition: RecordPartition) -> RecordOffset | None:
        return self._positions.get(partition_key(partition))
