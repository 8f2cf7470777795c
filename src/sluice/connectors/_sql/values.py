"""Values: driver rows → Arrow columns (source), and JSON-able encodings of key values (positions).

A position must be a small JSON-able dict, but the values it holds (the last incrementing id, the
last timestamp, the last primary key of a bulk load) may be decimals, timestamps or bytes:
`encode` / `decode` tag those (`{"decimal": "1.50"}`, `{"bytes": "00ff"}`) and leave plain
numbers and strings as they are, so a position stays readable and editable.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sluice.connectors._sql.dialect import Mapped

_DAY_US = 86_400_000_000


def naive_utc(value: datetime) -> datetime:
    """A datetime as naive UTC wall-clock (aware values converted, naive ones kept)."""
    if value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def encode(value: Any) -> Any:
    """A JSON-able form of a key value (inverse: `decode`)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        if value == value.to_integral_value() and value.as_tuple().exponent >= 0:
            return int(value)
        return {"decimal": str(value)}
    if isinstance(value, datetime):
        return {"timestamp": naive_utc(value).isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, time):
        return {"time": value.isoformat()}
    if isinstance(value, timedelta):
        return {"time": (datetime.min + value).time().isoformat()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": bytes(value).hex()}
    return str(value)  # UUID and other text-like values


def decode(value: Any) -> Any:
    """Inverse of `encode`."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, text),) = value.items()
        if tag == "decimal":
            return Decimal(text)
        if tag == "timestamp":
            return datetime.fromisoformat(text)
        if tag == "date":
            return date.fromisoformat(text)
        if tag == "time":
            return time.fromisoformat(text)
        if tag == "bytes":
            return bytes.fromhex(text)
    return value


def _time_us(value: Any) -> int:
    """A TIME value (PostgreSQL: `time`; MySQL: `timedelta`, which can exceed a day or be
    negative) as microseconds since midnight."""
    if isinstance(value, timedelta):
        micros = value // timedelta(microseconds=1)
    elif isinstance(value, time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        micros += value.microsecond
    else:
        raise ValueError(f"expected a time, got {type(value).__name__}")
    if not 0 <= micros < _DAY_US:
        raise ValueError("is outside 00:00:00 to 23:59:59.999999 (sluice's Time is a time of day)")
    return micros


def _converted(values: Sequence[Any], conv: str) -> list[Any] | Sequence[Any]:
    if conv == "uint64":
        return [None if v is None else Decimal(v) for v in values]
    if conv == "bit1":
        return [None if v is None else int.from_bytes(v, "big") != 0 for v in values]
    if conv == "time":
        return [None if v is None else _time_us(v) for v in values]
    if conv in ("timestamp", "date"):
        for v in values:
            if v is not None and not isinstance(v, date):
                # PyMySQL hands back what it cannot parse (zero dates) as text
                raise ValueError(f"{v!r} is not a valid date/time")
    return values


def to_arrow(values: Sequence[Any], mapped: Mapped, type_: pa.DataType) -> pa.Array:
    """One column of fetched values as an Arrow array; `ValueError` names the offending value."""
    try:
        converted = _converted(values, mapped.conv)
        if mapped.conv == "time":
            return pa.array(converted, pa.int64()).cast(type_)
        return pa.array(converted, type_)
    except ValueError:
        bad = _first_bad(values, mapped, type_)
        raise ValueError(bad) from None
    except (pa.ArrowException, TypeError, OverflowError):
        raise ValueError(_first_bad(values, mapped, type_)) from None


def _first_bad(values: Sequence[Any], mapped: Mapped, type_: pa.DataType) -> str:
    for v in values:
        try:
            converted = _converted([v], mapped.conv)
            if mapped.conv == "time":
                pa.array(converted, pa.int64())
            else:
                pa.array(converted, type_)
        except (ValueError, pa.ArrowException, TypeError, OverflowError) as exc:
            return f"value {v!r} cannot be carried as {type_}: {exc}"
    return f"values cannot be carried as {type_}"
