"""RocketMQ message encoding and decoding (pure logic: bytes in, bytes out, no broker)."""

from __future__ import annotations

import struct

import pyarrow as pa

from sluice.bus.rocketmq._log import _encode_rows, _encode_vectorised, _send_bodies, _to_batch
from sluice.clients import rocketmq as rm


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
    bodies = list(_send_bodies(pa.chunked_array([messages.slice(0, 2_500), messages.slice(2_500)])))
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
