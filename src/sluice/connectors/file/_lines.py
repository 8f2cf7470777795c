"""The file connectors' fast paths: finding line ends with `os.pread`, splitting and joining lines
in Arrow. Private: `source.py` and `sink.py` read as plain SDK code; the speed lives here.

A line is the bytes up to and excluding its `\\n`; offsets are byte offsets just *after* a `\\n`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sluice.sdk import ConnectException, ReadLimit

#: bytes read per step: big enough to amortise the Arrow calls, small enough for memory
CHUNK = 8 << 20


def range_end(path: str, pos: int, limit: ReadLimit) -> int | None:
    """The end of the next range from `pos`: just after a `\\n`, about `limit` past `pos` but at
    least one line (always progress), or None when no line is whole yet."""
    try:  # opened first, so a file that became unreadable is named here
        f = open(path, "rb")  # noqa: SIM115 - closed by the `with` below
    except OSError as exc:
        raise ConnectException(f"cannot read file {path!r}: {exc.strerror}") from exc
    with f:
        fd, size = f.fileno(), os.fstat(f.fileno()).st_size
        if size < pos:
            raise ConnectException(
                f"file {path!r} is {size} bytes, shorter than the committed position "
                f"{pos}: it was truncated or replaced",
                suggestion="reset the connector's offsets to re-read it from the start",
            )
        stop = size if limit.max_bytes is None else min(size, pos + max(1, limit.max_bytes))
        end = last_line_end(fd, pos, stop)
        if end is None and stop < size:
            end = next_line_end(fd, stop, size)  # one line longer than the limit: still progress
        if end is not None and limit.max_rows is not None:
            end = min(end, _end_after_lines(fd, pos, end, limit.max_rows))
        return end


def cuts(path: str, lo: int, hi: int, parts: int) -> list[int]:
    """Up to `parts - 1` ascending line ends strictly inside (lo, hi), spread evenly."""
    found: list[int] = []
    with open(path, "rb") as f:
        for k in range(1, parts):
            cut = next_line_end(f.fileno(), lo + (hi - lo) * k // parts, hi)
            if cut is not None and cut < hi and (not found or cut > found[-1]):
                found.append(cut)
    return found


def unreadable(path: str) -> str | None:
    """Why the source cannot read `path`, or None."""
    if not os.path.exists(path):
        return f"file {path!r} does not exist"
    if os.path.isdir(path):
        return f"{path!r} is a directory, not a file"
    if not os.access(path, os.R_OK):
        return f"file {path!r} is not readable (permission denied)"
    return None


def unwritable(path: str) -> str | None:
    """Why the sink cannot append to `path`, or None."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"directory {parent!r} does not exist"
    if os.path.isdir(path):
        return f"{path!r} is a directory, not a file"
    target = path if os.path.exists(path) else parent
    return None if os.access(target, os.W_OK) else f"{target!r} is not writable (permission denied)"


def last_line_end(fd: int, lo: int, hi: int) -> int | None:
    """Offset just after the last `\\n` in [lo, hi), or None (scans backwards)."""
    step = 1 << 16
    pos = hi
    while pos > lo:
        begin = max(lo, pos - step)
        i = os.pread(fd, pos - begin, begin).rfind(b"\n")
        if i >= 0:
            return begin + i + 1
        pos = begin
    return None


def next_line_end(fd: int, lo: int, hi: int) -> int | None:
    """Offset just after the first `\\n` in [lo, hi), or None."""
    pos = lo
    while pos < hi:
        chunk = os.pread(fd, min(CHUNK, hi - pos), pos)
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)
    return None


def _end_after_lines(fd: int, lo: int, hi: int, max_rows: int) -> int:
    """Offset just after the `max_rows`-th line starting at `lo` (or `hi` if fewer lines)."""
    pos, left = lo, max(1, max_rows)
    while pos < hi:
        chunk = os.pread(fd, min(CHUNK, hi - pos), pos)
        n = chunk.count(b"\n")
        if n < left:
            left -= n
            pos += len(chunk)
            continue
        i = -1
        for _ in range(left):
            i = chunk.index(b"\n", i + 1)
        return pos + i + 1
    return hi


def line_batches(path: str, pos: int, stop: int) -> Iterator[pa.RecordBatch]:
    """The lines of `path` in [pos, stop) as batches of one STRING `value` column; the range
    must end just after a `\\n`. A line that is not UTF-8 fails, naming its number and offset."""
    with open(path, "rb") as f:
        f.seek(pos)
        carry = b""
        while pos < stop:
            chunk = f.read(min(CHUNK, stop - pos))
            if not chunk:
                raise ConnectException(f"file {path!r} ended at byte {pos}, before {stop}")
            base = pos - len(carry)
            pos += len(chunk)
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                yield pa.RecordBatch.from_arrays([_lines(path, data[:cut], base)], ["value"])
        if carry:
            raise ConnectException(f"file {path!r}: range ends mid-line at byte {stop}")


def _lines(path: str, block: bytes, base: int) -> pa.Array:
    # One C++ split over the whole block: no Python object per line.
    parts = pc.split_pattern(pa.array([block], pa.binary()), b"\n").flatten()
    lines = parts.slice(0, len(parts) - 1)  # the block ends with \n: drop the empty tail
    try:
        return lines.cast(pa.string())
    except pa.ArrowInvalid:
        raise _utf8_error(path, block, base) from None


def _utf8_error(path: str, block: bytes, base: int) -> ConnectException:
    offset = base
    for line in block.split(b"\n"):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            break
        offset += len(line) + 1
    with open(path, "rb") as f:
        line_no = f.read(offset).count(b"\n") + 1
    return ConnectException(
        f"file {path!r}: line {line_no} (byte offset {offset}) is not valid UTF-8",
        suggestion="convert the file to UTF-8; the line was not delivered",
    )


def joined_lines(values: pa.Array) -> memoryview | None:
    """`value + "\\n"` for every row of a STRING or BINARY column (null as an empty line), as
    one buffer built in C++; None for any other type (the caller writes record by record)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(pa.binary())
    if not pa.types.is_binary(values.type):
        return None
    values = pc.fill_null(values, b"")
    lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), b"\n")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    # A freshly computed array starts at offset 0, so its bytes are data[0:total].
    total = pc.sum(pc.binary_length(lines)).as_py() or 0
    return memoryview(lines.buffers()[2])[:total] if total else memoryview(b"")


def line_bytes(value: object) -> bytes:
    """One record's line: STRING and BYTES as they are, null as empty, structs, maps and arrays
    as JSON text (`json_text`), times as ISO-8601, booleans as `true`/`false`, other scalars as
    `str()`."""
    if value is None:
        return b"\n"
    if isinstance(value, bytes):
        return value + b"\n"
    if isinstance(value, str):
        return value.encode("utf-8") + b"\n"
    return _text(value).encode("utf-8") + b"\n"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json_text(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


def json_text(value: object) -> str:
    """A struct (dict), map or array as one line of JSON, as Kafka Connect's JsonConverter would
    write it without a schema: times as ISO-8601 strings, bytes as base64, decimals as strings
    (exact, where a JSON number may not be)."""
    return json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _json_default(value: object) -> object:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return str(value)
