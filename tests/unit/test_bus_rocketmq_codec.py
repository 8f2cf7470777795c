"""RocketMQ message encoding and decoding (pure logic: bytes in, bytes out, no broker)."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from sluice.bus.rocketmq._log import (
    _decode_chunk,
    _prefetched,
    _to_batch,
    _to_batch_fast,
)
from sluice.clients import rocketmq as rm
from sluice.clients.rocketmq import batch_bodies
from tests.conftest import wait_until


def _encode_vectorised(table: pa.Table, tag: str) -> Any:
    return rm._encode_vectorised(table, "sluice.writer", tag)


def _encode_rows(table: pa.Table, tag: str) -> Any:
    return rm._encode_rows(table, "sluice.writer", tag)


def _table(keys: list, values: list, stamps: list, headers: list | None = None) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "headers": pa.array(headers or [None] * n, pa.string()),
        }
    )


def _parse(item: bytes) -> tuple[bytes, dict[str, str]]:
    """One SEND_BATCH_MESSAGE item: its body and properties (MessageDecoder.decodeMessage)."""
    size, magic, crc, flag, body_len = struct.unpack_from(">iiiii", item)
    assert (size, magic, crc, flag) == (len(item), 0, 0, 0)
    body = item[20 : 20 + body_len]
    (props_len,) = struct.unpack_from(">H", item, 20 + body_len)
    assert 22 + body_len + props_len == len(item)
    return body, rm.decode_properties(item[22 + body_len :])


def test_vectorised_and_per_row_encoders_agree() -> None:
    table = _table(
        [b"k1", None, "ü-key".encode()],
        [b"a\x00b", b"", None],
        [1_700_000_000_123_000, None, 5_000],
    )
    fast = _encode_vectorised(table, "tag123")
    assert fast is not None
    slow = _encode_rows(table, "tag123")
    for f, s in zip(fast.to_pylist(), slow.to_pylist(), strict=True):
        fb, fp = _parse(f)
        sb, sp = _parse(s)
        assert fb == sb
        assert len(fp.pop("UNIQ_KEY")) == len(sp.pop("UNIQ_KEY")) == 32
        assert fp == sp
    body, props = _parse(fast[0].as_py())
    assert body == b"a\x00b"
    assert props["KEYS"] == "k1" and props["sluice.ts"] == "1700000000123"
    assert props["sluice.writer"] == "tag123"


def test_rows_the_vectorised_encoder_leaves_to_the_per_row_one() -> None:
    assert _encode_vectorised(_table([b"\xff"], [b"v"], [None]), "t") is None  # not UTF-8
    assert _encode_vectorised(_table([b"a\x01b"], [b"v"], [None]), "t") is None  # a separator
    assert _encode_vectorised(_table([None], [b"v"], [None], ['{"h": "1"}']), "t") is None


def test_unique_ids_are_unique_hex() -> None:
    ids = rm.unique_ids(1_000).to_pylist() + [rm.unique_id() for _ in range(10)]
    assert len(set(ids)) == 1_010
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_send_bodies_cut_at_the_size_and_count_limits() -> None:
    messages = _encode_rows(_table([None] * 5_000, [b"x" * 300] * 5_000, [None] * 5_000), "t")
    bodies = list(batch_bodies(pa.chunked_array([messages.slice(0, 2_500), messages.slice(2_500)])))
    assert sum(count for _, count in bodies) == 5_000
    assert b"".join(bytes(body) for body, _ in bodies) == b"".join(messages.to_pylist())
    assert all(len(body) <= 1 << 20 and count <= 2_000 for body, count in bodies)


def test_pulled_messages_decode_to_records() -> None:
    # a stored message as a broker returns it (IPv4 hosts, uncompressed)
    props = rm.encode_properties(
        {"KEYS": "k", "sluice.ts": "1700000000000", "sluice.writer": "w", "a": "1", "TAGS": "t"}
    )
    body = b"\x00value"

    def stored(offset: int) -> bytes:
        fixed = struct.pack(">iiiiiqqiq", 0, 0, 0, 3, 0, offset, 0, 0, 1_600_000_000_000)
        record = bytearray(fixed + rest)
        struct.pack_into(">i", record, 0, len(record))
        return bytes(record)

    rest = (
        b"\x7f\x00\x00\x01" + struct.pack(">i", 1)
        + struct.pack(">q", 0) + b"\x7f\x00\x00\x01" + struct.pack(">i", 2)
        + struct.pack(">iq", 0, 0)
        + struct.pack(">i", len(body)) + body
        + bytes([5]) + b"topic"
        + struct.pack(">H", len(props)) + props
    )  # fmt: skip
    data = stored(42) + stored(43)
    offsets, bodies, born, texts = [], [], [], []
    assert rm.decode_columns(data, 43, offsets, bodies, born, texts) == 43  # only offset 42 < 43
    assert (offsets, bodies, born) == ([42], [body], [1_600_000_000_000])
    row = _to_batch(offsets, bodies, born, texts).to_pylist()[0]
    assert row["key"] == b"k" and row["value"] == body and row["offset"] == 42
    assert row["headers"] == '{"TAGS": "t", "a": "1"}'
    assert int(row["timestamp"].timestamp() * 1000) == 1_700_000_000_000


# ------------------------------------------------------------------- vectorised pulled messages
def _stored(offset: int, body: bytes, props: bytes, *, sys_flag: int = 0, born: int = 7) -> bytes:
    """One message as a broker returns it from a pull (IPv4 hosts unless ``sys_flag`` says)."""
    host = b"\x7f\x00\x00\x01" + struct.pack(">i", 1)
    record = bytearray(
        struct.pack(">iiiiiqqiq", 0, 0, 0, 3, 0, offset, 0, sys_flag, born)
        + host
        + struct.pack(">q", 0)
        + host
        + struct.pack(">iq", 0, 0)
        + struct.pack(">i", len(body))
        + body
        + bytes([5])
        + b"topic"
        + struct.pack(">H", len(props))
        + props
    )
    struct.pack_into(">i", record, 0, len(record))
    return bytes(record)


def _as_pulled(
    table: pa.Table, *, first: int = 0, suffix: bytes = b"CLUSTER\x01DefaultCluster"
) -> bytes:
    """Messages encoded by the writer, stored the way the broker returns them (it appends
    ``CLUSTER`` without a separator)."""
    out = []
    for n, item in enumerate(_encode_rows(table, "0123456789abcdef").to_pylist()):
        body, props = _parse(item)
        out.append(_stored(first + n, body, rm.encode_properties(props) + suffix))
    return b"".join(out)


def _slow(data: bytes, stop: int) -> pa.RecordBatch:
    offsets, bodies, born, texts = [], [], [], []
    rm.decode_columns(data, stop, offsets, bodies, born, texts)
    return _to_batch(offsets, bodies, born, texts)


def _lines(n: int) -> pa.Table:
    values = [b"", b"short", b"twelve bytes", b"thirteen byte", b"x" * 300, b"\x00\x01\x02 bin"]
    stamps = [1_700_000_000_123_000, None, 5_000, 999_000, 1_000, 123_456_789_000_000]
    return _table([None] * n, [values[i % 6] for i in range(n)], [stamps[i % 6] for i in range(n)])


def test_vectorised_decoding_matches_the_per_message_path() -> None:
    data = _as_pulled(_lines(60), first=100)
    for stop in (10**9, 130, 100):
        cols = rm.decode_pulled(data, stop)
        assert cols is not None
        fast = _to_batch_fast(cols)
        assert fast is not None
        assert fast.equals(_slow(data, stop))
    assert _to_batch_fast(rm.decode_pulled(_as_pulled(_lines(3), suffix=b""), 10**9)) is not None


def test_messages_the_vectorised_decoder_leaves_to_the_per_message_path() -> None:
    def declined(table: pa.Table, suffix: bytes = b"CLUSTER\x01DefaultCluster") -> None:
        data = _as_pulled(table, suffix=suffix)
        cols = rm.decode_pulled(data, 10**9)
        assert cols is not None and _to_batch_fast(cols) is None
        ((_, batch),) = _decode_chunk(data, 10**9)  # still decoded, message by message
        assert batch.equals(_slow(data, 10**9))

    declined(_table([b"key", None], [b"a", b"b"], [None, None]))  # a key
    declined(_table([None], [b"a"], [None], ['{"h": "1"}']))  # an extension
    declined(_lines(3), suffix=b"user\x01x")  # a user property after sluice's
    # a property the broker added on one message only
    data = _as_pulled(_lines(1)) + _as_pulled(_lines(1), first=1, suffix=b"")
    assert _to_batch_fast(rm.decode_pulled(data, 10**9)) is None
    # a timestamp that is not a number (the per-message path fails on it, as before)
    bad_stamp = b"sluice.writer\x010123456789abcdef\x02UNIQ_KEY\x01" + b"A" * 32 + b"\x02"
    for stamp in (b"sluice.ts\x01x1\x02", b"sluice.ts\x01" + b"1" * 19 + b"\x02"):
        assert _to_batch_fast(rm.decode_pulled(_stored(0, b"v", bad_stamp + stamp), 9)) is None
    # a separator inside the writer tag, no writer tag
    for props in (
        b"sluice.writer\x010123456789a\x02x\x01f\x02UNIQ_KEY\x01" + b"A" * 32 + b"\x02",
        b"UNIQ_KEY\x01x\x02",
    ):
        data = _stored(0, b"v", props)
        assert _to_batch_fast(rm.decode_pulled(data, 10**9)) is None
        ((_, batch),) = _decode_chunk(data, 10**9)
        assert batch.equals(_slow(data, 10**9))


def test_compressed_or_ipv6_messages_take_the_general_decoder() -> None:
    data = _stored(0, b"v", b"a\x011\x02", sys_flag=rm.BORNHOST_V6_FLAG)
    assert rm.decode_pulled(data, 10**9) is None


def test_malformed_pull_bodies_are_refused() -> None:
    good = _as_pulled(_lines(2))
    with pytest.raises(rm.RemotingError, match="bytes missing"):
        rm.decode_pulled(good[:-3], 10**9)
    with pytest.raises(rm.RemotingError, match="truncated"):
        rm.decode_pulled(good + b"\x00\x00", 10**9)
    with pytest.raises(rm.RemotingError, match="size 0"):
        rm.decode_pulled(b"\x00" * 100, 10**9)
    overrun = bytearray(_stored(0, b"body", b""))
    struct.pack_into(">i", overrun, 84, 1_000)  # body length past the message end
    with pytest.raises(rm.RemotingError, match="body overruns"):
        rm.decode_pulled(bytes(overrun), 10**9)
    overrun = bytearray(_stored(0, b"body", b"a\x01b"))
    struct.pack_into(">H", overrun, len(overrun) - 5, 50)  # properties past the end
    with pytest.raises(rm.RemotingError, match="properties overrun"):
        rm.decode_pulled(bytes(overrun), 10**9)
    assert len(rm.decode_pulled(b"", 10**9).offsets) == 0


def test_gather_copies_short_long_and_empty_ranges() -> None:
    import numpy as np

    data = np.frombuffer(b"0123456789abcdefghijklmnopqrstuvwxyz", np.uint8)
    starts = np.array([0, 3, 5, 34], np.int64)
    lengths = np.array([0, 1, 20, 2], np.int64)
    assert rm.gather(data, starts, lengths).to_pylist() == [
        b"",
        b"3",
        b"56789abcdefghijklmno",
        b"yz",
    ]


def test_prefetched_pulls_keep_their_order_and_raise_errors_in_place() -> None:
    def pulls() -> Iterator[bytes]:
        yield b"a"
        yield b"b"
        raise rm.RemotingError("broker gone")

    got = _prefetched(pulls)
    assert [next(got), next(got)] == [b"a", b"b"]
    with pytest.raises(rm.RemotingError, match="broker gone"):
        next(got)


def test_closing_a_prefetching_read_stops_its_helper_thread() -> None:
    def endless() -> Iterator[bytes]:
        while True:
            yield b"x"

    got = _prefetched(endless)
    assert next(got) == b"x"
    got.close()
    assert not [t for t in threading.enumerate() if t.name == "sluice-rocketmq-pull"]


# ------------------------------------------------------------ connection read-ahead (loopback)
def _serve_once(reply: Callable[[list[int]], list[bytes]], requests: int) -> tuple[str, Any]:
    """A one-connection server on 127.0.0.1: reads ``requests`` frames, then sends the chunks
    ``reply(opaques)`` returns, one ``sendall`` each, and closes."""
    import json
    import socket

    server = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as stream:
            opaques = []
            for _ in range(requests):
                length, header_len = struct.unpack(">ii", stream.read(8))
                opaques.append(json.loads(stream.read(header_len))["opaque"])
                stream.read(length - 4 - header_len)
            for chunk in reply(opaques):
                conn.sendall(chunk)
        server.close()

    thread = threading.Thread(target=run)
    thread.start()
    return f"127.0.0.1:{server.getsockname()[1]}", thread


def _frame(opaque: int, body: bytes) -> bytes:
    import json

    header = json.dumps({"code": 0, "flag": 1, "opaque": opaque, "extFields": {"n": 1}}).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def test_a_connection_reads_several_responses_from_one_receive() -> None:
    def reply(opaques: list[int]) -> list[bytes]:
        data = b"".join(_frame(o, bytes([n]) * (n * 700_000)) for n, o in enumerate(opaques))
        return [data[:-5], data[-5:]]  # two and a half responses at once, then the rest

    address, thread = _serve_once(reply, 3)
    conn = rm.Connection(address, timeout_s=10)
    responses = conn.pipeline([rm._Request(rm.PULL_MESSAGE, {}) for _ in range(3)])
    assert [r.body for r in responses] == [b"", b"\x01" * 700_000, b"\x02" * 1_400_000]
    assert responses[1].field("n") == "1"
    conn.close()
    thread.join()


def test_a_connection_closed_mid_response_is_a_remoting_error() -> None:
    address, thread = _serve_once(lambda opaques: [_frame(opaques[0], b"body")[:-2]], 1)
    conn = rm.Connection(address, timeout_s=10)
    with pytest.raises(rm.RemotingError, match="closed the connection"):
        conn.pipeline([rm._Request(rm.PULL_MESSAGE, {})])
    assert conn.broken
    thread.join()


def test_the_pool_does_not_reuse_a_connection_the_broker_closed() -> None:
    """A broker closes connections idle for 120 s: a request written to one would be lost, so
    the pool checks an idle connection before it reuses it."""
    address, thread = _serve_once(lambda opaques: [_frame(opaques[0], b"one")], 1)
    pool = rm.Pool()
    assert pool.invoke(address, rm.PULL_MESSAGE, {}, timeout_s=10).body == b"one"
    thread.join()  # the server has answered and closed its side
    [idle] = pool._idle[address]
    wait_until(lambda: not idle.alive(), 10, "the closed connection to show")
    with pytest.raises(rm.RemotingError, match="cannot connect"):
        # the only idle connection is dead, so the pool connects anew (and nobody listens now)
        pool.invoke(address, rm.UPDATE_AND_CREATE_TOPIC, {}, timeout_s=2)
    assert pool._idle.get(address) == []


def test_a_live_idle_connection_is_reused() -> None:
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"
    conn = rm.Connection(address, timeout_s=5)
    peer, _ = server.accept()
    assert conn.alive()
    pool = rm.Pool()
    pool._release(conn)
    assert pool._acquire(address, 5) == (conn, True)
    peer.close()
    server.close()
    conn.close()
    assert not conn.alive()


def test_an_undecodable_pull_response_fails_the_read_as_a_bus_error() -> None:
    from sluice.bus.base import BusError

    with pytest.raises(BusError, match=r"could not be decoded: .*size 0"):
        list(_decode_chunk(b"\x00" * 100, 10**9))


class _BusyBroker:
    """Stands in for a broker's answers to SEND_BATCH_MESSAGE (the retry logic is what is
    tested; the real broker's flow control cannot be made to answer busy on demand): queue 1's
    first `busy` sends are SYSTEM_BUSY, everything else is stored at the next offset."""

    def __init__(self, busy: int) -> None:
        self.busy, self.sent, self.next = busy, [], {0: 0, 1: 0}

    def broker(self, address: str, requests: list) -> list:
        out = []
        for _code, ext, body in requests:
            q = ext["queueId"] if "queueId" in ext else ext["e"]  # the bus's stand-in, or V2
            self.sent.append((q, bytes(body)))
            if q == 1 and self.busy > 0:
                self.busy -= 1
                out.append(rm.Response(rm.SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]broker busy", {}, b""))
                continue
            out.append(rm.Response(rm.SUCCESS, "", {"queueOffset": str(self.next[q])}, b""))
            self.next[q] += 1
        return out

    def failed(self, where: str, resp: Any) -> Exception:
        return rm.RocketMQUnavailable(f"{where}: code {resp.code}: {resp.remark}")


def test_a_busy_broker_gets_the_same_batch_again_and_each_queue_keeps_its_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from sluice.bus.rocketmq import _log as rocketmq_log

    monkeypatch.setattr(rm, "BUSY_PAUSE_S", 0.001)
    log_ = object.__new__(rocketmq_log.RocketMQLog)
    where = {q: SimpleNamespace(address="b1", queue_id=q) for q in (0, 1)}
    log_._queue = lambda topic, q: where[q]  # type: ignore[method-assign]
    log_._send_ext = lambda topic, qid: {"queueId": qid}  # type: ignore[method-assign]
    checks: list[int] = []

    def pending() -> dict:
        return {q: iter([(b"%d-a" % q, 1), (b"%d-b" % q, 1)]) for q in (0, 1)}

    log_.client = broker = _BusyBroker(busy=3)  # type: ignore[assignment]
    ends = log_._send_rounds("t", pending(), lambda: checks.append(1))
    assert ends == {0: 2, 1: 2}
    queue_1 = [body for q, body in broker.sent if q == 1]
    assert queue_1 == [b"1-a"] * 4 + [b"1-b"]  # resent until stored, the next one only after
    assert len(checks) >= 2 + 3  # each round and each resend checks the writer still owns it

    # past the retry time, a busy answer fails the send as retriable (naming topic and queue)
    monkeypatch.setattr(rm, "BUSY_RETRY_S", 0.0)
    log_.client = _BusyBroker(busy=1)  # type: ignore[assignment]
    with pytest.raises(rm.RocketMQUnavailable, match=r"send to topic 't' queue 1: code 2"):
        log_._send_rounds("t", pending(), lambda: None)


def test_a_connectors_send_rides_out_a_busy_broker_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The RocketMQ sink connector and the replicators send through `send_encoded`: a batch the
    broker's flow control refused is sent again, not failed at once (found by CI under load)."""
    from types import SimpleNamespace

    monkeypatch.setattr(rm, "BUSY_PAUSE_S", 0.001)
    client = object.__new__(rm.RocketMQClient)
    stand_in = _BusyBroker(busy=2)
    client.broker = stand_in.broker  # type: ignore[method-assign]
    client.group = "g"  # type: ignore[attr-defined]
    queue = SimpleNamespace(address="b1", queue_id=1, broker="b")
    rows = pa.table(
        {
            "key": pa.array([b"k"], pa.binary()),
            "value": pa.array([b"v"], pa.binary()),
            "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
            "headers": pa.array([None], pa.string()),
        }
    )
    encoded = rm.encode_messages(rows, "sluice.writer", "w")
    assert client.send_encoded("t", queue, encoded) == 1
    assert [q for q, _ in stand_in.sent] == [1, 1, 1]  # twice busy, then stored
