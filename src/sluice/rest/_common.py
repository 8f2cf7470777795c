"""What both faces share: the herder of the request and JSON body parsing with clear errors."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from sluice.runtime.herder import BadRequest, Herder


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
