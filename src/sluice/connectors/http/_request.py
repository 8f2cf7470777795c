"""Turning records into HTTP requests: URL templates, bodies (raw, JSON, CloudEvents 1.0), headers,
idempotency keys; and a parked request to and from the headers of a retry-topic record.

A parked request never carries what the config resolved (`${file:…}`/`${env:…}` in `url` or
`headers`, the auth header): the retry topic is readable over REST, by `sluice topics peek` and
on disk. It keeps the values the record gave the URL template's placeholders, and the URL is
rendered again from the config when the request is sent again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any
from urllib.parse import quote, urlsplit

from sluice.connectors.http._config import _PLACEHOLDER, HttpConfig
from sluice.sdk import ConnectRecord

#: Headers of a parked request in the retry topic (the value is the body, for people to read).
PARKED = "sluice.push."
#: the retry-topic header holding a parked request's due time (unix seconds)
DUE_HEADER = f"{PARKED}due"


@dataclass
class Request:
    """One HTTP request and the records it carries."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    key: str  # the idempotency key
    records: list[ConnectRecord] = field(default_factory=list)
    origins: list[dict[str, Any]] = field(default_factory=list)
    #: the value of each URL placeholder (from the records, never from the config)
    url_values: dict[str, str] = field(default_factory=dict)


def origin(record: ConnectRecord) -> dict[str, Any]:
    """Where a record was read: topic, queue, and its own queue offset (not the one after it)."""
    partition = record.partition or {}
    after = (record.offset or {}).get("queueOffset")
    return {
        "topic": record.topic or partition.get("topic"),
        "queue": partition.get("queueId"),
        "offset": after - 1 if isinstance(after, int) else None,
    }


def idempotency_key(origins: list[dict[str, Any]]) -> str:
    """`<topic>/<queue>/<offset>` for one record; for a batched request, a digest of its
    records' keys (the same records give the same key on a replay)."""
    keys = [f"{o['topic']}/{o['queue']}/{o['offset']}" for o in origins]
    if len(keys) == 1:
        return keys[0]
    return "batch-" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]


def target_of(url: str, by: str) -> str:
    """The target a URL belongs to (its own queue and limits): the URL without its query, or its
    scheme://host:port; never its user and password (target names are shown in progress)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    if by == "host":
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}{parts.path}"


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def url_values(config: HttpConfig, record: ConnectRecord) -> dict[str, str]:
    """The record's value of each URL placeholder, URL-quoted (a missing header or field is a
    `LookupError`)."""
    if config.url.fixed:
        return {}
    o = origin(record)
    out = {}
    for name in config.url.names:
        head, _, rest = name.partition(".")
        if name == "topic":
            value: Any = o["topic"]
        elif name == "queue":
            value = o["queue"]
        elif name == "offset":
            value = o["offset"]
        elif name == "key":
            value = record.key
        elif head == "header":
            value = (record.extensions or {}).get(rest)
        else:
            value = _field(json_value(record.value), rest)
        if value is None:
            raise LookupError(f"URL placeholder {{{name}}} has no value in this record")
        out[name] = quote(_text(value), safe="")
    return out


def render_url(config: HttpConfig, values: dict[str, str]) -> str:
    """The config's URL with each placeholder replaced by its value in `values`."""
    if config.url.fixed:
        return config.url.text

    def one(match: Any) -> str:
        name = match.group(1)
        if name not in values:
            raise LookupError(f"URL placeholder {{{name}}} has no value in the parked request")
        return values[name]

    return _PLACEHOLDER.sub(one, config.url.text)


def expand_url(config: HttpConfig, record: ConnectRecord) -> str:
    """The record's URL (placeholders URL-quoted; a missing header or field is an error)."""
    return render_url(config, url_values(config, record))


def _field(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def json_value(value: Any) -> Any:
    """A record value as JSON data: structures as they are; text that is JSON as that JSON;
    other text as a string; binary as base64 text."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _dumps(data: Any) -> bytes:
    return json.dumps(data, default=str, ensure_ascii=False, separators=(",", ":")).encode()


def raw_body(value: Any) -> tuple[bytes, str]:
    """The value as is, with its content type."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), "application/octet-stream"
    if isinstance(value, str):
        return value.encode("utf-8"), "text/plain; charset=utf-8"
    if value is None:
        return b"", "application/octet-stream"
    return _dumps(value), "application/json"


def _event(config: HttpConfig, record: ConnectRecord, key: str) -> dict[str, Any]:
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": key,
        "source": config.ce_source,
        "type": config.ce_type,
        "datacontenttype": "application/json",
        "data": json_value(record.value),
    }
    if record.key is not None:
        event["subject"] = _text(record.key)
    if record.timestamp is not None:
        ts = record.timestamp if record.timestamp.tzinfo else record.timestamp.replace(tzinfo=UTC)
        event["time"] = ts.isoformat().replace("+00:00", "Z")
    return event


def build(
    config: HttpConfig,
    url: str,
    records: list[ConnectRecord],
    values: dict[str, str] | None = None,
) -> Request:
    """The request carrying `records` (one, or a batch) to `url`, rendered from `values`."""
    origins = [origin(r) for r in records]
    key = idempotency_key(origins)
    headers: dict[str, str] = {}
    if len(records) == 1 and config.forward:
        for name, value in (records[0].extensions or {}).items():
            if "*" in config.forward or name in config.forward:
                headers[config.forward_prefix + name] = value
    if config.body == "cloudevents" and config.ce_mode == "binary":
        record = records[0]
        event = _event(config, record, key)
        del event["data"], event["datacontenttype"]
        headers.update({f"ce-{k}": str(v) for k, v in event.items()})
        body, ctype = raw_body(record.value)
        if ctype == "application/json" or isinstance(json_value(record.value), (dict, list)):
            ctype = "application/json"
    elif config.body == "cloudevents":
        events = [
            _event(config, r, idempotency_key([o])) for r, o in zip(records, origins, strict=True)
        ]
        if len(records) == 1:
            body, ctype = _dumps(events[0]), "application/cloudevents+json"
        else:
            body, ctype = _dumps(events), "application/cloudevents-batch+json"
    elif len(records) > 1:
        body, ctype = _dumps([json_value(r.value) for r in records]), "application/json"
    elif config.body == "json":
        body, ctype = _dumps(json_value(records[0].value)), "application/json"
    else:
        body, ctype = raw_body(records[0].value)
    headers["Content-Type"] = ctype
    headers.update(config.headers)  # static headers win over derived ones
    if config.auth is not None:
        headers[config.auth[0]] = config.auth[1]
    headers[config.idempotency_header] = key
    return Request(config.method, url, headers, body, key, list(records), origins, values or {})


# -- parked requests (the retry topic) ------------------------------------------------------------
def park_headers(
    config: HttpConfig,
    request: Request,
    attempts: int,
    first: float,
    due: float,
    status: Any,
    error: str,
) -> dict[str, str]:
    """What a retry-topic record carries to replay `request` later, from any process: nothing the
    config gave (the URL is stored as its placeholders' values, the static and auth headers not
    at all: they are added again from the config when it is replayed)."""
    headers = dict(request.headers)
    for name in (*config.headers, *(config.auth[:1] if config.auth is not None else ())):
        headers.pop(name, None)
    extra = {}
    originals = [topic_bytes(r.value) for r in request.records]
    if originals != _values(request.body, len(originals)):
        # the body is not the records' own bytes (e.g. text sent as a JSON string): keep these,
        # so that a dead letter of a request read back carries what the topic held
        extra[f"{PARKED}values"] = json.dumps(
            [None if v is None else base64.b64encode(v).decode("ascii") for v in originals]
        )
    return {
        **extra,
        f"{PARKED}url.values": json.dumps(request.url_values, sort_keys=True),
        f"{PARKED}method": request.method,
        f"{PARKED}headers": json.dumps(headers, sort_keys=True),
        f"{PARKED}body": base64.b64encode(request.body).decode("ascii"),
        f"{PARKED}key": request.key,
        f"{PARKED}origins": json.dumps(request.origins),
        f"{PARKED}attempts": str(attempts),
        f"{PARKED}first": repr(first),
        DUE_HEADER: repr(due),
        f"{PARKED}status": "" if status is None else str(status),
        f"{PARKED}error": without_url(error, request.url)[:500],
    }


def without_url(text: str, url: str) -> str:
    """`text` (an error) with `url` shortened to its scheme and host: the rest may hold a
    resolved secret, and the text is stored in the retry or dead-letter topic."""
    return text.replace(url, target_of(url, "host") + "/…") if url else text


def is_parked(record: ConnectRecord) -> bool:
    extensions = record.extensions or {}
    return f"{PARKED}url.values" in extensions or f"{PARKED}url" in extensions


def unpark(config: HttpConfig, record: ConnectRecord) -> tuple[Request, int, float, float]:
    """A retry-topic record back into (request, attempts, first attempt, due), epoch seconds.
    The URL is rendered from the config as it is now (`LookupError` if a placeholder it has now
    was not in the template the request was parked under)."""
    h = record.extensions
    headers = json.loads(h[f"{PARKED}headers"])
    headers.update(config.headers)
    if config.auth is not None:
        headers[config.auth[0]] = config.auth[1]
    if f"{PARKED}url.values" in h:
        values = json.loads(h[f"{PARKED}url.values"])
        url = render_url(config, values)
    else:  # parked by an earlier version, which stored the URL itself
        values, url = {}, h[f"{PARKED}url"]
    origins = json.loads(h[f"{PARKED}origins"])
    body = base64.b64decode(h[f"{PARKED}body"])
    if f"{PARKED}values" in h:
        stored = json.loads(h[f"{PARKED}values"])
        kept = [None if v is None else base64.b64decode(v) for v in stored]
    else:
        kept = _values(body, len(origins))
    originals = [
        ConnectRecord(
            value=value,
            topic=o["topic"],
            partition={"topic": o["topic"], "queueId": o["queue"]},
            offset={"queueOffset": o["offset"] + 1} if isinstance(o["offset"], int) else None,
            timestamp=record.timestamp,
        )
        for o, value in zip(origins, kept, strict=True)
    ]
    request = Request(
        h[f"{PARKED}method"], url, headers, body, h[f"{PARKED}key"], originals, origins, values
    )
    first = float(h.get(f"{PARKED}first") or time.time())
    due = float(h.get(f"{PARKED}due") or time.time())
    return request, int(h.get(f"{PARKED}attempts") or 0), first, due


def topic_bytes(value: Any) -> bytes | None:
    """A sink record's value as the topic held it: bytes as they are, text as UTF-8 (never
    quoted), null as null, a struct or map as JSON text."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return _dumps(value)


def _values(body: bytes, n: int) -> list[bytes]:
    """Each original record's value in a parked request's body (what a dead letter carries): the
    elements of a batch's JSON array, or the body itself for a one-record request.

    Never one copy of the whole body per record: a parked batch of 500 records of 2 KB would
    become 500 MB when read back (found by the stalled-target test)."""
    if n > 1:
        try:
            elements = json.loads(body)
        except ValueError:
            elements = None
        if isinstance(elements, list) and len(elements) == n:
            return [_dumps(e) for e in elements]
    return [body] * n  # one shared bytes object, not n copies
