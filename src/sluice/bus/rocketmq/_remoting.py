"""A small client of RocketMQ's remoting protocol (4.x): just what the bus needs.

Frame: ``int32 length`` (of what follows) · ``int32`` (serialisation type in the high byte, 0 =
JSON; header length in the low three bytes) · JSON header · body. The header is
``{"code", "language", "version", "opaque", "flag", "remark", "extFields"}``; ``flag`` bit 0 marks a
response, which carries the ``opaque`` of its request. Requests used here (``RequestCode``):

=====================================  ====  ==================================================
GET_ROUTEINFO_BY_TOPIC                 105   name server: brokers and queue counts of a topic
GET_BROKER_CLUSTER_INFO                106   name server: clusters and their brokers
GET_ALL_TOPIC_LIST_FROM_NAMESERVER     206   name server: every topic name
UPDATE_AND_CREATE_TOPIC                 17   broker: create a topic with N queues
GET_ALL_TOPIC_CONFIG                    21   broker: its topics (is a topic just unrouted?)
DELETE_TOPIC_IN_BROKER/_IN_NAMESRV  215/216  delete a topic
GET_MAX_OFFSET / GET_MIN_OFFSET       30/31  broker: a queue's offset range
SEND_BATCH_MESSAGE                     320   broker: append messages to one chosen queue
PULL_MESSAGE                            11   broker: messages of a queue from an exact offset
UPDATE/QUERY_CONSUMER_OFFSET         15/14   broker: a consumer group's committed offset
=====================================  ====  ==================================================

Why not the ``rocketmq`` PyPI client (rocketmq-client-cpp through ctypes)? Its C API sends one
message per round trip when the queue is chosen (``send_orderly``: ~1,800 msg/s here), cannot
choose the queue of a batch, has no admin or consumer-offset calls, and returns message bodies as
NUL-terminated C strings, which truncates binary values. The tests use it as an independent
reference client.

Connections are per process and address, pooled (one request at a time per connection, several
requests may be pipelined on one by `Connection.pipeline`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# request codes
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
UPDATE_AND_CREATE_TOPIC = 17
GET_ALL_TOPIC_CONFIG = 21
DELETE_TOPIC_IN_BROKER = 215
DELETE_TOPIC_IN_NAMESRV = 216
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
SEND_BATCH_MESSAGE = 320
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
GET_BROKER_RUNTIME_INFO = 28

# response codes
SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
FLUSH_DISK_TIMEOUT = 10
SLAVE_NOT_AVAILABLE = 11
FLUSH_SLAVE_TIMEOUT = 12
SERVICE_NOT_AVAILABLE = 14
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22

#: Requests that may be sent twice without changing the outcome.
_REPEATABLE = frozenset(
    {
        GET_ROUTEINFO_BY_TOPIC,
        GET_BROKER_CLUSTER_INFO,
        GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        GET_ALL_TOPIC_CONFIG,
        GET_MAX_OFFSET,
        GET_MIN_OFFSET,
        PULL_MESSAGE,
        QUERY_CONSUMER_OFFSET,
        UPDATE_CONSUMER_OFFSET,
        GET_BROKER_RUNTIME_INFO,
    }
)

#: Response codes after which doing the same again later may work.
TRANSIENT_CODES = {SYSTEM_BUSY, SERVICE_NOT_AVAILABLE}
#: A send answered with these was stored on the master (only flushing/replication lagged).
STORED_CODES = {SUCCESS, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT}

_VERSION = 401  # MQVersion ordinal the requests claim (V4_9_4)
_OPAQUE = itertools.count(1)
_HEADER = struct.Struct(">ii")
_NAME_VALUE, _PROPERTY = "\x01", "\x02"
# fastjson writes maps with integer keys unquoted ({0:"127.0.0.1:10911"}): quote them for json.
_BARE_INT_KEY = re.compile(r"([{,])(-?\d+):")

# message sys flags
COMPRESSED_FLAG = 0x1
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOST_V6_FLAG = 0x1 << 5


class RemotingError(Exception):
    """A transport failure (refused, reset, timed out): the peer may be down."""


@dataclass
class Response:
    """A decoded response: code, remark, response header fields and body."""

    code: int
    remark: str
    ext: dict[str, str]
    body: bytes

    def field(self, name: str) -> str:
        return self.ext.get(name, "")


@dataclass
class _Request:
    code: int
    ext: Mapping[str, Any]
    body: bytes = b""
    opaque: int = field(default_factory=lambda: next(_OPAQUE) & 0x7FFFFFFF)

    def encode(self) -> bytes:
        header = json.dumps(
            {
                "code": self.code,
                "language": "PYTHON",
                "version": _VERSION,
                "opaque": self.opaque,
                "flag": 0,
                "extFields": {k: str(v) for k, v in self.ext.items() if v is not None},
            },
            separators=(",", ":"),
        ).encode()
        return _HEADER.pack(4 + len(header) + len(self.body), len(header)) + header + self.body


def loads_lenient(data: bytes) -> Any:
    """JSON from the Java side (fastjson may leave integer map keys unquoted)."""
    text = data.decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2":', text))


class Connection:
    """One TCP connection to a name server or broker; used by one thread at a time."""

    def __init__(self, address: str, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.timeout_s = timeout_s
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as exc:
            raise RemotingError(f"cannot connect to {address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.broken = False

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise RemotingError(f"{self.address} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read(self) -> tuple[dict[str, Any], bytes]:
        length, header_word = _HEADER.unpack(self._recv_exact(8))
        header_len = header_word & 0xFFFFFF
        if header_word >> 24 != 0:
            raise RemotingError(f"{self.address}: unsupported serialisation {header_word >> 24}")
        header = json.loads(self._recv_exact(header_len))
        body = self._recv_exact(length - 4 - header_len)
        return header, body

    def pipeline(self, requests: Sequence[_Request]) -> list[Response]:
        """Send every request, then read their responses (returned in request order)."""
        try:
            self.sock.sendall(b"".join(r.encode() for r in requests))
            wanted = {r.opaque: i for i, r in enumerate(requests)}
            out: list[Response | None] = [None] * len(requests)
            left = len(requests)
            while left:
                header, body = self._read()
                if not header.get("flag", 0) & 1:
                    continue  # a request from the server (we registered nothing): ignore
                index = wanted.get(header.get("opaque"))
                if index is None:
                    continue  # the answer to a request an earlier caller gave up on
                out[index] = Response(
                    int(header.get("code", SYSTEM_ERROR)),
                    header.get("remark") or "",
                    {k: str(v) for k, v in (header.get("extFields") or {}).items()},
                    body,
                )
                left -= 1
        except (OSError, ValueError) as exc:
            self.close()
            if isinstance(exc, RemotingError):
                raise
            raise RemotingError(f"{self.address}: {exc}") from None
        except RemotingError:
            self.close()
            raise
        return [r for r in out if r is not None]


class Pool:
    """Idle connections per address, for one process (a fork starts with an empty pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[Connection]] = {}
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._idle, self._pid = {}, os.getpid()

    def invoke(
        self,
        address: str,
        code: int,
        ext: Mapping[str, Any],
        body: bytes = b"",
        *,
        timeout_s: float,
    ) -> Response:
        return self.invoke_many(address, [(code, ext, body)], timeout_s=timeout_s)[0]

    def invoke_many(
        self,
        address: str,
        requests: Sequence[tuple[int, Mapping[str, Any], bytes]],
        *,
        timeout_s: float,
    ) -> list[Response]:
        """Pipeline ``requests`` on one connection to ``address``; responses in order.

        A pooled connection may have gone stale (the peer restarted): requests that are safe to
        repeat are then sent once more on a fresh connection. A send is not repeated here — its
        commit counts what arrived before it sends again (see `sluice.bus._external`)."""
        conn, reused = self._acquire(address, timeout_s)
        try:
            return conn.pipeline([_Request(code, ext, body) for code, ext, body in requests])
        except RemotingError:
            if not reused or any(code not in _REPEATABLE for code, _, _ in requests):
                raise
        finally:
            self._release(conn)
        conn = Connection(address, timeout_s)
        try:
            return conn.pipeline([_Request(code, ext, body) for code, ext, body in requests])
        finally:
            self._release(conn)

    def _acquire(self, address: str, timeout_s: float) -> tuple[Connection, bool]:
        with self._lock:
            self._check_fork()
            idle = self._idle.get(address)
            if idle:
                conn = idle.pop()
                conn.sock.settimeout(timeout_s)
                return conn, True
        return Connection(address, timeout_s), False

    def _release(self, conn: Connection) -> None:
        if conn.broken:
            return
        with self._lock:
            self._check_fork()
            self._idle.setdefault(conn.address, []).append(conn)

    def close(self, address: str | None = None) -> None:
        with self._lock:
            addresses = [address] if address else list(self._idle)
            for addr in addresses:
                for conn in self._idle.pop(addr, []):
                    conn.close()


POOL = Pool()


# ------------------------------------------------------------------------------------ messages
def encode_properties(props: Mapping[str, str]) -> bytes:
    return "".join(f"{k}{_NAME_VALUE}{v}{_PROPERTY}" for k, v in props.items()).encode("utf-8")


def decode_properties(data: bytes) -> dict[str, str]:
    out = {}
    for item in data.decode("utf-8", "replace").split(_PROPERTY):
        name, sep, value = item.partition(_NAME_VALUE)
        if sep and name:
            out[name] = value
    return out


BATCH_ITEM = struct.Struct(">iiiii")  # total size, magic (0), body CRC (0), flag, body length
UNSIGNED_SHORT = struct.Struct(">H")


def encode_batch_item(body: bytes, properties: bytes) -> bytes:
    """One message of a SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessage's layout)."""
    size = BATCH_ITEM.size + len(body) + 2 + len(properties)
    return b"".join(
        (
            BATCH_ITEM.pack(size, 0, 0, 0, len(body)),
            body,
            struct.pack(">H", len(properties)),
            properties,
        )
    )


_STORED_FIXED = struct.Struct(">iiiiiqqiq")  # size … born timestamp (see decode_messages)


@dataclass(frozen=True)
class StoredMessage:
    """A message as pulled from a broker (fields copied out of the response body)."""

    queue_id: int
    queue_offset: int
    born_timestamp: int
    store_timestamp: int
    body: bytes
    topic: str
    properties: dict[str, str]


def decode_messages(data: bytes) -> Iterator[StoredMessage]:
    """The messages of a PULL_MESSAGE response body (the commit log's record layout)."""
    import zlib

    pos, end = 0, len(data)
    while pos < end:
        (size, _magic, _crc, queue_id, _flag, queue_offset, _phys, sys_flag, born) = (
            _STORED_FIXED.unpack_from(data, pos)
        )
        p = pos + _STORED_FIXED.size
        p += 20 if sys_flag & BORNHOST_V6_FLAG else 8  # born host: address + port
        (store_ts,) = struct.unpack_from(">q", data, p)
        p += 8
        p += 20 if sys_flag & STOREHOST_V6_FLAG else 8  # store host
        p += 4 + 8  # reconsume times, prepared transaction offset
        (body_len,) = struct.unpack_from(">i", data, p)
        p += 4
        body = data[p : p + body_len]
        p += body_len
        if sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
        topic_len = data[p]
        topic = data[p + 1 : p + 1 + topic_len].decode("utf-8")
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">H", data, p)
        props = decode_properties(data[p + 2 : p + 2 + props_len]) if props_len else {}
        yield StoredMessage(queue_id, queue_offset, born, store_ts, body, topic, props)
        pos += size


# The fixed part of a stored message up to its body length, when both hosts are IPv4 (the
# usual case): size, magic, body CRC, queue id, flag, queue offset, physical offset, sys flag,
# born timestamp, born host (skipped), store timestamp, store host (skipped), reconsume times,
# prepared transaction offset, body length.
_STORED_V4 = struct.Struct(">iiiiiqqiq8xq8xiqi")


def decode_columns(
    data: bytes,
    stop: int,
    offsets: list[int],
    bodies: list[bytes],
    born: list[int],
    properties: list[str],
) -> int:
    """Append the messages of a PULL_MESSAGE body with ``queue offset < stop`` to the column
    lists (properties as undecoded text); return the offset after the last message appended, or
    -1 if none was. The reader's hot path: no object per message."""
    pos, end, last = 0, len(data), -1
    unpack = _STORED_V4.unpack_from
    while pos < end:
        size, _m, _c, _q, _f, offset, _p, sys_flag, born_ts, _s, _r, _t, body_len = unpack(
            data, pos
        )
        if sys_flag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG):
            (message,) = decode_messages(data[pos : pos + size])  # the general (slow) path
            if message.queue_offset < stop:
                offsets.append(message.queue_offset)
                bodies.append(message.body)
                born.append(message.born_timestamp)
                properties.append(encode_properties(message.properties).decode("utf-8"))
                last = message.queue_offset + 1
            pos += size
            continue
        if offset >= stop:
            break
        p = pos + _STORED_V4.size
        bodies.append(data[p : p + body_len])
        p += body_len
        p += 1 + data[p]  # topic
        (props_len,) = UNSIGNED_SHORT.unpack_from(data, p)
        properties.append(data[p + 2 : p + 2 + props_len].decode("utf-8", "replace"))
        offsets.append(offset)
        born.append(born_ts)
        last = offset + 1
        pos += size
    return last


class _UniqueIds:
    """Message unique ids (the UNIQ_KEY property): a random per-process prefix and a counter,
    32 upper-case hex digits like RocketMQ's own."""

    def __init__(self) -> None:
        self.pid = -1

    def __call__(self) -> str:
        if self.pid != os.getpid():  # a forked child gets its own prefix
            self.pid, self.prefix = os.getpid(), os.urandom(10).hex().upper()
            self.counter = itertools.count()
        return f"{self.prefix}{next(self.counter) & 0xFFFFFFFFFFFF:012X}"


unique_id = _UniqueIds()

_HEX = b"0123456789ABCDEF"


def unique_ids(n: int) -> Any:
    """``n`` consecutive unique ids (as `unique_id` gives them) as an Arrow string array."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    unique_id()  # (re)initialise the prefix after a fork
    first = next(unique_id.counter)
    # reserve the next n - 1 counter values for this call
    unique_id.counter = itertools.count(first + n)
    counters = (np.arange(first, first + n, dtype=np.uint64) & np.uint64(0xFFFFFFFFFFFF))[:, None]
    shifts = np.arange(44, -4, -4, dtype=np.uint64)[None, :]
    digits = np.frombuffer(_HEX, dtype=np.uint8)[
        ((counters >> shifts) & np.uint64(0xF)).astype(np.intp)
    ]
    tails = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(12), n, [None, pa.py_buffer(digits.tobytes())]
    )
    return pc.binary_join_element_wise(
        unique_id.prefix, tails.cast(pa.binary()).cast(pa.string()), ""
    )


def now_ms() -> int:
    return int(time.time() * 1000)
