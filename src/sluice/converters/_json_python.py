"""JsonConverter's Python pieces: parsing JSON text and the per-record readers and writers of
leaf values, used by the rows of `sluice.converters._json_table`."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

# Spellings of non-finite numbers Spark's JSON reader accepts; its writer uses the first three.
_NON_FINITE = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
    "+Infinity": math.inf,
    "+INF": math.inf,
    "-INF": -math.inf,
    "INF": math.inf,
}
# Marks a NUMERIC decimal's text inside `json.dumps` output so it can be unquoted afterwards. A
# lone surrogate cannot occur in real text (Arrow strings are valid UTF-8).
RAW = "\ud800"
RAW_RE = re.compile('"' + RAW + '([^"]*)"')


class Bad(ValueError):
    """A value that does not fit its schema (message: where and why)."""


def required(where: str) -> str:
    """The message for a null where the schema is not optional."""
    return f"{where} is null, but its schema is not optional"


def same(v: Any) -> Any:
    """A value JSON carries as it is."""
    return v


def millis_out(v: int) -> int:
    """Microseconds (Time, Timestamp) as Kafka's milliseconds, rounding down."""
    return v // 1000


def base64_out(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")


def decimal_out(scale: int, numeric: bool) -> Callable[[Decimal], str]:
    """A decimal as a JSON number (marked raw, see `RAW`) or Kafka's base64 unscaled bytes."""
    if numeric:
        return lambda v: RAW + format(v, "f")
    return lambda v: base64_out(unscaled_bytes(v, scale))


def boolean_reader(where: str) -> Callable[[Any], bool]:
    def read(v: Any) -> bool:
        if type(v) is not bool:
            raise Bad(f"{where}: expected a boolean, got {kind(v)}")
        return v

    return read


def bytes_reader(where: str) -> Callable[[Any], bytes]:
    def read(v: Any) -> bytes:
        if not isinstance(v, str):
            raise Bad(f"{where}: expected base64 text, got {kind(v)}")
        return b64decode(v, where)

    return read


def scaled(read: Callable[[Any], int], factor: int) -> Callable[[Any], int]:
    """``read``'s whole milliseconds as microseconds."""
    return lambda v: read(v) * factor


def float_out(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def unscaled_bytes(value: Decimal, scale: int) -> bytes:
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (int(exponent) + scale)
    if sign:
        unscaled = -unscaled
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return unscaled.to_bytes(length, "big", signed=True)


_READER = json.JSONDecoder(parse_float=Decimal)


def parse(raw: bytes, role: str, *, trailing: bool = False) -> Any:
    """Parse JSON bytes; `trailing` ignores text after the first value (as Spark's and Kafka's
    readers do for an envelope)."""
    try:
        # Decode first: given bytes, json.loads would also guess UTF-16 and UTF-32.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Bad(f"{role} is not valid UTF-8: {exc}") from None
    try:
        if trailing:
            return _READER.raw_decode(text.lstrip(" \t\n\r"))[0]
        return _READER.decode(text)
    except ValueError as exc:
        raise Bad(f"{role} is not valid JSON: {exc}") from None


def kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | Decimal | float):
        return f"the number {v}"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def int_reader(where: str, what: str, low: int, high: int) -> Callable[[Any], int]:
    def read(v: Any) -> int:
        if type(v) is not int:
            raise Bad(f"{where}: expected {what}, got {kind(v)}")
        if not low <= v <= high:
            raise Bad(f"{where}: {v} is out of range for {what}")
        return v

    return read


def float_reader(where: str) -> Callable[[Any], float]:
    def read(v: Any) -> float:
        if isinstance(v, str) and v in _NON_FINITE:
            return _NON_FINITE[v]
        if type(v) is bool or not isinstance(v, int | float | Decimal):
            raise Bad(f"{where}: expected a number, got {kind(v)}")
        return float(v)

    return read


def string_reader(v: Any) -> str:
    if isinstance(v, str):
        return v
    # Spark's JSON reader gives a non-string value's JSON text for a STRING field: so do we.
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str)


def b64decode(text: str, where: str) -> bytes:
    try:
        # Spark accepts base64 without its padding: so do we.
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise Bad(f"{where} is not valid base64") from None


def decimal_reader(
    where: str, precision: int, scale: int, numeric: bool
) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def fits(d: Decimal) -> Decimal:
        if len(d.as_tuple().digits) > precision and d != 0:
            raise Bad(f"{where}: {d} does not fit decimal({precision},{scale})")
        return d

    def from_number(v: Any) -> Decimal:
        if type(v) is bool or not isinstance(v, int | Decimal | str | float):
            raise Bad(f"{where}: expected a decimal number, got {kind(v)}")
        try:
            with localcontext() as ctx:
                ctx.prec = 80
                d = Decimal(v) if not isinstance(v, float) else Decimal(repr(v))
                if not d.is_finite():
                    raise InvalidOperation
                return fits(d.quantize(quantum, rounding=ROUND_HALF_UP))
        except InvalidOperation:
            raise Bad(f"{where}: {v!r} is not a decimal number") from None

    def from_base64(v: Any) -> Decimal:
        if not isinstance(v, str):
            raise Bad(f"{where}: expected base64 decimal bytes, got {kind(v)}")
        raw = b64decode(v, where)
        if not 1 <= len(raw) <= 16:
            raise Bad(f"{where}: {len(raw)} bytes do not fit decimal({precision},{scale})")
        unscaled = int.from_bytes(raw, "big", signed=True)
        return fits(decimal_of(unscaled, scale))

    return from_number if numeric else from_base64


def decimal_of(unscaled: int, scale: int) -> Decimal:
    """The exact Decimal `unscaled * 10**-scale` (no context rounding)."""
    return Decimal((1 if unscaled < 0 else 0, tuple(int(c) for c in str(abs(unscaled))), -scale))
