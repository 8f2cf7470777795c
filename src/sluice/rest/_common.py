"""What both faces share: the herder of the request and JSON body parsing with clear errors."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Path, Request

from sluice.runtime.herder import (
    CONNECTOR_NAME_MAX,
    CONNECTOR_NAME_PATTERN,
    BadRequest,
    Herder,
)

#: A connector name, as the herder accepts it (`check_connector_name`).
NAME_PATTERN = CONNECTOR_NAME_PATTERN
ConnectorName = Annotated[
    str,
    Path(pattern=NAME_PATTERN, max_length=CONNECTOR_NAME_MAX, description="connector name"),
]

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
    except RecursionError:  # json's parser recurses once per level
        raise BadRequest(f"{what} is nested too deeply (a config is a flat JSON object)") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object, got {type(value).__name__}")
    return value
