"""Typed connector configuration.

Connector options arrive as a flat map of strings (`{"filename": "/tmp/a.txt", "max.tasks": "2"}`).
A connector declares its keys once with `ConfigDef` and gets back typed values; every problem is a
`ConfigException` naming the key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sluice.sdk._errors import ConfigException

_REQUIRED = object()

#: What REST, CLI and logs show instead of a secret (Kafka Connect's mask).
PASSWORD_MASK = "********"


def closest(word: str, choices: Iterable[str], *, cutoff: float = 0.75) -> str | None:
    """The one of `choices` that `word` most likely misspells, or None when none is close: the
    one "did you mean" of sluice (unknown config keys, worker keys, plugin class names)."""
    near = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=cutoff)
    return near[0] if near else None


def redact_url(url: str) -> str:
    """`url` fit for a message or a log line: a password in its authority
    (`scheme://user:pw@host`) or in a `password=` query parameter is masked."""
    try:
        parts = urlsplit(url[5:] if url.lower().startswith("jdbc:") else url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    out = url
    if password:
        out = out.replace(f":{password}@", f":{PASSWORD_MASK}@")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "password" and value:
            out = out.replace(f"password={value}", f"password={PASSWORD_MASK}")
    return out


def _as_bool(key: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ConfigException(key, f"expected a boolean (true/false), got {raw!r}")


def _as_int(key: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigException(key, f"expected an integer, got {raw!r}") from None
    if not -(2**63) <= value < 2**63:  # what Spark, Arrow and the stores hold (a Java long)
        raise ConfigException(key, f"expected a 64-bit integer, got {raw.strip()}")
    return value


def _as_list(key: str, raw: str) -> list[str]:
    return [part.strip() for part in raw.replace(";", ",").split(",") if part.strip()]


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "string": lambda key, raw: raw,
    # a secret: parsed like a string, but shown as `********` by REST, CLI and logs
    "password": lambda key, raw: raw,
    # a local file or folder: the worker's `file.allowed.dirs` limits where it may point
    "path": lambda key, raw: raw,
    "int": _as_int,
    "bool": _as_bool,
    "list": _as_list,
}


@dataclass(frozen=True)
class ConfigKey:
    """One declared configuration key: its type, default and documentation.

    `type` is one of `string`, `int`, `bool`, `list`, `password` (a secret: never shown or
    logged, see `PASSWORD_MASK`) and `path` (a local file the worker may confine with its
    `file.allowed.dirs`).
    """

    name: str
    type: str = "string"
    default: Any = _REQUIRED
    doc: str = ""
    choices: tuple[str, ...] = ()
    min: int | None = None
    #: a regular expression a string value must match in full (e.g. allowed characters)
    pattern: str | None = None
    #: Kafka's `ConfigDef.Validator`: given the typed value, returns why it is unusable (or None).
    #: Run by `ConfigDef.problems` (create-time validation, driver), never by `parse`, so a task
    #: starting on an executor does not repeat checks such as "the file exists".
    check: Callable[[Any], str | None] | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


def normalize_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Turn a user's config map into the string map connectors see.

    Numbers and booleans are accepted and rendered as strings (JSON bodies often carry them);
    anything else (lists, objects, null) is rejected with the key named.
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise ConfigException(str(key), "config keys must be non-empty strings")
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            out[key] = str(value)
        else:
            raise ConfigException(
                key,
                f"value of type {type(value).__name__} is not supported; "
                "config values must be strings, numbers or booleans",
            )
    return out


class ConfigDef:
    """The set of keys a connector understands; `parse` validates a config against it."""

    def __init__(self, *keys: ConfigKey) -> None:
        for key in keys:
            if key.type not in _PARSERS:
                raise ValueError(f"config key {key.name}: unknown type {key.type!r}")
        self.keys = {k.name: k for k in keys}

    def parse(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Typed values for every declared key (defaults filled in). Unknown keys pass through.
        Raises the first problem as a `ConfigException` naming its key."""
        raw = normalize_config(config)
        return {name: _value(key, raw) for name, key in self.keys.items()}

    def problems(self, config: Mapping[str, Any]) -> list[ConfigException]:
        """Every declared key's problem, one per bad key, `check`s included (for validation)."""
        try:
            raw = normalize_config(config)
        except ConfigException as exc:
            return [exc]
        found = []
        for key in self.keys.values():
            try:
                value = _value(key, raw)
                why = key.check(value) if key.check is not None and value is not None else None
            except ConfigException as exc:
                found.append(exc)
                continue
            if why:
                found.append(ConfigException(key.name, why))
        return found


def _value(key: ConfigKey, raw: Mapping[str, str]) -> Any:
    name = key.name
    if name not in raw or raw[name].strip() == "":
        if key.required:
            raise ConfigException(name, "required key is missing", suggestion=key.doc or None)
        return key.default
    value = _PARSERS[key.type](name, raw[name])
    if key.choices and value not in key.choices:
        raise ConfigException(name, f"must be one of {', '.join(key.choices)}, got {value!r}")
    if key.pattern is not None and not re.fullmatch(key.pattern, str(value)):
        raise ConfigException(name, f"{value!r} does not match the pattern {key.pattern}")
    if key.min is not None and value < key.min:
        raise ConfigException(name, f"must be at least {key.min}, got {value}")
    return value
