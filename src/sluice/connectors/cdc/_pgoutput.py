"""PostgreSQL's `pgoutput` logical decoding messages (protocol version 1) → transactions of changes.

Facts from the PostgreSQL documentation ("Logical Replication Message Formats"): every message
starts with one type byte; integers are big-endian; strings are NUL-terminated. `B` (begin: final
LSN, commit time, xid), `C` (commit: flags, commit LSN, end LSN, commit time), `R` (relation: id,
namespace, name, replica identity, columns with flags/name/type/typmod), `I` / `U` / `D` (insert,
update, delete: relation id then tuples tagged `N` new, `K` old key, `O` old row), `T` (truncate),
`Y` (type), `O` (origin), `M` (message). A tuple lists each column as `n` (null), `u` (unchanged
TOASTed value, not sent) or `t` (text: length + bytes). Times are microseconds since 2000-01-01.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

#: 2000-01-01 minus 1970-01-01, in microseconds: pgoutput's epoch.
PG_EPOCH_US = 946_684_800_000_000
UNCHANGED = object()  # a TOASTed column an update did not change (its value is not sent)


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it (`0/5D65EF40`)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class Relation:
    """A table as a `R` message describes it."""

    id: int
    schema: str
    name: str
    columns: list[str]
    key: list[bool]
    types: list[tuple[int, int]] = field(default_factory=list)  # (type oid, typmod) per column


@dataclass
class Change:
    """One row change: `op` is c/u/d; `before`/`after` map column names to text (or None,
    or `UNCHANGED`); `before` is None when the message carried no old tuple."""

    relation: Relation
    op: str
    before: dict[str, object] | None
    after: dict[str, object] | None
    key_only: bool = False  # `before` has the key columns only (replica identity DEFAULT)


@dataclass
class Transaction:
    """A committed transaction's changes; `end_lsn` is its position."""

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_us: int  # commit time, µs since the Unix epoch
    changes: list[Change] = field(default_factory=list)
    truncated: list[Relation] = field(default_factory=list)


_STRUCTS: dict[str, struct.Struct] = {}
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_NULL, _TOAST, _TEXT, _BINARY = b"n"[0], b"u"[0], b"t"[0], b"b"[0]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        packer = _STRUCTS.get(fmt)
        if packer is None:
            packer = _STRUCTS[fmt] = struct.Struct(fmt)
        out = packer.unpack_from(self.data, self.pos)
        self.pos += packer.size
        return out

    def byte(self) -> str:
        self.pos += 1
        return chr(self.data[self.pos - 1])

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        out = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return out

    def tuple_(self, relation: Relation) -> dict[str, object]:
        # the hot loop of decoding: one call per row image, locals only
        data, pos, columns = self.data, self.pos, relation.columns
        (count,) = _I16.unpack_from(data, pos)
        pos += 2
        known = len(columns)
        row: dict[str, object] = {}
        for i in range(count):
            kind = data[pos]
            pos += 1
            name = columns[i] if i < known else f"#{i}"
            if kind in (_TEXT, _BINARY):
                (length,) = _I32.unpack_from(data, pos)
                pos += 4
                raw = data[pos : pos + length]
                pos += length
                row[name] = raw.decode("utf-8") if kind == _TEXT else raw
            elif kind == _NULL:
                row[name] = None
            elif kind == _TOAST:
                row[name] = UNCHANGED
            else:
                raise ValueError(f"unknown pgoutput tuple column kind {chr(kind)!r}")
        self.pos = pos
        return row


def _relation(r: _Reader) -> Relation:
    (rel_id,) = r.take(">I")
    schema, name = r.string(), r.string()
    r.byte()  # replica identity setting
    (count,) = r.take(">h")
    columns, key, types = [], [], []
    for _ in range(count):
        (flags,) = r.take(">B")
        columns.append(r.string())
        types.append(r.take(">Ii"))  # type oid, typmod
        key.append(bool(flags & 1))
    return Relation(rel_id, schema, name, columns, key, types)


def relation_of(data: bytes) -> Relation:
    """The table an `R` message describes."""
    r = _Reader(bytes(data))
    r.byte()
    return _relation(r)


def commit_end(data: bytes) -> int:
    """The end LSN of a `C` message."""
    return struct.unpack_from(">Q", data, 10)[0]


def transactions(messages: Iterable[bytes], after: int = 0) -> Iterator[Transaction]:
    """Decode a stream of pgoutput messages into committed transactions, in commit order; the
    changes of transactions ending at or before the LSN `after` are skipped, not decoded (their
    commit record lies before it; relation messages are still read)."""
    relations: dict[int, Relation] = {}
    current: Transaction | None = None
    skipping = False
    for data in messages:
        kind = chr(data[0])
        if skipping and kind in "IUDT":
            continue
        r = _Reader(bytes(data))
        r.pos = 1
        if kind == "B":
            final, ts, xid = r.take(">QqI")
            current = Transaction(xid, 0, 0, ts + PG_EPOCH_US)
            skipping = final < after
        elif kind == "C":
            _flags, commit_lsn, end_lsn, ts = r.take(">BQQq")
            if skipping:
                current, skipping = None, False
                continue
            if current is None:
                raise ValueError("pgoutput commit without a begin")
            current.commit_lsn, current.end_lsn, current.commit_us = (
                commit_lsn,
                end_lsn,
                ts + PG_EPOCH_US,
            )
            yield current
            current = None
        elif kind == "R":
            relation = _relation(r)
            relations[relation.id] = relation
        elif kind in ("I", "U", "D"):
            if current is None:
                raise ValueError(f"pgoutput {kind} outside a transaction")
            (rel_id,) = r.take(">I")
            relation = relations[rel_id]
            tag = r.byte()
            if kind == "I":
                current.changes.append(Change(relation, "c", None, r.tuple_(relation)))
            elif kind == "D":
                old = r.tuple_(relation)
                current.changes.append(Change(relation, "d", old, None, key_only=tag == "K"))
            else:
                before, key_only = None, False
                if tag in ("K", "O"):
                    before, key_only = r.tuple_(relation), tag == "K"
                    tag = r.byte()
                current.changes.append(
                    Change(relation, "u", before, r.tuple_(relation), key_only=key_only)
                )
        elif kind == "T":
            if current is None:
                raise ValueError("pgoutput truncate outside a transaction")
            count, _options = r.take(">IB")
            ids = r.take(f">{count}I")
            current.truncated.extend(relations[i] for i in ids if i in relations)
        # Y (type), O (origin), M (message): nothing the envelope carries
