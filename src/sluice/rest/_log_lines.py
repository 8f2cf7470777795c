"""One log record, one line: control characters in the values a log line quotes are escaped.

Names, keys and paths in log lines come from requests; a newline in one of them (a config key
`"a\\n2024-01-01 00:00:00,000 INFO sluice.worker: admin logged in"`) forged a line of the
worker's log. Requests with such keys or names are refused (400), and on every log handler
this filter escapes control characters (`\\n` → `\\\\n`, `\\x1b` → `\\\\x1b`) in the string
arguments of a record, the parts a log call fills in. The format strings, written in sluice,
and tracebacks keep their lines.
"""

from __future__ import annotations

import logging
import re
from typing import Any

#: C0 controls but tab, DEL, C1 controls, and the Unicode line and paragraph separators
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def escape_controls(text: str) -> str:
    """`text` with its control characters written as escapes (`\\n`, `\\x1b`, `\\u2028`)."""
    if _CONTROL.search(text) is None:
        return text

    def one(match: re.Match[str]) -> str:
        char = match.group()
        if char in _NAMED:
            return _NAMED[char]
        return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"

    return _CONTROL.sub(one, text)


def has_control(text: str) -> bool:
    """True if `text` holds a character `escape_controls` would escape."""
    return _CONTROL.search(text) is not None


def _escaped(value: Any) -> Any:
    return escape_controls(value) if isinstance(value, str) else value


class EscapeControls(logging.Filter):
    """A handler filter escaping control characters in a record's string arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args:
            record.args = tuple(_escaped(a) for a in args)
        elif isinstance(args, dict) and args:
            record.args = {k: _escaped(v) for k, v in args.items()}
        return True


_FILTER = EscapeControls()


def install_log_escaper() -> None:
    """Put `EscapeControls` on every handler of the root logger and of the loggers configured
    so far (as `sluice.runtime.secrets.install_log_scrubber` does); again: new handlers only."""
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                # before the secret scrubber: it may fold the arguments into the message
                handler.filters.insert(0, _FILTER)


__all__ = ["EscapeControls", "escape_controls", "has_control", "install_log_escaper"]
