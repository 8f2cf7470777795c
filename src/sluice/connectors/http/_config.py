"""The HTTP sink's configuration: keys, RocketMQ Connect aliases, validation into `HttpConfig`.

Every problem is a `ConfigException` naming the key the user wrote (an alias is named as written).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.push import DEFAULT_NEVER_RETRY, Limits, RetryPolicy
from sluice.sdk import ConfigDef, ConfigException, ConfigKey

#: RocketMQ Connect's `rocketmq-connect-http` keys → ours.
ALIASES = {
    "urlPattern": "url",
    "timeout": "timeout.ms",
    "authType": "auth.type",
    "basicUser": "auth.basic.user",
    "basicPassword": "auth.basic.password",
    "apiKeyName": "auth.apikey.header",
    "apiKeyValue": "auth.apikey.value",
    "headerParameters": "headers",
}
#: RocketMQ Connect's `authType` values → ours.
AUTH_ALIASES = {"BASIC_AUTH": "basic", "API_KEY_AUTH": "apikey", "NONE": "none", "": "none"}
AUTH_TYPES = ("none", "basic", "bearer", "apikey")
BODY_FORMATS = ("raw", "json", "cloudevents")
METHODS = ("POST", "PUT", "PATCH")

KEYS = ConfigDef(
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
    ConfigKey(
        "url",
        doc="target URL, or a template: {topic} {key} {queue} {offset} {header.NAME} {value.FIELD}",
    ),
    ConfigKey("method", default="POST", doc="HTTP method"),
    ConfigKey("headers", default="", doc="static request headers as a JSON object"),
    ConfigKey(
        "headers.forward",
        type="list",
        default=[],
        doc="record headers sent as request headers (names, or * for all)",
    ),
    ConfigKey("headers.forward.prefix", default="", doc="prefix of forwarded header names"),
    ConfigKey("auth.type", default="none", doc="none | basic | bearer | apikey"),
    ConfigKey("auth.basic.user", default=""),
    ConfigKey("auth.basic.password", type="password", default=""),
    ConfigKey("auth.bearer.token", type="password", default=""),
    ConfigKey("auth.apikey.header", default="X-API-Key"),
    ConfigKey("auth.apikey.value", type="password", default=""),
    ConfigKey(
        "body.format",
        default="raw",
        choices=BODY_FORMATS,
        doc="raw (the value as is) | json | cloudevents",
    ),
    ConfigKey("cloudevents.mode", default="structured", choices=("structured", "binary")),
    ConfigKey("cloudevents.source", default="", doc="ce source (default sluice/<connector>)"),
    ConfigKey("cloudevents.type", default="io.sluice.record", doc="ce type"),
    ConfigKey(
        "batch.max.records",
        type="int",
        default=1,
        min=1,
        doc="records per request (>1: a JSON array body)",
    ),
    ConfigKey(
        "batch.max.bytes",
        type="int",
        default=1_048_576,
        min=1,
        doc="body bytes per batched request",
    ),
    ConfigKey("timeout.ms", type="int", default=5000, doc="per request; cancelled after it"),
    ConfigKey("tls.verify", type="bool", default=True, doc="verify the server's certificate"),
    ConfigKey("tls.ca.file", type="path", default="", doc="CA bundle to verify with"),
    ConfigKey(
        "idempotency.header",
        default="Idempotency-Key",
        doc="header carrying <topic>/<queue>/<offset> of the request's record(s)",
    ),
    ConfigKey(
        "push.concurrency",
        type="int",
        default=16,
        min=1,
        doc="requests in flight, for the connector (split among its tasks)",
    ),
    ConfigKey(
        "push.core.concurrency",
        type="int",
        default=0,
        min=0,
        doc="connections kept open (0: = push.concurrency)",
    ),
    ConfigKey(
        "push.target.concurrency",
        type="int",
        default=8,
        min=1,
        doc="requests in flight per target, for the connector (split among its tasks)",
    ),
    ConfigKey(
        "push.queue.limit",
        type="int",
        default=1000,
        min=1,
        doc="queued records per target before the reader blocks",
    ),
    ConfigKey(
        "push.target.by",
        default="url",
        choices=("url", "host"),
        doc="what one target is: a URL (without query) or a host:port",
    ),
    ConfigKey("rate.limit.per.second", default="0", doc="requests/s per target (0: no limit)"),
    ConfigKey(
        "push.flush.max.ms",
        type="int",
        default=10_000,
        min=1,
        doc="longest a micro-batch waits for deliveries before parking the rest",
    ),
    ConfigKey("retry.max.attempts", type="int", default=5, min=1),
    ConfigKey("retry.max.age.ms", type="int", default=3_600_000, min=1),
    ConfigKey("retry.backoff", default="exponential", choices=("exponential", "linear")),
    ConfigKey("retry.backoff.initial.ms", type="int", default=500, min=0),
    ConfigKey("retry.backoff.max.ms", type="int", default=30_000, min=0),
    ConfigKey("retry.jitter", default="0.2", doc="fraction, 0 ≤ jitter < 1"),
    ConfigKey(
        "retry.never.statuses",
        type="list",
        default=[str(s) for s in sorted(DEFAULT_NEVER_RETRY)],
        doc="HTTP statuses given up at once (dead-lettered)",
    ),
    ConfigKey(
        "retry.topic.name",
        default="",
        doc="where records wait for a later retry (default <connector>-push-retry)",
    ),
)

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_SIMPLE = {"topic", "key", "queue", "offset"}


@dataclass(frozen=True)
class UrlTemplate:
    """A URL with `{…}` placeholders over the record; `fixed` when it has none."""

    text: str
    names: tuple[str, ...]

    @property
    def fixed(self) -> bool:
        return not self.names

    @staticmethod
    def parse(key: str, text: str) -> UrlTemplate:
        if text.count("{") != text.count("}") or re.search(r"\{[^}]*\{|\}[^{]*\}", text):
            raise ConfigException(key, f"malformed URL template {text!r}: unbalanced braces")
        names = tuple(_PLACEHOLDER.findall(text))
        for name in names:
            head, _, rest = name.partition(".")
            if name in _SIMPLE or (head in ("header", "value") and rest):
                continue
            raise ConfigException(
                key,
                f"malformed URL template {text!r}: unknown placeholder {{{name}}}",
                suggestion="use {topic}, {key}, {queue}, {offset}, {header.NAME}, {value.FIELD}",
            )
        base = _PLACEHOLDER.sub("x", text)
        if not re.match(r"https?://[^/\s]+", base):
            raise ConfigException(key, f"{text!r} is not an http:// or https:// URL")
        return UrlTemplate(text, names)


@dataclass(frozen=True)
class HttpConfig:
    """The validated settings of an HTTP sink task."""

    url: UrlTemplate
    method: str
    headers: dict[str, str]
    forward: tuple[str, ...]
    forward_prefix: str
    auth: tuple[str, str] | None  # (header name, value)
    body: str
    ce_mode: str
    ce_source: str
    ce_type: str
    batch_records: int
    batch_bytes: int
    timeout_s: float
    verify: bool | str
    idempotency_header: str
    target_by: str
    flush_s: float
    retry_topic: str
    connector: str
    limits: Limits = field(default_factory=Limits)
    policy: RetryPolicy = field(default_factory=RetryPolicy)


def canonical(config: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """`config` with aliases renamed to our keys, and a map from our key back to what the user
    wrote (so an error names the user's key). Setting a key and its alias differently is refused."""
    out = dict(config)
    written = {k: k for k in config}
    for alias, ours in ALIASES.items():
        if alias in config:
            if ours in config and config[ours] != config[alias]:
                raise ConfigException(alias, f"contradicts {ours}; set one of them")
            out[ours] = config[alias]
            written[ours] = alias
    return out, written


def parse(config: Mapping[str, str], connector: str = "") -> HttpConfig:
    """Validate a connector/task config into an `HttpConfig` (`ConfigException` names the key)."""
    conf, written = canonical(config)

    def bad(key: str, message: str, **kw: Any) -> ConfigException:
        return ConfigException(written.get(key, key), message, **kw)

    try:
        v = KEYS.parse(conf)
    except ConfigException as exc:
        raise bad(exc.key, exc.message.split(": ", 1)[-1], suggestion=exc.suggestion) from None
    url = UrlTemplate.parse(written.get("url", "url"), v["url"].strip())
    method = v["method"].strip().upper()
    if method not in METHODS:
        raise bad("method", f"must be one of {', '.join(METHODS)}, got {v['method']!r}")
    headers: dict[str, str] = {}
    if v["headers"].strip():
        try:
            parsed = json.loads(v["headers"])
        except json.JSONDecodeError as exc:
            raise bad("headers", f"not a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise bad("headers", "must be a JSON object of header names to values")
        headers = {str(k): str(val) for k, val in parsed.items()}
    auth_raw = v["auth.type"].strip()
    auth_type = AUTH_ALIASES.get(auth_raw, auth_raw.lower())
    if auth_type not in AUTH_TYPES:
        raise bad(
            "auth.type",
            f"unknown auth type {auth_raw!r}",
            suggestion=f"one of {', '.join(AUTH_TYPES)} (or BASIC_AUTH, API_KEY_AUTH)",
        )
    auth = _auth(auth_type, v, bad)
    timeout_ms = v["timeout.ms"]
    if timeout_ms <= 0:
        raise bad("timeout.ms", f"must be a positive number of milliseconds, got {timeout_ms}")
    rate = _number(v["rate.limit.per.second"], "rate.limit.per.second", bad)
    jitter = _number(v["retry.jitter"], "retry.jitter", bad)
    if not 0 <= jitter < 1:
        raise bad("retry.jitter", f"must be in [0, 1), got {jitter}")
    try:
        never = frozenset(int(s) for s in v["retry.never.statuses"])
    except ValueError:
        raise bad("retry.never.statuses", "expected HTTP status codes, e.g. 400,401") from None
    concurrency = v["push.concurrency"]
    limits = Limits(
        concurrency=concurrency,
        core_concurrency=v["push.core.concurrency"] or concurrency,
        per_target_concurrency=v["push.target.concurrency"],
        queue_limit=v["push.queue.limit"],
        rate_limit=rate,
    )
    policy = RetryPolicy(
        max_attempts=v["retry.max.attempts"],
        max_age_s=v["retry.max.age.ms"] / 1000,
        backoff=v["retry.backoff"],
        initial_s=v["retry.backoff.initial.ms"] / 1000,
        max_backoff_s=v["retry.backoff.max.ms"] / 1000,
        jitter=jitter,
        never_retry=never,
    )
    name = connector or "http-sink"
    return HttpConfig(
        url=url,
        method=method,
        headers=headers,
        forward=tuple(v["headers.forward"]),
        forward_prefix=v["headers.forward.prefix"],
        auth=auth,
        body=v["body.format"],
        ce_mode=v["cloudevents.mode"],
        ce_source=v["cloudevents.source"] or f"sluice/{name}",
        ce_type=v["cloudevents.type"],
        batch_records=v["batch.max.records"],
        batch_bytes=v["batch.max.bytes"],
        timeout_s=timeout_ms / 1000,
        verify=v["tls.ca.file"] or v["tls.verify"],
        idempotency_header=v["idempotency.header"],
        target_by=v["push.target.by"],
        flush_s=v["push.flush.max.ms"] / 1000,
        retry_topic=v["retry.topic.name"].strip() or f"{name}-push-retry",
        connector=name,
        limits=limits,
        policy=policy,
    )


def _number(raw: str, key: str, bad: Any) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise bad(key, f"expected a number, got {raw!r}") from None
    if value < 0:
        raise bad(key, f"must not be negative, got {raw}")
    return value


def _auth(kind: str, v: Mapping[str, Any], bad: Any) -> tuple[str, str] | None:
    import base64

    if kind == "none":
        return None
    if kind == "basic":
        if not v["auth.basic.user"]:
            raise bad("auth.basic.user", "required with auth.type=basic")
        token = f"{v['auth.basic.user']}:{v['auth.basic.password']}".encode()
        return ("Authorization", "Basic " + base64.b64encode(token).decode("ascii"))
    if kind == "bearer":
        if not v["auth.bearer.token"]:
            raise bad("auth.bearer.token", "required with auth.type=bearer")
        return ("Authorization", f"Bearer {v['auth.bearer.token']}")
    if not v["auth.apikey.value"]:
        raise bad("auth.apikey.value", "required with auth.type=apikey")
    return (v["auth.apikey.header"], v["auth.apikey.value"])
