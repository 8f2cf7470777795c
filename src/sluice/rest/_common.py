"""What both faces share: the herder of the request and JSON body parsing with clear errors."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Path, Request

from sluice.runtime.herder import BadRequest, Herder

#: A connector name: non-empty, no `/`, no surrounding white space (what a herder accepts).
# Spelled out: Python's str.strip() (the herder's check) also strips \x1c-\x1f and \x85,
# which JSON Schema's \s does not cover.
NAME_PATTERN = r"^[^/\s\x1c-\x1f\x85](?:[^/]*[^/\s\x1c-\x1f\x85])?$"
ConnectorName = Annotated[str, Path(pattern=NAME_PATTERN, description="connector name")]

#: A config value: JSON strings, numbers and booleans are accepted (rendered as strings).
ConfigValue = str | bool | int | float

#: The JSON schema of a connector config map (`connector.class` and string-like values).
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["connector.class"],
    "properties": {"connector.class": {"type": "string", "minLength": 1}},
    "additionalProperties": {"type": ["string", "number", "integer", "boolean"]},
}


def herder_of(request: Request) -> Herder:
    return request.app.state.herder


def parse_json_object(text: str | bytes, what: str) -> dict[str, Any]:
    """`text` parsed as a JSON object, or BadRequest saying what is wrong with it."""
    if not text or not text.strip():
        raise BadRequest(f"{what} is required (a JSON object)")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{what} is malformed JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object, got {type(value).__name__}")
    return value
