"""Reading offset ranges of Kafka partitions straight from their leaders, decoded into Arrow
columns without a Python object per record.

librdkafka hands Python one ``Message`` object per record, which costs ~2-3 µs of CPU each;
this module asks the partition's leader itself (Fetch v11, plain TCP, ``read_committed``) and
decodes the record batches column-wise with numpy: only the walk from one record to the next is
a Python loop (a record's length is the varint at its start). It covers what sluice's bus writes
and reads: uncompressed record batches of magic 2, transactional or not. Anything else — a
compressed batch, an old message format, a listener that needs TLS or SASL — raises
:class:`Unsupported`, and the caller reads with librdkafka instead.

``read_committed``: the leader returns records up to the last stable offset and the list of
aborted transactions in the range; a batch of an aborted transaction is skipped (from the
transaction's first offset until its ABORT control record, as Kafka's own consumer does), and
control batches (the transactions' commit and abort markers) are skipped.

Wire: ``int32 size`` · request header v1 (``int16 api_key``, ``int16 api_version``, ``int32
correlation_id``, ``string client_id``) · body; response: ``int32 size`` · ``int32
correlation_id`` · body. Fetch v11 is understood by Kafka 2.3 up to 4.x (4.0 removed versions
0-3).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "FetchError",
    "Fetched",
    "LeaderFetcher",
    "Unsupported",
    "decode_records",
]

_FETCH, _FETCH_VERSION = 1, 11
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_BATCH = struct.Struct(">qiibIhiqqqhii")  # the 61-byte record batch header
_MAX_VARINT = 10


class FetchError(Exception):
    """The leader answered a fetch with Kafka error ``code`` (e.g. 1: offset out of range, 6:
    not the leader any more), or the connection failed (``code`` None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.code))


class Unsupported(Exception):
    """Data this decoder does not read (compressed or old-format batches): read it with
    librdkafka."""


@dataclass(frozen=True)
class Fetched:
    """The records of one fetch response that fall in the asked range: offset, key, value,
    timestamp (ms; null: none), headers (JSON object text or null) per record, and the offset
    to fetch next."""

    batch: pa.RecordBatch  # columns offset, key, value, timestamp_ms, headers
    next_offset: int


class _Connection:
    """One TCP connection to a broker: one request at a time (`lock`)."""

    def __init__(self, host: str, port: int, timeout_s: float, client_id: bytes) -> None:
        self.lock = threading.Lock()
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0

    def request(self, api_key: int, version: int, body: bytes) -> memoryview:
        self.correlation = (self.correlation + 1) & 0x7FFFFFFF
        head = _HEAD.pack(
            _HEAD.size - 4 + 2 + len(self.client_id) + len(body), api_key, version, self.correlation
        )
        self.sock.sendall(
            b"".join((head, struct.pack(">h", len(self.client_id)), self.client_id, body))
        )
        (size,) = struct.unpack(">i", self._read(4))
        data = self._read(size)
        (correlation,) = struct.unpack_from(">i", data)
        if correlation != self.correlation:
            raise FetchError(f"response {correlation} to request {self.correlation}")
        return memoryview(data)[4:]

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise FetchError("the broker closed the connection")
            got += k
        return buf

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class LeaderFetcher:
    """Reads ``[start, stop)`` of partitions from their leaders (see the module docstring).

    ``leader(topic, partition)`` names the leader's ``(host, port)`` (from the cluster's
    metadata); ``forget(topic, partition)`` is called when the leader moved, so the next call
    asks for fresh metadata. Connections are kept per process and broker."""

    def __init__(
        self,
        leader: Callable[[str, int], tuple[str, int]],
        forget: Callable[[str, int], None],
        *,
        timeout_s: float = 30.0,
        max_bytes: int = 8 << 20,
        max_wait_ms: int = 100,
        client_id: str = "sluice",
    ) -> None:
        self.leader, self.forget = leader, forget
        self.timeout_s, self.max_bytes, self.max_wait_ms = timeout_s, max_bytes, max_wait_ms
        self.client_id = client_id.encode()
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()

    def _connection(self, address: tuple[str, int]) -> tuple[_Connection, bool]:
        """The kept connection to ``address`` (and True), or a new one (and False)."""
        with self._lock:
            conn = self._connections.get(address)
            if conn is not None:
                return conn, True
            try:
                conn = _Connection(*address, self.timeout_s, self.client_id)
            except OSError as exc:
                raise FetchError(f"cannot connect to {address[0]}:{address[1]}: {exc}") from None
            self._connections[address] = conn
            return conn, False

    def _drop(self, address: tuple[str, int], conn: _Connection) -> None:
        with self._lock:
            if self._connections.get(address) is conn:  # not one another thread made since
                del self._connections[address]
        conn.close()

    def fetch(self, topic: str, partition: int, offset: int) -> tuple[memoryview, list[Any]]:
        """One Fetch (read_committed) at ``offset``: the records bytes and the aborted
        transactions ``[(producer_id, first_offset)]``. Raises `FetchError`."""
        address = self.leader(topic, partition)
        name = topic.encode()
        body = b"".join(
            (
                struct.pack(">iiiibii", -1, self.max_wait_ms, 1, self.max_bytes, 1, 0, -1),
                struct.pack(">ih", 1, len(name)),
                name,
                struct.pack(">iiiqqi", 1, partition, -1, offset, -1, self.max_bytes),
                struct.pack(">ih", 0, 0),  # no forgotten topics, rack ""
            )
        )
        while True:
            conn, kept = self._connection(address)
            try:
                with conn.lock:
                    data = conn.request(_FETCH, _FETCH_VERSION, body)
                break
            except (OSError, FetchError) as exc:
                self._drop(address, conn)
                # A kept connection may have been closed by the broker meanwhile (idle for
                # connections.max.idle.ms, or the broker restarted): a fetch only reads, so it
                # is asked again once on a new connection before the broker counts as away.
                if not kept:
                    raise FetchError(f"fetch from {address[0]}:{address[1]}: {exc}") from None
        return _parse_fetch(data, topic, partition, self.forget)

    def read(self, topic: str, partition: int, start: int, stop: int) -> Iterator[Fetched]:
        """The records with ``start <= offset < stop`` (up to the last stable offset), as
        `Fetched` chunks in offset order. Empty fetches are the caller's to bound (the range
        was planned below the last stable offset, so records come)."""
        pos = start
        while pos < stop:
            records, aborted = self.fetch(topic, partition, pos)
            got = decode_records(records, pos, stop, aborted)
            if got is None:
                return  # nothing at all: let the caller decide (it times out or retries)
            yield got
            pos = got.next_offset


def _parse_fetch(
    data: memoryview, topic: str, partition: int, forget: Callable[[str, int], None]
) -> tuple[memoryview, list[Any]]:
    """The records and aborted transactions of one partition's Fetch v11 response."""
    pos = 4  # throttle_time_ms
    (error,) = struct.unpack_from(">h", data, pos)
    pos += 2 + 4  # error_code, session_id
    if error:
        raise FetchError(f"fetch of {topic}/{partition}: error {error}", error)
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", data, pos)
        pos += 2 + length
        (partitions,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(partitions):
            index, error, _high, _stable, _first = struct.unpack_from(">ihqqq", data, pos)
            pos += 30
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            aborted = []
            for _ in range(max(count, 0)):
                aborted.append(struct.unpack_from(">qq", data, pos))
                pos += 16
            pos += 4  # preferred_read_replica
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            records = data[pos : pos + max(size, 0)]
            pos += max(size, 0)
            if index != partition:
                continue
            if error:
                if error in (3, 5, 6, 74, 76):  # unknown partition, leader moved, stale epochs
                    forget(topic, partition)
                raise FetchError(f"fetch of {topic}/{partition}: error {error}", error)
            return records, aborted
    raise FetchError(f"fetch of {topic}/{partition}: the response has no such partition")


def decode_records(
    records: memoryview | bytes,
    start: int,
    stop: int,
    aborted: list[Any],
    *,
    drop_header: str | None = None,
) -> Fetched | None:
    """The records of ``start <= offset < stop`` in a fetched record set (read_committed:
    ``aborted`` transactions and control batches skipped), or None when the set holds no
    complete batch. A truncated last batch (the fetch's size limit cut it) is left for the next
    fetch. Headers named ``drop_header`` are left out of the headers' text."""
    data = bytes(records)
    n = len(data)
    # aborted transactions by first offset, activated as batches reach them (Kafka's consumer)
    pending = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    chunks: list[tuple[int, int, int, int, int, int]] = []  # (records at, count, base, ts, type)
    pos, next_offset, complete = 0, start, False
    while pos + _BATCH.size <= n:
        (base, length, _epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
         count) = _BATCH.unpack_from(data, pos)  # fmt: skip
        end = pos + 12 + length
        if magic != 2:
            raise Unsupported(f"record batch of magic {magic} at offset {base}")
        if end > n:
            break  # truncated by the fetch's size limit
        complete = True
        last = base + last_delta
        transactional, control = bool(attrs & 0x10), bool(attrs & 0x20)
        while pending and pending[0][1] <= last:
            active.add(pending.pop(0)[0])
        if control:
            if transactional and pid in active and _control_type(data, pos + _BATCH.size) == 0:
                active.discard(pid)  # the ABORT marker ends the aborted transaction
        elif last >= start and base < stop and not (transactional and pid in active):
            if attrs & 0x07:
                raise Unsupported(f"compressed record batch at offset {base}")
            stamp = max_ts if attrs & 0x08 else base_ts  # LogAppendTime: the broker's, for all
            chunks.append((pos + _BATCH.size, count, base, stamp, 1 if attrs & 0x08 else 0, end))
        next_offset = max(next_offset, last + 1)
        pos = end
        if last + 1 >= stop:
            break
    if not complete:
        return None
    columns = _decode_chunks(data, chunks, start, stop, drop_header)
    return Fetched(columns, min(next_offset, stop))


def _control_type(data: bytes, pos: int) -> int:
    """The type of a control batch's first record (0: ABORT, 1: COMMIT): its key is ``int16
    version, int16 type``."""
    buf = np.frombuffer(data + bytes(_MAX_VARINT), np.uint8)
    at = np.array([pos], np.int64)
    _, size = _varints(buf, at)  # the record's length
    at = at + size + 1  # past the attributes byte
    for _ in range(3):  # timestamp delta, offset delta, key length
        _, size = _varints(buf, at)
        at = at + size
    key = int(at[0])
    return int.from_bytes(data[key + 2 : key + 4], "big")


def _walk(data: bytes, pos: int, count: int) -> list[int]:
    """Where each of a batch's ``count`` records starts (its length varint): the one loop."""
    starts = [0] * count
    for i in range(count):
        starts[i] = pos
        b = data[pos]
        if b < 0x80:
            pos += 1 + (b >> 1)
            continue
        b2 = data[pos + 1]
        if b2 < 0x80:
            pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            continue
        value, shift, p = b & 0x7F, 7, pos + 1
        while True:
            b = data[p]
            p += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        pos = p + (value >> 1)
    return starts


def _varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints starting at each position of ``at`` (``buf`` padded by
    `_MAX_VARINT` bytes): values (int64) and sizes in bytes. One pass over ``at`` per byte of
    the longest varint (most are one or two bytes)."""
    byte = buf[at]
    value = (byte & 0x7F).astype(np.int64)
    size = np.ones(len(at), np.int64)
    more = byte >= 0x80
    shift = 7
    while more.any():
        idx = np.flatnonzero(more)
        byte = buf[at[idx] + size[idx]]
        value[idx] |= (byte & 0x7F).astype(np.int64) << shift
        size[idx] += 1
        more[idx] = byte >= 0x80
        shift += 7
        if shift > 7 * _MAX_VARINT:
            raise ValueError("a varint longer than 10 bytes")
    return (value >> 1) ^ -(value & 1), size


def _gather(buf: np.ndarray, at: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``buf[at[i] : at[i] + lengths[i]]`` (null where the length is -1)."""
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        index = np.repeat(at - offsets[:-1], sizes) + np.arange(total)
        values = buf[index]
    else:
        values = np.zeros(0, np.uint8)
    mask = None if valid.all() else pa.array(valid).buffers()[1]
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        len(sizes),
        [mask, pa.py_buffer(offsets), pa.py_buffer(values)],
        null_count=int((~valid).sum()),
    ).cast(pa.binary())


_EMPTY = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp_ms", pa.int64()),
        pa.field("headers", pa.string()),
    ]
)


def _decode_chunks(
    data: bytes,
    chunks: list[tuple[int, int, int, int, int, int]],
    start: int,
    stop: int,
    drop_header: str | None,
) -> pa.RecordBatch:
    if not chunks:
        return pa.RecordBatch.from_pylist([], schema=_EMPTY)
    starts: list[int] = []
    bases, stamps, appended = [], [], []
    for at, count, base, stamp, log_append, _end in chunks:
        starts.extend(_walk(data, at, count))
        bases.append(np.full(count, base, np.int64))
        stamps.append(np.full(count, stamp, np.int64))
        appended.append(np.full(count, log_append, np.bool_))
    buf = np.frombuffer(data + bytes(_MAX_VARINT), np.uint8)
    at = np.asarray(starts, np.int64)
    _, size = _varints(buf, at)  # the record's length
    at = at + size + 1  # past the attributes byte
    ts_delta, size = _varints(buf, at)
    at = at + size
    off_delta, size = _varints(buf, at)
    at = at + size
    key_len, size = _varints(buf, at)
    key_at = at + size
    at = key_at + np.maximum(key_len, 0)
    value_len, size = _varints(buf, at)
    value_at = at + size
    at = value_at + np.maximum(value_len, 0)
    header_count, size = _varints(buf, at)
    headers_at = at + size
    offsets = np.concatenate(bases) + off_delta
    log_append = np.concatenate(appended)
    millis = np.concatenate(stamps) + np.where(log_append, 0, ts_delta)
    keep = (offsets >= start) & (offsets < stop)
    headers: pa.Array = pa.nulls(len(offsets), pa.string())
    if header_count.any():
        headers = pa.array(
            [
                _headers(data, int(h), int(c), drop_header) if c else None
                for h, c in zip(headers_at, header_count, strict=True)
            ],
            pa.string(),
        )
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            _gather(buf, key_at, key_len),
            _gather(buf, value_at, value_len),
            pa.array(millis, pa.int64()),
            headers,
        ],
        schema=_EMPTY,
    )
    return batch if keep.all() else batch.filter(pa.array(keep))


def _headers(data: bytes, pos: int, count: int, drop: str | None) -> str | None:
    """A record's headers as the text of a JSON object (values UTF-8, replaced if not), without
    the one named ``drop``; None when none is left."""
    import json

    def varint(p: int) -> tuple[int, int]:
        value, shift = 0, 0
        while True:
            b = data[p]
            p += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return (value >> 1) ^ -(value & 1), p
            shift += 7

    out: dict[str, str | None] = {}
    for _ in range(count):
        n, pos = varint(pos)
        name = data[pos : pos + n].decode("utf-8", "replace")
        pos += n
        n, pos = varint(pos)
        if n < 0:
            out[name] = None
        else:
            out[name] = data[pos : pos + n].decode("utf-8", "replace")
            pos += n
    out.pop(drop, None)  # type: ignore[arg-type]
    return json.dumps(out, sort_keys=True) if out else None
