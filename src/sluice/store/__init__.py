"""Stores of the control plane: positions, configs, statuses, counters, schemas, membership;
`prepare_store_root` readies (and checks) a worker's store root."""

from sluice.store._sqlite_file import prepare_store_root
from sluice.store.positions import SqlitePositionStore

__all__ = ["SqlitePositionStore", "prepare_store_root"]
