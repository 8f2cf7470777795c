"""Helpers shared by the built-in converters. The converter contract itself (`Converter`,
`Encoder`, `Decoder`, …) is the SDK's (`sluice.sdk._converter`); it is re-exported here for the
built-in converter modules.
"""

from __future__ import annotations

import pyarrow as pa

from sluice.sdk._converter import (
    ROLES,
    Converter,
    Decoded,
    Decoder,
    DecodeSql,
    Encoder,
    RecordError,
    RegisteredSchema,
    SchemaRegistry,
    subject,
)

__all__ = [
    "ROLES",
    "Converter",
    "DecodeSql",
    "Decoded",
    "Decoder",
    "Encoder",
    "RecordError",
    "RegisteredSchema",
    "SchemaRegistry",
    "string_errors",
    "subject",
]


def string_errors(reasons: list[str | None]) -> pa.Array | None:
    """An Arrow errors column from per-record reasons (None if every record decoded)."""
    if all(r is None for r in reasons):
        return None
    return pa.array(reasons, pa.string())
