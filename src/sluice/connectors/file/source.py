"""FileSourceConnector: follows a text file like `tail -f`; each line is one STRING record.

Delivery: exactly-once. Unit of parallelism: one file, so one task whatever `max.tasks` says.
Position: `{"filename": <path>}` → `{"position": <byte offset just after the line's \\n>}`.
A last line without its `\\n` is not read until the newline arrives (it may still be being written).
A line that is not valid UTF-8 fails the task with its line number and byte offset; it is never
dropped. A file that shrinks below the committed position (truncated or replaced) fails the task:
the runtime cannot tell which bytes were already delivered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from sluice.sdk import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConnectException,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    SourceConnector,
)

_CHUNK = (
    8 << 20
)  # bytes read per step; big enough to amortise the Arrow calls, small enough for memory

CONFIG = ConfigDef(
    ConfigKey("filename", type="path", doc="path of the file to read"),
    ConfigKey("connect.topicname", doc="topic the lines are written to"),
)


def _check_readable(path: str) -> None:
    if not os.path.exists(path):
        raise ConfigException("filename", f"file {path!r} does not exist")
    if os.path.isdir(path):
        raise ConfigException("filename", f"{path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise ConfigException("filename", f"file {path!r} is not readable (permission denied)")


class FileSourceTask(ReplayableSourceTask):
    """Reads byte ranges of the file that end on a line boundary."""

    def start(self, config: Mapping[str, str]) -> None:
        self.path = CONFIG.parse(config)["filename"]

    def partitions(self) -> list[RecordPartition]:
        return [{"filename": self.path}]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        pos = int(start["position"]) if start else 0
        try:
            # opened before the size is trusted: a file that became unreadable (EACCES) is named
            # here, not left to a bare PermissionError further down
            f = open(self.path, "rb")  # noqa: SIM115 - closed by the `with` below
        except OSError as exc:
            raise ConnectException(f"cannot read file {self.path!r}: {exc.strerror}") from exc
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < pos:
                raise ConnectException(
                    f"file {self.path!r} is {size} bytes, shorter than the committed position "
                    f"{pos}: it was truncated or replaced",
                    suggestion="reset the connector's offsets to re-read it from the start",
                )
            fd = f.fileno()
            stop = size if limit.max_bytes is None else min(size, pos + max(1, limit.max_bytes))
            end = _last_line_end(fd, pos, stop)
            if end is None and stop < size:
                end = _next_line_end(
                    fd, stop, size
                )  # one line longer than the limit: still progress
            if end is not None and limit.max_rows is not None:
                end = min(end, _end_after_lines(fd, pos, end, limit.max_rows))
        if end is None or end == pos:
            return start
        return {"position": end}

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        pos = int(start["position"]) if start else 0
        stop = int(end["position"])
        with open(self.path, "rb") as f:
            f.seek(pos)
            carry = b""
            while pos < stop:
                chunk = f.read(min(_CHUNK, stop - pos))
                if not chunk:
                    raise ConnectException(f"file {self.path!r} ended at byte {pos}, before {stop}")
                base = pos - len(carry)
                pos += len(chunk)
                data = carry + chunk if carry else chunk
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                if cut:
                    yield pa.RecordBatch.from_arrays([self._lines(data[:cut], base)], ["value"])
            if carry:
                raise ConnectException(f"file {self.path!r}: range ends mid-line at byte {stop}")

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        lo, hi = (int(start["position"]) if start else 0), int(end["position"])
        cuts: list[RecordOffset] = []
        with open(self.path, "rb") as f:
            for k in range(1, parts):
                cut = _next_line_end(f.fileno(), lo + (hi - lo) * k // parts, hi)
                if cut is not None and cut < hi and (not cuts or cut > cuts[-1]["position"]):
                    cuts.append({"position": cut})
        return cuts

    lag_unit = "bytes"

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Bytes of the file after the committed position (a partial last line included)."""
        try:
            size = os.stat(self.path).st_size
        except OSError:  # gone or unreadable: the task names that when it reads
            return None
        return max(0, size - (int(position["position"]) if position else 0))

    def _lines(self, block: bytes, base: int) -> pa.Array:
        # One C++ split over the whole block: no Python object per line.
        parts = pc.split_pattern(pa.array([block], pa.binary()), b"\n").flatten()
        lines = parts.slice(0, len(parts) - 1)  # the block ends with \n: drop the empty tail
        try:
            return lines.cast(pa.string())
        except pa.ArrowInvalid:
            raise self._utf8_error(block, base) from None

    def _utf8_error(self, block: bytes, base: int) -> ConnectException:
        offset = base
        for line in block.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                break
            offset += len(line) + 1
        with open(self.path, "rb") as f:
            line_no = f.read(offset).count(b"\n") + 1
        return ConnectException(
            f"file {self.path!r}: line {line_no} (byte offset {offset}) is not valid UTF-8",
            suggestion="convert the file to UTF-8; the line was not delivered",
        )


class FileSourceConnector(SourceConnector):
    """Streams the lines of one file into a topic, following appends."""

    config_def = CONFIG
    task_class = FileSourceTask
    delivery = "exactly-once"
    # Kafka's FileStreamSourceConnector names its keys `file` and `topic`
    key_aliases = {"file": "filename", "topic": "connect.topicname"}

    def validate(self, config: Mapping[str, str]) -> None:
        path = CONFIG.parse(config)["filename"]
        _check_readable(path)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]

    def default_read_limit(self) -> ReadLimit:
        # Bytes, not rows: finding the end of N rows means reading them on the driver first.
        return ReadLimit(max_bytes=64 << 20)


def _last_line_end(fd: int, lo: int, hi: int) -> int | None:
    """Offset just after the last `\\n` in [lo, hi), or None."""
    step = 1 << 16
    pos = hi
    while pos > lo:
        begin = max(lo, pos - step)
        i = os.pread(fd, pos - begin, begin).rfind(b"\n")
        if i >= 0:
            return begin + i + 1
        pos = begin
    return None


def _next_line_end(fd: int, lo: int, hi: int) -> int | None:
    """Offset just after the first `\\n` in [lo, hi), or None."""
    pos = lo
    while pos < hi:
        chunk = os.pread(fd, min(_CHUNK, hi - pos), pos)
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)
    return None


def _end_after_lines(fd: int, lo: int, hi: int, max_rows: int) -> int:
    """Offset just after the `max_rows`-th line starting at `lo` (or `hi` if fewer lines)."""
    pos, left = lo, max(1, max_rows)
    while pos < hi:
        chunk = os.pread(fd, min(_CHUNK, hi - pos), pos)
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
