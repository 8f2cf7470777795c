"""Turning what the user typed or pointed at into request bodies.

- ``-c key=value`` options (``parse_assignments``),
- connector config files, JSON or Java-style ``key=value`` properties (``load_config_file``),
- offsets documents ``{"offsets": [{"partition": {…}, "offset": {…} | null}]}``
  (``parse_offsets``).

Every problem raises ``UsageProblem`` (exit code 2) with a message naming the file, line or key,
because the user can fix it without looking at the worker.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sluice import _properties

from ._errors import UsageProblem

__all__ = [
    "load_config_file",
    "merge_config",
    "parse_assignments",
    "parse_offsets",
    "parse_properties",
    "read_source",
]


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}``: split at the first ``=``, last wins."""
    config: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageProblem(f"-c expects key=value, got {item!r}")
        config[key] = value
    return config


# -- properties files ---------------------------------------------------------------------------


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Parse ``key=value`` text with java.util.Properties rules (`sluice._properties`): comments
    start with ``#`` or ``!``, the separator is ``=``, ``:`` or blanks, a trailing backslash
    continues a line, escapes are decoded, a repeated key keeps its last value. ``source`` names
    the file in error messages."""
    try:
        return _properties.parse_properties(text)
    except _properties.PropertiesError as exc:
        raise UsageProblem(f"{source}, line {exc.line}: {exc.reason}") from None


# -- JSON config files --------------------------------------------------------------------------


def _as_config_value(key: str, value: Any, source: str) -> str:
    # Connector options travel as strings (what a properties file gives too); JSON scalars are
    # spelled the way a Java properties file would spell them.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise UsageProblem(
        f"{source}: the value of {key!r} must be a string, number or boolean, "
        f"not {type(value).__name__ if value is not None else 'null'}"
    )


def _config_from_json(text: str, source: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise UsageProblem(f"{source} must hold a JSON object of config keys")
    # Also accept the POST body shape {"name": …, "config": {…}}, which is what people keep.
    if isinstance(doc.get("config"), dict) and set(doc) <= {"name", "config"}:
        doc = doc["config"]
    return {str(k): _as_config_value(str(k), v, source) for k, v in doc.items()}


def read_source(spec: str) -> tuple[str, str]:
    """Read ``spec`` (a path, or ``-`` for stdin): ``(text, name for messages)``."""
    if spec == "-":
        return sys.stdin.read(), "<stdin>"
    path = Path(spec)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        raise UsageProblem(f"file not found: {spec}") from None
    except IsADirectoryError:
        raise UsageProblem(f"{spec} is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"cannot read {spec}: {exc}") from exc


def load_config_file(spec: str) -> dict[str, str]:
    """Load a connector config from a ``.json`` or properties file (``-`` reads stdin).

    The format follows the suffix (``.json``; ``.properties``/``.conf``/``.cfg``); with another
    suffix a document starting with ``{`` is JSON and anything else is properties.
    """
    text, source = read_source(spec)
    suffix = Path(spec).suffix.lower() if spec != "-" else ""
    if suffix == ".json":
        return _config_from_json(text, source)
    if suffix in {".properties", ".conf", ".cfg"}:
        return parse_properties(text, source=source)
    if text.lstrip().startswith("{"):
        return _config_from_json(text, source)
    return parse_properties(text, source=source)


def merge_config(config_file: str | None, assignments: Iterable[str]) -> dict[str, str]:
    """The config a command sends: the file's keys, then ``-c`` keys on top (they win)."""
    config = load_config_file(config_file) if config_file else {}
    config.update(parse_assignments(assignments))
    return config


# -- offsets ------------------------------------------------------------------------------------


def parse_offsets(spec: str) -> dict[str, Any]:
    """Parse ``offsets set``'s argument: inline JSON, a file path, or ``-`` for stdin.

    The document is ``{"offsets": [{"partition": {…}, "offset": {…} | null}, …]}``; a bare list of
    entries is accepted and wrapped. ``"offset": null`` asks the worker to forget that partition.
    """
    if spec.lstrip().startswith(("{", "[")):
        text, source = spec, "the offsets argument"
    else:
        text, source = read_source(spec)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageProblem(f"{source} is not valid JSON: {exc}") from exc
    if isinstance(doc, list):
        doc = {"offsets": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("offsets"), list):
        raise UsageProblem(f'{source} must be {{"offsets": [{{"partition": …, "offset": …}}]}}')
    for index, entry in enumerate(doc["offsets"]):
        where = f"{source}: offsets[{index}]"
        if not isinstance(entry, dict):
            raise UsageProblem(f"{where} must be an object with 'partition' and 'offset'")
        if not isinstance(entry.get("partition"), dict):
            raise UsageProblem(f"{where}.partition must be an object")
        if "offset" not in entry:
            raise UsageProblem(f"{where} has no 'offset' (use null to remove the position)")
        if entry["offset"] is not None and not isinstance(entry["offset"], dict):
            raise UsageProblem(f"{where}.offset must be an object or null")
    return doc
