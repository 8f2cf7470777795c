"""Stores of the control plane: positions (more to come: configs, statuses, membership)."""

from sluice.store.positions import SqlitePositionStore

__all__ = ["SqlitePositionStore"]
