"""A transform that only works per record (loaded by class path in the tests)."""

from __future__ import annotations

from sluice.sdk import ConnectRecord, Transform


class ReverseValue(Transform):
    """Reverses string values in Python; drops values starting with "drop"."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value.startswith("drop"):
            return None
        record.value = record.value[::-1]
        record.extensions["reversed"] = "yes"
        return record
