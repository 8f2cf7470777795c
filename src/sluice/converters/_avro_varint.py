"""Zig-zag varints (Avro `int` / `long`) for whole columns, eight bytes at a time.

A varint keeps 7 bits per byte, low groups first, with the high bit set on every byte but the
last. Up to 8 bytes (values below 2**56) the groups of one value fit a uint64 word: writing
spreads the 56 bits into 8 bytes of 7 and reading packs them back, each in three shift-and-mask
steps over the whole column, instead of one masked pass per byte. The rare 9- and 10-byte varints
(the largest longs) take a byte-at-a-time path of their own.
"""

from __future__ import annotations

import numpy as np

_U = np.uint64
_HIGH = _U(0x8080808080808080)
_LOW7 = _U(0x7F7F7F7F7F7F7F7F)
# The pack steps, (low half, high half as spread, shift): 7-bit groups in 8-bit lanes become 14
# in 16, then 28 in 32, then 56; spreading runs them backwards.
_STEPS = (
    (_U(0x007F007F007F007F), _U(0x7F007F007F007F00), _U(1)),
    (_U(0x00003FFF00003FFF), _U(0x3FFF00003FFF0000), _U(2)),
    (_U(0x000000000FFFFFFF), _U(0x0FFFFFFF00000000), _U(4)),
)
# Continuation bits of a varint of each size (0 … 10 bytes) within its first 8 bytes.
_CONTINUE = np.array(
    [0, *(0x8080808080808080 & ((1 << (8 * (k - 1))) - 1) for k in range(1, 9)), *[int(_HIGH)] * 2],
    dtype=np.uint64,
)
#: A value needs k+1 bytes once it reaches 2**(7k).
_STEP_VALUES = [1 << (7 * k) for k in range(1, 10)]


def zigzag(values: np.ndarray) -> np.ndarray:
    """Signed integers → their zig-zag form (small magnitudes small), as uint64."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def unzigzag(z: np.ndarray) -> np.ndarray:
    return (z >> _U(1)).view(np.int64) ^ -(z & _U(1)).view(np.int64)


def sizes(z: np.ndarray) -> np.ndarray:
    """Bytes of each varint (1 … 10), int64."""
    out = np.ones(len(z), dtype=np.int64)
    top = int(z.max()) if len(z) else 0
    for step in _STEP_VALUES:
        if top < step:
            break
        out += z >= _U(step)
    return out


def encode(z: np.ndarray, size: np.ndarray, width: int) -> np.ndarray:
    """The varints of `z` (sizes `size`) left-aligned in a (len(z), width) byte matrix; bytes past
    a varint's size hold zeros. `width` is at least the largest size."""
    if width == 1:  # below 128: the byte is the value
        return z.astype(np.uint8)[:, None]
    x = z & _U(2**56 - 1)
    for low, high, shift in reversed(_STEPS):
        x = (x & low) | ((x << shift) & high)
    x |= _CONTINUE[size]
    words = x.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
    if width <= 8:
        return words[:, :width]
    out = np.zeros((len(z), width), dtype=np.uint8)
    out[:, :8] = words
    out[:, 8] = ((z >> _U(56)) & _U(0x7F)) | np.where(size > 9, _U(0x80), _U(0))
    if width > 9:
        out[:, 9] = z >> _U(63)
    return out


def decode(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(zig-zag value, size) of the varint starting each 8-byte little-endian word; size 9 where
    no byte of the word ends the varint (9 bytes or more: see `decode_long`)."""
    stop = ~words & _HIGH  # high bit clear: the varint's last byte
    last = stop & (~stop + _U(1))  # the lowest of those bits
    below = last - _U(1)  # the bits under it: 8 per earlier byte, plus 7 (all 64 when none)
    x = words & (below | last) & _LOW7
    for low, high, shift in _STEPS:
        x = (x & low) | ((x & high) >> shift)
    return x, (np.bitwise_count(below).astype(np.int64) >> 3) + 1


def decode_long(data: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(zig-zag value, size, ok) of varints of 9 or 10 bytes at `data[pos]`; not ok when the 10th
    byte still says more follows or holds more than bit 63 (it would not fit a long)."""
    value = np.zeros(len(pos), dtype=np.uint64)
    size = np.zeros(len(pos), dtype=np.int64)
    active = np.arange(len(pos))
    for j in range(10):
        byte = data[pos[active] + j].astype(np.uint64)
        value[active] |= (byte & _U(0x7F)) << _U(7 * j)
        done = byte < 0x80
        if j == 9:
            done &= byte <= 1
        size[active[done]] = j + 1
        active = active[~done]
    return value, size, size > 0


__all__ = ["decode", "decode_long", "encode", "sizes", "unzigzag", "zigzag"]
