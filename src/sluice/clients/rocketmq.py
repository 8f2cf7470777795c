"""A small client of RocketMQ's remoting protocol (4.x), shared by the RocketMQ bus
(`sluice.bus.rocketmq`) and the RocketMQ connectors (`sluice.connectors.rocketmq`).

It depends on nothing of sluice's but `sluice.sdk` (for its errors), so connectors may use it
(DESIGN §7 lets connectors depend on `sdk` and third-party libraries; this module is the
protocol library both layers share). Two levels:

* the wire: `Connection`, `Pool` (`POOL`), request/response codes, message encoding and decoding
  (`encode_batch_item`, `decode_messages`, `decode_columns`, `decode_pulled`);
* `RocketMQClient`: name server + broker calls by topic and queue (routes, offsets, pulls from an
  exact offset, batch sends to one chosen queue, topic creation), for code that does not need
  the bus's commit journal.

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

ACL (a broker with ``aclEnable=true``): given `Credentials`, every request is signed the way
RocketMQ 4.x's ``AclClientRPCHook`` signs it (see `sign_ext`); a request the broker's ACL refuses
is answered with a remark that `acl_refusal` turns into a message naming the access key and the
config keys to check (never the secret).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
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
from typing import Any, NamedTuple

from sluice.sdk import ConfigException, ConfigKey, ConnectException, RetriableException

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

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200

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
SUBSCRIPTION_GROUP_NOT_EXIST = 26

#: Properties RocketMQ itself sets or interprets: not record extensions (``TAGS`` is one: the
#: message tag travels as the extension ``TAGS``).
SYSTEM_PROPERTIES = frozenset(
    {
        "KEYS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
        "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "CLUSTER", "SHARDING_KEY",
        "__transactionId__", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", "MSG_TYPE", "TIMER_DELIVER_MS",
    }
)  # fmt: skip
#: Topics of the broker itself.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT",
        "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)  # fmt: skip

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
#: How long a send the broker answers SYSTEM_BUSY (its flow control dropped it unstored) is sent
#: again, and the first pause (doubling to 1 s); past it the busy answer is returned as it is
BUSY_RETRY_S = 30.0
BUSY_PAUSE_S = 0.05


def send_riding_busy(
    broker: Any,
    requests: Sequence[tuple[int, Mapping[str, Any], bytes]],
    *,
    check: Any = None,
) -> list[Response]:
    """`broker(requests)` (one round trip to one broker), the requests answered SYSTEM_BUSY sent
    again after a pause, as RocketMQ's own producer does, for up to `BUSY_RETRY_S`: a loaded
    machine keeps a request in the broker's send queue past `waitTimeMillsInSendQueue` and the
    broker drops it unstored. `check()` runs after each pause (a writer still allowed to send).
    Returns one response per request, in order; each request is sent again only on its own
    busy answer, so a caller sending one batch per queue keeps each queue's order."""
    deadline = time.monotonic() + BUSY_RETRY_S
    pause = BUSY_PAUSE_S
    answers: list[Response | None] = [None] * len(requests)
    todo = list(range(len(requests)))
    while todo:
        busy = []
        for i, resp in zip(todo, broker([requests[i] for i in todo]), strict=True):
            if resp.code == SYSTEM_BUSY and time.monotonic() < deadline:
                busy.append(i)
            else:
                answers[i] = resp
        if busy:
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            if check is not None:
                check()
        todo = busy
    return [a for a in answers if a is not None]


_READ_AHEAD = 1 << 20  # bytes a connection asks its socket for at a time
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
    """A decoded response: code, remark, response header fields and body, and the code of the
    request it answers (0 if unknown)."""

    code: int
    remark: str
    ext: dict[str, str]
    body: bytes
    request: int = 0

    def field(self, name: str) -> str:
        return self.ext.get(name, "")


@dataclass(frozen=True)
class Credentials:
    """An ACL account of a RocketMQ 4.x cluster (``plain_acl.yml``): access key, secret key and
    an optional security token. The secret is never part of ``repr`` or of an error message."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)


#: extension fields of a signed request (SessionCredentials' names)
ACCESS_KEY, SECURITY_TOKEN, SIGNATURE = "AccessKey", "SecurityToken", "Signature"


def signature(fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """RocketMQ's ACL request signature: base64 of HMAC-SHA1, keyed with the UTF-8 secret key, of
    the UTF-8 values of every extension field but ``Signature``, in field-name order, followed by
    the body bytes (``AclUtils.combineRequestContent`` + ``AclSigner.calSignature``)."""
    content = "".join(v for k, v in sorted(fields.items()) if k != SIGNATURE).encode("utf-8")
    mac = hmac.new(secret_key.encode("utf-8"), content + body, hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign_ext(ext: Mapping[str, str], body: bytes, credentials: Credentials) -> dict[str, str]:
    """``ext`` plus ``AccessKey`` (and ``SecurityToken`` if set) and the ``Signature`` over all of
    them and ``body``: what a broker with ACL enabled verifies."""
    out = dict(ext)
    out[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        out[SECURITY_TOKEN] = credentials.security_token
    out[SIGNATURE] = signature(out, body, credentials.secret_key)
    return out


def acl_credentials(
    values: Mapping[str, Any], enable: str, access_key: str, secret_key: str
) -> Credentials | None:
    """The ACL credentials of parsed config ``values`` (None unless ``values[enable]``); a missing
    access or secret key raises :class:`ConfigException` naming it (the secret is never shown)."""
    if not values[enable]:
        return None
    for key in (access_key, secret_key):
        if not str(values.get(key) or "").strip():
            raise ConfigException(key, f"required key is missing ({enable}=true)")
    return Credentials(str(values[access_key]).strip(), str(values[secret_key]))


@dataclass
class _Request:
    code: int
    ext: Mapping[str, Any]
    body: bytes = b""
    credentials: Credentials | None = None
    opaque: int = field(default_factory=lambda: next(_OPAQUE) & 0x7FFFFFFF)

    def encode(self) -> bytes:
        ext = {k: str(v) for k, v in self.ext.items() if v is not None}
        if self.credentials is not None:
            ext = sign_ext(ext, self.body, self.credentials)
        header = json.dumps(
            {
                "code": self.code,
                "language": "PYTHON",
                "version": _VERSION,
                "opaque": self.opaque,
                "flag": 0,
                "extFields": ext,
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
        self._buffer = bytearray()  # received, not yet consumed (from `_at` on)
        self._at = 0

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def alive(self) -> bool:
        """False if the peer has closed this (idle) connection: a broker closes connections idle
        for 120 s (`serverChannelMaxIdleTimeSeconds`), and a request written to one is lost."""
        if self.broken:
            return False
        try:
            self.sock.setblocking(False)
            try:
                return self.sock.recv(1, socket.MSG_PEEK) != b""
            finally:
                self.sock.setblocking(True)
        except BlockingIOError:
            return True  # nothing to read, not closed
        except OSError:
            return False

    def _recv_exact(self, n: int) -> bytes:
        """The next ``n`` bytes of the stream. Reads ahead up to `_READ_AHEAD` bytes at a time:
        one ``recv`` usually holds many pipelined responses (kept here for the next calls)."""
        if len(self._buffer) - self._at < n:
            del self._buffer[: self._at]
            self._at = 0
            while len(self._buffer) < n:
                chunk = self.sock.recv(max(n - len(self._buffer), _READ_AHEAD))
                if not chunk:
                    raise RemotingError(f"{self.address} closed the connection")
                self._buffer += chunk
        with memoryview(self._buffer) as view:
            out = bytes(view[self._at : self._at + n])
        self._at += n
        return out

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
                    requests[index].code,
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
        credentials: Credentials | None = None,
    ) -> Response:
        return self.invoke_many(
            address, [(code, ext, body)], timeout_s=timeout_s, credentials=credentials
        )[0]

    def invoke_many(
        self,
        address: str,
        requests: Sequence[tuple[int, Mapping[str, Any], bytes]],
        *,
        timeout_s: float,
        credentials: Credentials | None = None,
    ) -> list[Response]:
        """Pipeline ``requests`` on one connection to ``address``; responses in order; each
        signed with ``credentials`` when given (ACL).

        A pooled connection may have gone stale (the peer restarted): requests that are safe to
        repeat are then sent once more on a fresh connection. A send is not repeated here — its
        commit counts what arrived before it sends again (see `sluice.bus._external`)."""
        conn, reused = self._acquire(address, timeout_s)
        try:
            return conn.pipeline(
                [_Request(code, ext, body, credentials) for code, ext, body in requests]
            )
        except RemotingError:
            if not reused or any(code not in _REPEATABLE for code, _, _ in requests):
                raise
        finally:
            self._release(conn)
        conn = Connection(address, timeout_s)
        try:
            return conn.pipeline(
                [_Request(code, ext, body, credentials) for code, ext, body in requests]
            )
        finally:
            self._release(conn)

    def _acquire(self, address: str, timeout_s: float) -> tuple[Connection, bool]:
        with self._lock:
            self._check_fork()
            idle = self._idle.get(address) or []
            while idle:
                conn = idle.pop()
                if conn.alive():
                    conn.sock.settimeout(timeout_s)
                    return conn, True
                conn.close()
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


_SIZE = struct.Struct(">i")
_BODY_AT = _STORED_V4.size  # where the body starts in a message with IPv4 hosts


@dataclass(frozen=True)
class PulledColumns:
    """Messages of PULL_MESSAGE bodies as columns (see `decode_pulled`)."""

    offsets: Any  # numpy int64: queue offsets
    born: Any  # numpy int64: born timestamps (ms)
    bodies: Any  # pyarrow BinaryArray
    data: Any  # numpy uint8: the bodies the messages were decoded from
    properties_at: Any  # numpy int64: where each message's property text starts in `data`
    properties_len: Any  # numpy int64: its length


def grab(data: Any, at: Any, width: int) -> Any:
    """``width`` bytes of ``data`` (numpy uint8) from each position ``at`` as an (n, width)
    array; positions past the end read the last byte (callers check lengths themselves)."""
    import numpy as np

    return data[np.minimum(at[:, None] + np.arange(width), len(data) - 1)]


def gather(data: Any, starts: Any, lengths: Any) -> Any:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``data`` (numpy uint8) as one
    Arrow binary array: numpy writes a binary-view array's views (short values inline, long ones
    by offset into ``data``), Arrow copies the values out in one cast."""
    import numpy as np
    import pyarrow as pa

    n = len(starts)
    views = np.zeros((n, 4), np.int32)  # length, prefix/inline bytes, buffer index, offset
    views[:, 0] = lengths
    inline = grab(data, starts, 12)
    inline[np.arange(12)[None, :] >= lengths[:, None]] = 0  # unused inline bytes are zero
    views.view(np.uint8).reshape(n, 16)[:, 4:] = inline
    long = lengths > 12
    views[long, 2] = 0
    views[long, 3] = starts[long]
    array = pa.Array.from_buffers(
        pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)]
    )
    return array.cast(pa.binary())


def decode_pulled(data: bytes, stop: int) -> PulledColumns | None:
    """The messages of PULL_MESSAGE bodies (``data``: one body, or several joined) with queue
    offset below ``stop``, as columns: the reader's hot path. Only the walk from one message to
    the next is a Python loop; every field is gathered with numpy over the whole buffer.

    Returns None when a message has an IPv6 host or a compressed body (`decode_columns` handles
    those); raises `RemotingError` on a buffer that is not a sequence of messages."""
    import numpy as np

    starts: list[int] = []
    append, unpack = starts.append, _SIZE.unpack_from
    pos, end = 0, len(data)
    try:
        while pos < end:
            append(pos)
            (size,) = unpack(data, pos)
            if size < _BODY_AT + 3:
                raise RemotingError(f"malformed pulled message at byte {pos}: size {size}")
            pos += size
    except struct.error:
        raise RemotingError(f"malformed pulled message at byte {pos}: truncated") from None
    if pos != end:
        raise RemotingError(f"malformed pulled messages: {pos - end} bytes missing at the end")
    buf = np.frombuffer(data, np.uint8)
    s = np.array(starts, np.int64)

    def field(at: Any, width: int, kind: str = "i") -> Any:
        return grab(buf, at, width).view(f">{kind}{width}").ravel().astype(np.int64)

    if (field(s + 36, 4) & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG)).any():
        return None
    offsets = field(s + 20, 8)
    keep = offsets < stop
    if not keep.all():
        s, offsets = s[keep], offsets[keep]
    ends = s + field(s, 4)
    body_len = field(s + 84, 4)
    body_at = s + _BODY_AT
    topic_at = body_at + body_len
    if (body_len < 0).any() or (topic_at + 3 > ends).any():
        raise RemotingError("malformed pulled message: its body overruns it")
    props_len_at = topic_at + 1 + buf[topic_at].astype(np.int64)
    if (props_len_at + 2 > ends).any():
        raise RemotingError("malformed pulled message: its topic overruns it")
    props_len = field(props_len_at, 2, "u")
    if (props_len_at + 2 + props_len > ends).any():
        raise RemotingError("malformed pulled message: its properties overrun it")
    return PulledColumns(
        offsets, field(s + 40, 8), gather(buf, body_at, body_len), buf, props_len_at + 2, props_len
    )


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


#: User property of a message's record timestamp (ms): a batch send has one born timestamp.
TIMESTAMP_PROPERTY = "sluice.ts"
#: User property saying ``KEYS`` holds a binary key, base64-encoded (``b64``).
KEY_ENCODING_PROPERTY = "sluice.kenc"


def encode_messages(table: Any, tag_name: str, tag: str) -> Any:
    """Each row of ``table`` (columns ``key``, ``value`` binary, ``timestamp``, ``headers``: the
    text of a JSON object or null) as one message of a SEND_BATCH_MESSAGE body, an Arrow binary
    array. Properties, in this order: ``tag_name = tag`` (what a replay counts), ``UNIQ_KEY``,
    ``sluice.ts`` (the timestamp, ms), ``KEYS`` (a key that is not UTF-8 text RocketMQ can carry:
    base64, with ``sluice.kenc=b64``), then the extensions. Vectorised when the rows have no
    extensions and text keys (a file source's lines), one f-string per message otherwise."""
    fast = _encode_vectorised(table, tag_name, tag)
    return fast if fast is not None else _encode_rows(table, tag_name, tag)


def _encode_vectorised(table: Any, tag_name: str, tag: str) -> Any:
    """The messages built column-wise with Arrow kernels (~20x faster than per row), or None when
    a row needs the general path (extensions, or a key that is not plain UTF-8 text)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    if table.column("headers").null_count != n:
        return None
    keys = table.column("key")
    key_prop: Any = ""
    if keys.null_count != n:
        try:
            text = keys.cast(pa.string())  # fails on a key that is not UTF-8
        except pa.ArrowInvalid:
            return None
        if pc.any(pc.match_substring_regex(text, "[\x01\x02]")).as_py():
            return None
        key_prop = pc.binary_join_element_wise("KEYS\x01", text, "\x02", "").fill_null("")
    millis = pc.divide(table.column("timestamp").cast(pa.int64()), 1000).cast(pa.string())
    stamp_prop = pc.binary_join_element_wise(
        f"{TIMESTAMP_PROPERTY}\x01", millis, "\x02", ""
    ).fill_null("")
    props = pc.binary_join_element_wise(
        f"{tag_name}\x01{tag}\x02UNIQ_KEY\x01", unique_ids(n), "\x02", stamp_prop, key_prop, ""
    ).cast(pa.binary())
    bodies = table.column("value").fill_null(b"")
    body_len = pc.binary_length(bodies).to_numpy()
    props_len = pc.binary_length(props).to_numpy()
    head = np.zeros((n, 5), dtype=">i4")  # total size, magic, body CRC, flag, body length
    head[:, 0] = BATCH_ITEM.size + 2 + body_len + props_len
    head[:, 4] = body_len
    head_bin = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(BATCH_ITEM.size), n, [None, pa.py_buffer(head.tobytes())]
    ).cast(pa.binary())
    length_bin = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(2), n, [None, pa.py_buffer(props_len.astype(">u2").tobytes())]
    ).cast(pa.binary())
    joined = pc.binary_join_element_wise(head_bin, bodies, length_bin, props, b"")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _encode_rows(table: Any, tag_name: str, tag: str) -> Any:
    """Each row as one message of a SEND_BATCH_MESSAGE body (one f-string and two struct packs
    per message)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: list[bytes] = []
    head = f"{tag_name}\x01{tag}\x02UNIQ_KEY\x01"
    new_id = unique_id
    pack_head, pack_len = BATCH_ITEM.pack, UNSIGNED_SHORT.pack
    fixed = BATCH_ITEM.size + 2
    for batch in table.to_batches(max_chunksize=SEND_COUNT):
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        headers = batch.column("headers").to_pylist()
        for key, value, stamp, text in zip(keys, values, stamps, headers, strict=True):
            extra = "" if stamp is None else f"{TIMESTAMP_PROPERTY}\x01{stamp}\x02"
            if key is not None:
                text_key = _as_property(key)
                if text_key is None:  # not text RocketMQ can carry: base64, and say so
                    encoded = base64.b64encode(key).decode()
                    extra += f"KEYS\x01{encoded}\x02{KEY_ENCODING_PROPERTY}\x01b64\x02"
                else:
                    extra += f"KEYS\x01{text_key}\x02"
            if text:
                extra += "".join(
                    f"{name}\x01{val}\x02"
                    for name, val in json.loads(text).items()
                    if val is not None
                )
            props = f"{head}{new_id()}\x02{extra}".encode()
            body = value or b""
            out.append(
                b"".join(
                    (
                        pack_head(fixed + len(body) + len(props), 0, 0, 0, len(body)),
                        body,
                        pack_len(len(props)),
                        props,
                    )
                )
            )
    return pa.array(out, pa.binary())


def batch_bodies(messages: Any) -> Iterator[tuple[memoryview, int]]:
    """Consecutive encoded messages (an Arrow binary array or chunked array, `encode_messages`)
    grouped into SEND_BATCH_MESSAGE bodies of at most ``SEND_BYTES`` (or one message) and
    ``SEND_COUNT`` messages: zero-copy slices of the Arrow values buffer, with their message
    counts."""
    import numpy as np

    if hasattr(messages, "num_chunks"):
        messages = messages.combine_chunks() if messages.num_chunks != 1 else messages.chunk(0)
    array = messages
    n = len(array)
    if n == 0:
        return
    ends = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset : array.offset + n + 1]
    data = memoryview(array.buffers()[2])
    i = 0
    while i < n:
        # the last message that still fits, but at least one
        j = int(np.searchsorted(ends, ends[i] + SEND_BYTES, side="right")) - 1
        j = min(max(j, i + 1), i + SEND_COUNT, n)
        yield data[ends[i] : ends[j]], j - i
        i = j


def _as_property(key: bytes) -> str | None:
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x01" in text or "\x02" in text else text


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------------ requests by topic/queue
def parse_route(body: bytes) -> tuple[tuple[tuple[str, int], ...], dict[str, str]]:
    """A GET_ROUTEINFO_BY_TOPIC body as ``(queues, masters)``: the readable ``(broker name,
    queue id)`` pairs, brokers in name order, and each broker's master address."""
    data = loads_lenient(body)
    masters = {
        b["brokerName"]: b["brokerAddrs"]["0"]
        for b in data.get("brokerDatas", [])
        if "0" in b.get("brokerAddrs", {})
    }
    queues = tuple(
        (q["brokerName"], i)
        for q in sorted(data.get("queueDatas", []), key=lambda q: q["brokerName"])
        if q["brokerName"] in masters and q.get("perm", 6) & 4  # readable
        for i in range(int(q["readQueueNums"]))
    )
    return queues, masters


def create_topic_ext(topic: str, queues: int) -> dict[str, Any]:
    """The header of UPDATE_AND_CREATE_TOPIC for ``queues`` read and write queues."""
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": "false",
    }


PULL_BATCH = 32  # what a broker returns per pull from memory (maxTransferCountOnMessageInMemory)


def pull_ext(group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
    """The header of PULL_MESSAGE: up to `PULL_BATCH` messages from ``offset``, no filter."""
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": PULL_BATCH,
        "sysFlag": 4,  # FLAG_SUBSCRIPTION: the subscription is in this request
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }


def send_ext(group: str, topic: str, queue_id: int, born_ms: int) -> dict[str, Any]:
    """The header of SEND_BATCH_MESSAGE (SendMessageRequestHeaderV2's one-letter fields)."""
    return {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": born_ms,
        "h": 0,
        "i": "",
        "j": 0,
        "k": "false",
        "m": "true",
    }


class RocketMQError(ConnectException):
    """A request the cluster refused (an unknown topic, an offset no longer stored, …)."""

    code = "rocketmq.error"


class RocketMQUnavailable(RetriableException):
    """The name server or a broker did not answer; doing the same later may work."""

    code = "rocketmq.unavailable"


class RocketMQAccessDenied(RocketMQError):
    """The broker's ACL refused a request: no or unknown access key, a wrong secret, or an
    account without the permission (on a topic, a group, or admin rights)."""

    code = "rocketmq.acl"

    def __init__(
        self, message: str, *, suggestion: str | None = None, key: str = "", kind: str = ""
    ) -> None:
        super().__init__(message, suggestion=suggestion)
        self.key = key  # the config key most likely wrong
        self.kind = kind  # what was refused: `AclRefusal.kind` ("admin" for admin requests)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_access_denied, (self.message, self.suggestion, self.key, self.kind))


def _access_denied(
    message: str, suggestion: str | None, key: str, kind: str = ""
) -> RocketMQAccessDenied:
    return RocketMQAccessDenied(message, suggestion=suggestion, key=key, kind=kind)


class RocketMQOffsetMoved(RocketMQError):
    """A pull asked for an offset no longer (or not yet) in the queue; ``min_offset`` and
    ``max_offset`` are the queue's range as the broker reported it."""

    code = "rocketmq.offset_moved"

    def __init__(
        self,
        message: str,
        *,
        offset: int,
        min_offset: int,
        max_offset: int,
        suggestion: str | None = None,
    ) -> None:
        super().__init__(message, suggestion=suggestion)
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset

    def __reduce__(self) -> tuple[Any, ...]:
        bounds = (self.offset, self.min_offset, self.max_offset)
        return (_offset_moved, (self.message, self.suggestion, *bounds))


def _offset_moved(
    message: str, suggestion: str | None, offset: int, min_offset: int, max_offset: int
) -> RocketMQOffsetMoved:
    return RocketMQOffsetMoved(
        message, suggestion=suggestion, offset=offset, min_offset=min_offset, max_offset=max_offset
    )


class AclKeys(NamedTuple):
    """The config keys that hold a cluster's ACL settings, for error messages (the bus's worker
    keys by default; a connector names its own, e.g. ``source.access.key``)."""

    enable: str = "aclEnable"
    access_key: str = "accessKey"
    secret_key: str = "secretKey"

    @classmethod
    def prefixed(cls, prefix: str) -> AclKeys:
        """A connector's keys: ``<prefix>.acl.enable``, ``.access.key``, ``.secret.key``."""
        return cls(f"{prefix}.acl.enable", f"{prefix}.access.key", f"{prefix}.secret.key")

    def config_keys(self) -> tuple[ConfigKey, ...]:
        """Their declarations for a connector's `ConfigDef`."""
        when = f"{self.enable}=true"
        return (
            ConfigKey(self.enable, type="bool", default=False, doc="sign requests (broker ACL)"),
            ConfigKey(self.access_key, default="", doc=f"ACL access key ({when})"),
            ConfigKey(self.secret_key, type="password", default="", doc=f"ACL secret key ({when})"),
        )


class AclRefusal(NamedTuple):
    """What `acl_refusal` makes of a broker's ACL error: the message, what to do, and the config
    key most likely wrong."""

    message: str
    suggestion: str
    key: str
    #: no_key, unknown_key, bad_signature, admin (the account is not admin) or permission
    kind: str = ""


_ACL_REMARKS = (
    # (text of the AclException a 4.9.x broker's PlainPermissionManager raises, its kind)
    ("No accessKey is configured", "no_key"),
    ("No acl config for", "unknown_key"),
    ("No PlainAccessResource for", "unknown_key"),
    ("Check signature failed", "bad_signature"),
    ("Need admin permission", "admin"),
    ("No default permission for", "permission"),
    ("No permission for", "permission"),
    # 5.3+ (ACL 2.0, code 16 NO_PERMISSION): the authentication and authorization providers
    ("username cannot be null", "no_key"),
    ("check signature failed", "bad_signature"),
    ("has no permission to access", "permission"),
)
# 5.3+: "User:<name> is not found." (an unknown access key)
_UNKNOWN_USER = re.compile(r"\bUser:\S+ is not found")
_ADMIN_REQUESTS = {
    UPDATE_AND_CREATE_TOPIC: "creating a topic",
    25: "updating the broker config",
    DELETE_TOPIC_IN_BROKER: "deleting a topic",
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "creating a consumer group",
    207: "deleting a consumer group",
}
_ACL_REMARK = re.compile(r"^[\w.]*AclException:\s*|,\s*[\w.$]+\([\w.]+:\d+\)$")
_SUBJECT = re.compile(
    r"(?:No default permission for|No permission for|request code=|permission to access)"
    r"\s*([^\s,]+)"
)


def acl_refusal(
    resp: Response, credentials: Credentials | None, keys: AclKeys | None = None
) -> AclRefusal | None:
    """An `AclRefusal` if ``resp`` is a refusal by the broker's ACL, else None. The message
    names the access key (never the secret), the topic or group, and the keys to check.

    Both generations of broker ACL are understood: 4.9.x's ACL 1.0 (``AclException`` remarks)
    and 5.3+'s ACL 2.0, whose remarks name no request; for it an authorization refusal of an
    admin request (``resp.request``, e.g. creating a topic) is reported as the "admin" kind: an
    account imported from ``plain_acl.yml`` without ``admin: true`` never has that right."""
    if resp.code == SUCCESS:
        return None
    kind = next((k for text, k in _ACL_REMARKS if text in resp.remark), None)
    if kind is None and _UNKNOWN_USER.search(resp.remark):
        kind = "unknown_key"
    if kind is None:
        return None
    keys = keys or AclKeys()
    # "org.apache.rocketmq.acl.common.AclException: <text>, <class>.<method>(<file>:<line>)"
    remark = _ACL_REMARK.sub("", resp.remark.strip().splitlines()[0]).strip()[:300]
    found = _SUBJECT.search(resp.remark)
    subject = found.group(1) if found else ""
    if credentials is None or kind == "no_key":
        return AclRefusal(
            f"the broker requires ACL credentials and none were given (broker: {remark})",
            f"set {keys.enable}=true, {keys.access_key} and {keys.secret_key}",
            keys.enable,
            "no_key",
        )
    who = f"accessKey {credentials.access_key!r}"
    if kind == "unknown_key":
        return AclRefusal(
            f"the broker has no account {who} (broker: {remark})",
            f"check {keys.access_key} (an account of the broker's plain_acl.yml; a user on 5.3+)",
            keys.access_key,
            kind,
        )
    if kind == "bad_signature":
        return AclRefusal(
            f"the broker refused the request signature of {who}: wrong secret key "
            f"(broker: {remark})",
            f"check {keys.secret_key} (that account's secretKey in plain_acl.yml; the user's "
            "password on 5.3+)",
            keys.secret_key,
            kind,
        )
    if kind == "permission" and resp.request in _ADMIN_REQUESTS:
        kind, subject = "admin", str(resp.request)
    if kind == "admin":
        action = _ADMIN_REQUESTS.get(int(subject) if subject.isdigit() else -1, "this request")
        return AclRefusal(
            f"{who} is not an admin account, which {action} needs (broker: {remark})",
            f"use an account with admin: true (a super user on 5.3+) in {keys.access_key}, or "
            "create it beforehand",
            keys.access_key,
            kind,
        )
    # "topic:<name>" or "group:<name>" (a group's permission is kept on its %RETRY% topic);
    # 5.x says "Topic:<name>" / "Group:<name>"
    what, _, name = subject.rpartition(":")
    what = what.lower()
    if name.startswith("%RETRY%"):
        what, name = "group", name[len("%RETRY%") :]
    if what in ("topic", "group") and name:
        subject = f"{'topic' if what == 'topic' else 'consumer group'} {name!r}"
    return AclRefusal(
        f"{who} has no permission on {subject or 'this resource'} (broker: {remark})",
        f"grant it in the topicPerms / groupPerms of {credentials.access_key} in the broker's "
        f"plain_acl.yml (an ACL of User:{credentials.access_key} on 5.3+), or use another "
        f"{keys.access_key}",
        keys.access_key,
        kind,
    )


@dataclass(frozen=True)
class MessageQueue:
    """One queue of a topic: its broker's name, its queue id and the broker master's address."""

    broker: str
    queue_id: int
    address: str


_CLIENT_ROUTES: dict[tuple[int, str, str], tuple[float, tuple[MessageQueue, ...]]] = {}
_CLIENT_ROUTES_LOCK = threading.Lock()
SEND_BYTES = 1 << 20  # bytes per SEND_BATCH_MESSAGE (the broker's limit is maxMessageSize)
SEND_COUNT = 2_000  # messages per SEND_BATCH_MESSAGE
_PULL_WINDOW = 16  # pulls in flight per queue


class RocketMQClient:
    """Name server and broker calls by topic and queue, for one RocketMQ cluster.

    Picklable (it holds only settings; connections come from the per-process `POOL`), so a
    connector's task can carry one to Spark's executors. ``key`` is the config key that named
    ``namesrv_addr``: every error message starts with it (``source.namesrv: …``).
    """

    def __init__(
        self,
        namesrv_addr: str,
        *,
        key: str = "namesrvAddr",
        timeout_s: float = 10.0,
        group: str = "sluice-client",
        credentials: Credentials | None = None,
        acl_keys: AclKeys | None = None,
    ) -> None:
        self.namesrv_addr = namesrv_addr
        self.key = key
        self.timeout_s = timeout_s
        self.group = group
        self.credentials = credentials
        self.acl_keys = acl_keys or AclKeys()

    def __repr__(self) -> str:
        return f"RocketMQClient({self.key}={self.namesrv_addr!r})"

    # -- transport -------------------------------------------------------------------------------
    def unavailable(self, what: str, detail: object) -> Exception:
        """A `RocketMQUnavailable` naming the address key, ``what`` was asked and ``detail``."""
        return RocketMQUnavailable(
            f"{self.key}={self.namesrv_addr}: {what}: {detail}",
            suggestion="are the name server and the brokers up and reachable?",
        )

    def failed(self, what: str, resp: Response) -> Exception:
        """The error for a refused request: `RocketMQAccessDenied` (the ACL, naming the key to
        fix), `RocketMQUnavailable` (a transient code) or `RocketMQError`."""
        where = f"{self.key}={self.namesrv_addr}: {what}"
        refusal = acl_refusal(resp, self.credentials, self.acl_keys)
        if refusal is not None:
            return RocketMQAccessDenied(
                f"{where}: {refusal.message}",
                suggestion=refusal.suggestion,
                key=refusal.key,
                kind=refusal.kind,
            )
        message = f"{where}: code {resp.code}: {resp.remark}"
        if resp.code in TRANSIENT_CODES:
            return RocketMQUnavailable(message)
        return RocketMQError(message)

    def ns(self, code: int, ext: Mapping[str, Any]) -> Response:
        """One request to the first name server that answers."""
        errors = []
        for address in [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]:
            try:
                return POOL.invoke(
                    address, code, ext, timeout_s=self.timeout_s, credentials=self.credentials
                )
            except RemotingError as exc:
                errors.append(str(exc))
        raise self.unavailable("no name server answered", "; ".join(errors) or "none configured")

    def broker(
        self, address: str, requests: Sequence[tuple[int, Mapping[str, Any], bytes]]
    ) -> list[Response]:
        """``requests`` pipelined to the broker at ``address``, their responses in order."""
        try:
            return POOL.invoke_many(
                address, requests, timeout_s=self.timeout_s, credentials=self.credentials
            )
        except RemotingError as exc:
            raise self.unavailable(f"broker {address}", exc) from None

    # -- admin -----------------------------------------------------------------------------------
    def _cluster_table(self) -> dict[str, Any]:
        resp = self.ns(GET_BROKER_CLUSTER_INFO, {})
        if resp.code != SUCCESS:
            raise self.failed("cluster info", resp)
        return loads_lenient(resp.body)

    def cluster_info(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO; raises unless at least one broker is registered."""
        info = self._cluster_table()
        if not info.get("brokerAddrTable"):
            raise self.unavailable("cluster info", "no broker is registered")
        return info

    def check_access(self) -> None:
        """Ask every master broker for its runtime info, a request any valid account may make:
        raises `RocketMQAccessDenied` if a broker's ACL refuses the credentials (no account,
        wrong secret, or none given while the broker requires them)."""
        for data in self.cluster_info()["brokerAddrTable"].values():
            address = data.get("brokerAddrs", {}).get("0")
            if address is None:
                continue
            (resp,) = self.broker(address, [(GET_BROKER_RUNTIME_INFO, {}, b"")])
            if acl_refusal(resp, self.credentials, self.acl_keys) is not None:
                raise self.failed(f"broker {address}", resp)

    def check_readable(self, topic: str) -> None:
        """One pull from the first queue of ``topic``: raises `RocketMQAccessDenied` if the
        broker's ACL refuses this account reading it (or its consumer group)."""
        for queue in self.queues(topic)[:1]:
            ext = pull_ext(self.group, topic, queue.queue_id, 0)
            (resp,) = self.broker(queue.address, [(PULL_MESSAGE, ext, b"")])
            if acl_refusal(resp, self.credentials, self.acl_keys) is not None:
                raise self.failed(f"pull of {topic}/{queue.queue_id}", resp)

    def topics(self) -> list[str]:
        """The cluster's user topics (no system, retry or dead-letter topics), sorted."""
        resp = self.ns(GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        if resp.code != SUCCESS:
            raise self.failed("topic list", resp)
        info = self._cluster_table()
        internal = set(info.get("brokerAddrTable", {})) | set(info.get("clusterAddrTable", {}))
        return sorted(
            t
            for t in loads_lenient(resp.body).get("topicList", [])
            if t not in SYSTEM_TOPICS
            and t not in internal
            and not t.startswith(("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_"))
            and not t.endswith("_REPLY_TOPIC")
        )

    def queues(self, topic: str, *, fresh: bool = False) -> tuple[MessageQueue, ...]:
        """The topic's readable queues (empty if the topic does not exist), cached for 2 s."""
        key = (os.getpid(), self.namesrv_addr, topic)
        now = time.monotonic()
        with _CLIENT_ROUTES_LOCK:
            cached = _CLIENT_ROUTES.get(key)
        if cached is not None and not fresh and cached[0] > now:
            return cached[1]
        resp = self.ns(GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code == TOPIC_NOT_EXIST:
            found: tuple[MessageQueue, ...] = ()
        elif resp.code != SUCCESS:
            raise self.failed(f"route of topic {topic!r}", resp)
        else:
            pairs, masters = parse_route(resp.body)
            found = tuple(MessageQueue(b, q, masters[b]) for b, q in pairs)
        with _CLIENT_ROUTES_LOCK:
            _CLIENT_ROUTES[key] = (now + 2.0, found)
        return found

    def create_topic(
        self, topic: str, queues: int = 8, *, cluster: str | None = None
    ) -> tuple[MessageQueue, ...]:
        """Create ``topic`` with ``queues`` queues on the master brokers of ``cluster`` (default:
        ``DefaultCluster``, or the only cluster); an existing topic is kept as it is."""
        existing = self.queues(topic, fresh=True)
        if existing:
            return existing
        info = self.cluster_info()
        clusters = info.get("clusterAddrTable", {})
        name = cluster or ("DefaultCluster" if "DefaultCluster" in clusters else None)
        if name is None and len(clusters) == 1:
            name = next(iter(clusters))
        if name not in clusters:
            raise RocketMQError(
                f"{self.key}={self.namesrv_addr}: cannot create topic {topic!r}: "
                f"cluster {name!r} not found (clusters: {sorted(clusters)})"
            )
        ext = create_topic_ext(topic, queues)
        for broker in clusters[name]:
            address = info["brokerAddrTable"][broker]["brokerAddrs"].get("0")
            if address is None:
                continue
            (resp,) = self.broker(address, [(UPDATE_AND_CREATE_TOPIC, ext, b"")])
            if resp.code != SUCCESS:
                raise self.failed(f"create topic {topic!r} on {broker}", resp)
        # The broker registers the topic with the name servers right away; wait until they say so.
        deadline = time.monotonic() + self.timeout_s
        while not (found := self.queues(topic, fresh=True)):
            if time.monotonic() > deadline:
                raise self.unavailable(f"topic {topic!r}", "created, but no route appeared")
            time.sleep(0.1)
        return found

    def known_to_brokers(self, topic: str) -> bool:
        """Whether a master broker has ``topic`` in its topic configs (GET_ALL_TOPIC_CONFIG)."""
        for data in self.cluster_info().get("brokerAddrTable", {}).values():
            address = data.get("brokerAddrs", {}).get("0")
            if address is None:
                continue
            (resp,) = self.broker(address, [(GET_ALL_TOPIC_CONFIG, {}, b"")])
            table = loads_lenient(resp.body).get("topicConfigTable", {}) if resp.body else {}
            if resp.code == SUCCESS and topic in table:
                return True
        return False

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` from its brokers and the name servers."""
        for address in {q.address for q in self.queues(topic)}:
            self.broker(address, [(DELETE_TOPIC_IN_BROKER, {"topic": topic}, b"")])
        self.ns(DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
        self.queues(topic, fresh=True)

    def offsets(
        self, topic: str, queues: Sequence[MessageQueue]
    ) -> dict[MessageQueue, tuple[int, int]]:
        """``(min offset, max offset)`` of each queue; ``max`` is the offset the next message
        gets."""
        by_address: dict[str, list[MessageQueue]] = {}
        for q in queues:
            by_address.setdefault(q.address, []).append(q)
        out: dict[MessageQueue, tuple[int, int]] = {}
        for address, group in by_address.items():
            requests: list[tuple[int, Mapping[str, Any], bytes]] = []
            for q in group:
                ext = {"topic": topic, "queueId": q.queue_id}
                requests += [(GET_MIN_OFFSET, ext, b""), (GET_MAX_OFFSET, ext, b"")]
            responses = self.broker(address, requests)
            for n, q in enumerate(group):
                low, high = responses[2 * n], responses[2 * n + 1]
                for resp in (low, high):
                    if resp.code != SUCCESS:
                        raise self.failed(f"offsets of {topic}/{q.broker}/{q.queue_id}", resp)
                out[q] = (int(low.field("offset")), int(high.field("offset")))
        return out

    # -- data ------------------------------------------------------------------------------------
    def pull(
        self, topic: str, queue: MessageQueue, start: int, stop: int
    ) -> Iterator[StoredMessage]:
        """The messages with ``start <= queue offset < stop``, in order (several pulls in flight).

        Raises `RocketMQOffsetMoved` when ``start`` is no longer in the queue (removed by
        retention)."""
        for body in self.pull_bodies(topic, queue, start, stop):
            for message in decode_messages(body):
                if start <= message.queue_offset < stop:
                    yield message

    def pull_bodies(
        self, topic: str, queue: MessageQueue, start: int, stop: int, *, window: int = _PULL_WINDOW
    ) -> Iterator[bytes]:
        """PULL_MESSAGE response bodies covering offsets ``start`` to (at least) ``stop``, in
        order, ``window`` pulls in flight at a time (the last body may hold messages past
        ``stop``; decode them with `decode_messages` or `decode_pulled`)."""
        pos = start
        stalled: tuple[int, float] | None = None
        while pos < stop:
            offsets = list(range(pos, stop, PULL_BATCH))[:window]
            requests = [
                (PULL_MESSAGE, pull_ext(self.group, topic, queue.queue_id, o), b"") for o in offsets
            ]
            found: dict[int, tuple[bytes, int]] = {}
            for offset, resp in zip(offsets, self.broker(queue.address, requests), strict=True):
                if resp.code == SUCCESS:
                    found[offset] = (resp.body, int(resp.field("nextBeginOffset")))
                elif resp.code == PULL_OFFSET_MOVED and offset == pos:
                    raise self._offset_moved(topic, queue, pos, resp)
                elif resp.code == SUBSCRIPTION_GROUP_NOT_EXIST:
                    self.create_group(queue.address, self.group)
                elif resp.code == PULL_RETRY_IMMEDIATELY:  # nothing matched: skip ahead
                    found[offset] = (b"", int(resp.field("nextBeginOffset") or offset))
                elif resp.code != PULL_NOT_FOUND and offset == pos:
                    raise self.failed(f"pull of {topic}/{queue.queue_id} at {pos}", resp)
            progressed = False
            # A response holds what follows its offset; one with fewer messages than asked for
            # leaves a gap before the next, which the next round fills.
            while pos in found and pos < stop:
                body, after = found.pop(pos)
                if after <= pos:
                    break
                if body:
                    yield body
                pos, progressed = after, True
            if not progressed:  # not readable yet (consume queue lagging): retry shortly
                now = time.monotonic()
                if stalled is None or stalled[0] != pos:
                    stalled = (pos, now)
                elif now - stalled[1] > self.timeout_s:
                    raise self.unavailable(
                        f"pull of {topic}/{queue.queue_id}", f"no message at offset {pos}"
                    )
                time.sleep(0.05)

    def _offset_moved(
        self, topic: str, queue: MessageQueue, pos: int, resp: Response
    ) -> RocketMQOffsetMoved:
        low, high = int(resp.field("minOffset") or 0), int(resp.field("maxOffset") or 0)
        return RocketMQOffsetMoved(
            f"{self.key}={self.namesrv_addr}: {topic}/{queue.broker}/{queue.queue_id}: offset "
            f"{pos} is no longer in the queue (range {low}..{high})",
            suggestion="the broker removed it (retention); reset the offsets",
            offset=pos,
            min_offset=low,
            max_offset=high,
        )

    def create_group(self, address: str, group: str) -> None:
        """Create (or update) subscription group ``group`` on the broker at ``address``."""
        body = json.dumps(
            {
                "groupName": group,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": 1,
                "retryMaxTimes": 16,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
        ).encode()
        (resp,) = self.broker(address, [(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)])
        if resp.code != SUCCESS:
            raise self.failed(f"create consumer group {group!r}", resp)

    def send(
        self,
        topic: str,
        queue: MessageQueue,
        messages: Sequence[tuple[bytes, Mapping[str, str]]],
        born_ms: int | None = None,
    ) -> int:
        """Append ``(body, properties)`` messages to ``queue`` in order, in SEND_BATCH_MESSAGE
        requests of at most 1 MiB / 2,000 messages, each sent once the previous one is stored.
        Returns the queue offset after the last message. Not idempotent: a retry after a
        failure may store some messages twice."""
        items = [encode_batch_item(body, encode_properties(props)) for body, props in messages]
        end = -1
        i = 0
        born = now_ms() if born_ms is None else born_ms
        while i < len(items):
            j, size = i, 0
            while (
                j < len(items)
                and j - i < SEND_COUNT
                and (j == i or size + len(items[j]) <= SEND_BYTES)
            ):
                size += len(items[j])
                j += 1
            ext = send_ext(self.group, topic, queue.queue_id, born)
            (resp,) = self.broker(queue.address, [(SEND_BATCH_MESSAGE, ext, b"".join(items[i:j]))])
            if resp.code not in STORED_CODES:
                raise self.failed(f"send to {topic}/{queue.broker}/{queue.queue_id}", resp)
            end = int(resp.field("queueOffset")) + (j - i)
            i = j
        return end

    def send_encoded(
        self, topic: str, queue: MessageQueue, messages: Any, born_ms: int | None = None
    ) -> int:
        """`send` for messages already encoded (`encode_messages`: an Arrow binary array): the
        bodies are zero-copy slices of it. Returns the queue offset after the last message."""
        end = -1
        born = now_ms() if born_ms is None else born_ms
        for body, count in batch_bodies(messages):
            ext = send_ext(self.group, topic, queue.queue_id, born)
            (resp,) = send_riding_busy(
                lambda reqs: self.broker(queue.address, reqs), [(SEND_BATCH_MESSAGE, ext, body)]
            )
            if resp.code not in STORED_CODES:
                raise self.failed(f"send to {topic}/{queue.broker}/{queue.queue_id}", resp)
            end = int(resp.field("queueOffset")) + count
        return end

    # -- consumer offsets (also used as a small durable journal) ---------------------------------
    def query_offset(self, group: str, topic: str, queue: MessageQueue) -> int:
        """The offset ``group`` committed for ``queue`` (-1: none). A broker answers 0 rather than
        "none" for a queue whose first message is still stored, so store values above 0."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": queue.queue_id}
        (resp,) = self.broker(queue.address, [(QUERY_CONSUMER_OFFSET, ext, b"")])
        if resp.code == QUERY_NOT_FOUND:
            return -1
        if resp.code != SUCCESS:
            raise self.failed(f"offset of group {group!r} on {topic}/{queue.queue_id}", resp)
        return int(resp.field("offset"))

    def commit_offset(self, group: str, topic: str, queue: MessageQueue, offset: int) -> None:
        """Store ``offset`` for ``group`` on ``queue`` (UPDATE_CONSUMER_OFFSET). A 5.x broker
        stores offsets only for a subscription group it knows (4.9.x took any name): an unknown
        group is created first, as its first pull would have."""
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue.queue_id,
            "commitOffset": offset,
        }
        (resp,) = self.broker(queue.address, [(UPDATE_CONSUMER_OFFSET, ext, b"")])
        if resp.code == SUBSCRIPTION_GROUP_NOT_EXIST:
            self.create_group(queue.address, group)
            (resp,) = self.broker(queue.address, [(UPDATE_CONSUMER_OFFSET, ext, b"")])
        if resp.code != SUCCESS:
            raise self.failed(f"commit offset of group {group!r}", resp)

    def wait_dispatched(self, address: str) -> None:
        """Wait until the broker at ``address`` made every stored message readable (its consume
        queues caught up with its commit log), so that counting messages sees them all."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            (resp,) = self.broker(address, [(GET_BROKER_RUNTIME_INFO, {}, b"")])
            table = loads_lenient(resp.body).get("table", {}) if resp.body else {}
            if resp.code != SUCCESS or int(table.get("dispatchBehindBytes", 0)) == 0:
                return
            if time.monotonic() > deadline:
                raise self.unavailable(f"broker {address}", "its consume queues lag behind")
            time.sleep(0.01)

    def count_tagged(
        self, topic: str, queue: MessageQueue, start: int, name: str, value: str
    ) -> int:
        """How many messages of ``queue`` from offset ``start`` on carry property
        ``name = value``."""
        self.wait_dispatched(queue.address)
        end = self.offsets(topic, [queue])[queue][1]
        return sum(
            1 for m in self.pull(topic, queue, start, end) if m.properties.get(name) == value
        )
