"""``.properties`` text read by the rules of ``java.util.Properties.load``.

The one parser of the worker config (`sluice.runtime.worker_config`), the ``${file:…}`` config
provider and the CLI's connector config files (`sluice.cli`), so a file means the same to all of
them and to RocketMQ Connect / Kafka Connect, which read it with Java:

* lines end at ``\\n``, ``\\r`` or ``\\r\\n``; leading blanks (space, tab, form feed) are skipped;
* a line whose first non-blank character is ``#`` or ``!`` is a comment, a blank line is skipped;
* a line ending in an odd number of backslashes continues on the next line, whose leading blanks
  are dropped (a continuation line is never a comment; a blank one ends the entry);
* the key ends at the first unescaped ``=``, ``:`` or blank; blanks around one ``=``/``:`` are
  skipped, so ``a = b``, ``a:b`` and ``a b`` all give ``("a", "b")``; the value keeps its
  trailing blanks, and a line with a key only has the value ``""``;
* ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are decoded, ``\\<other>`` is ``<other>``;
* a repeated key keeps its last value.

Unlike Java, an entry with an empty key and a malformed ``\\uXXXX`` raise `PropertiesError`
(Java throws on the second too) naming the line, because no sluice key is empty.

This module imports nothing of sluice: every layer may use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["PropertiesError", "parse_properties"]

_BLANKS = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LINE_END = re.compile(r"\r\n|\r|\n")
_HEX = frozenset("0123456789abcdefABCDEF")


class PropertiesError(ValueError):
    """An entry no sluice reader accepts; ``line`` is its first line (1-based), ``reason`` says
    what is wrong. Callers add the file name in their own error type."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def parse_properties(text: str) -> dict[str, str]:
    """The entries of ``text`` by java.util.Properties' rules (see the module docstring)."""
    entries: dict[str, str] = {}
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split_entry(line)
        key = _unescape(raw_key, number)
        if not key:
            raise PropertiesError(number, f"an entry has no key: {line!r}")
        entries[key] = _unescape(raw_value, number)
    return entries


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each entry, continuation lines joined."""
    pending: str | None = None
    start = 0
    for number, raw in enumerate(_LINE_END.split(text), start=1):
        line = raw.lstrip(_BLANKS)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start, pending = number, ""
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2 == 1:
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = None
    if pending:
        # A continuation on the last line: Java keeps what it has, so do we.
        yield start, pending


def _split_entry(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in _SEPARATORS or char in _BLANKS:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_BLANKS)
    if rest[:1] and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str, number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not _HEX.issuperset(digits):
                raise PropertiesError(number, f"malformed \\u escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
