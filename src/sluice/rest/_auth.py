"""REST authentication and roles: `rest.auth=basic|token`, a credentials file, an ASGI middleware.

The credentials file (`rest.auth.file`) has one line per user or token::

    # name:role:hash
    alice:admin:scrypt$16384$8$1$<salt base64>$<hash base64>
    grafana:read-only:scrypt$16384$8$1$<salt base64>$<hash base64>

`hash` is scrypt (hashlib, N=2^14, r=8, p=1, 16-byte random salt) of the user's password
(`rest.auth=basic`) or of the bearer token (`rest.auth=token`). `sluice users add` and
`sluice users token` write these lines. Roles: `admin` may do everything, `read-only` may only
read (a request that writes answers 403: see `sluice.rest._routes`). The file is re-read when it
changes; a verified credential is remembered (by its SHA-256) so scrypt runs once per credential,
not once per request, and off the event loop, limited per client (`sluice.rest._logins`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse

from sluice.rest._logins import DEFAULT_FAILURES_PER_MINUTE, FailureLimit, HashPool

ROLES = ("admin", "read-only")
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def hash_secret(secret: str, *, salt: bytes | None = None) -> str:
    """The `scrypt$N$r$p$salt$hash` form of `secret` stored in the credentials file."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=salt, dklen=32, **_SCRYPT)
    b64 = base64.b64encode
    n, r, p = _SCRYPT["n"], _SCRYPT["r"], _SCRYPT["p"]
    return f"scrypt${n}${r}${p}${b64(salt).decode()}${b64(digest).decode()}"


def verify_secret(secret: str, encoded: str) -> bool:
    """True if `secret` hashes to `encoded` (constant-time comparison)."""
    try:
        kind, n, r, p, salt, digest = encoded.split("$")
        if kind != "scrypt":
            return False
        want = base64.b64decode(digest)
        got = hashlib.scrypt(
            secret.encode("utf-8"),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, want)


@dataclass(frozen=True)
class Principal:
    """Who made a request: a user (or token) name and its role."""

    name: str
    role: str


@dataclass(frozen=True)
class _Entry:
    name: str
    role: str
    encoded: str


def read_credentials(path: str) -> list[_Entry]:
    """The entries of a credentials file; a malformed line is a ValueError naming its number."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            if len(parts) != 3 or parts[1] not in ROLES or not parts[2].startswith("scrypt$"):
                raise ValueError(
                    f"{path}:{number}: expected name:role:scrypt$… with role one of "
                    f"{', '.join(ROLES)}"
                )
            entries.append(_Entry(*parts))
    return entries


def add_credential(path: str, name: str, role: str, secret: str) -> None:
    """Add (or replace) `name`'s line in the credentials file, created private (0600)."""
    if not name or ":" in name or name.strip() != name:
        raise ValueError(f"invalid name {name!r}: non-empty, no ':' and no surrounding spaces")
    if role not in ROLES:
        raise ValueError(f"invalid role {role!r}: one of {', '.join(ROLES)}")
    lines: list[str] = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = [ln.rstrip("\n") for ln in f if not ln.startswith(f"{name}:")]
    lines.append(f"{name}:{role}:{hash_secret(secret)}")
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a leftover .tmp keeps its mode through O_CREAT: never more open
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def new_token() -> str:
    """A fresh bearer token (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class Credentials:
    """The credentials file of a worker, re-read when it changes, with verified credentials
    remembered by their SHA-256 (never in clear)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._entries: list[_Entry] = []
        self._verified: dict[bytes, Principal] = {}
        #: checked instead when no line has the name asked for: an unknown user costs the same
        #: scrypt work as a wrong password, so timing does not tell which names exist
        self._dummy = hash_secret(new_token())
        self._load()

    def _load(self) -> None:
        mtime = os.stat(self.path).st_mtime
        if mtime != self._mtime:
            entries = read_credentials(self.path)
            with self._lock:
                self._entries, self._mtime, self._verified = entries, mtime, {}

    @staticmethod
    def _memo(name: str | None, secret: str) -> bytes:
        return hashlib.sha256(f"{name}\0{secret}".encode()).digest()

    def remembered(self, name: str | None, secret: str) -> Principal | None:
        """The principal of a credential verified before (no hashing: cheap on the loop)."""
        self._load()
        return self._verified.get(self._memo(name, secret))

    def check(self, name: str | None, secret: str) -> Principal | None:
        """The principal whose line matches (`name` None: any line, as for tokens). Runs
        scrypt once per candidate line, or once against a dummy line when no line has `name`:
        slow by design, so call it off the event loop (`AuthMiddleware` does)."""
        found = self.remembered(name, secret)
        if found is not None:
            return found
        candidates = [e for e in self._entries if name is None or e.name == name]
        if not candidates:
            verify_secret(secret, self._dummy)
            return None
        for entry in candidates:
            if verify_secret(secret, entry.encoded):
                principal = Principal(entry.name, entry.role)
                with self._lock:
                    if len(self._verified) > 1024:
                        self._verified.clear()
                    self._verified[self._memo(name, secret)] = principal
                return principal
        return None


def is_loopback(host: str) -> bool:
    """`127.x.x.x`, `::1` or `localhost` (the host part of a Host header or of `httpHost`)."""
    name = host.strip().lower().removeprefix("[").removesuffix("]")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_console_file(path: str) -> bool:
    """A static file of the console (`/ui`): no data in it. With `rest.auth=token` these answer
    without credentials, because a browser loading a page cannot send a bearer token: the page
    must load to ask for one (with `basic`, the browser's own prompt on the 401 does that)."""
    return path in ("/ui", "/ui/") or path.startswith("/ui/static/")


#: the health check (Kafka Connect's KIP-1017): open to probes without credentials, and its
#: answer says only whether the worker is up and ready
HEALTH_PATH = "/health"


def is_v1_face(path: str) -> bool:
    """True for the routes of the `/v1` face (its error body), `GET /` and `/health` included."""
    return path.startswith("/v1") or path in ("/", HEALTH_PATH)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AuthMiddleware:
    """Answers 401 to a request without valid credentials and 429 to a client past its failed
    checks (`sluice.rest._logins`), in the error shape of the face called, and leaves the
    principal in the request's state (a read-only user's request that writes is refused by its
    route: `sluice.rest._routes`); `/metrics` may be left open."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        *,
        mode: str,
        credentials: Credentials,
        metrics_open: bool = False,
        failures_per_minute: int = DEFAULT_FAILURES_PER_MINUTE,
    ) -> None:
        self.app = app
        self.mode = mode
        self.credentials = credentials
        self.metrics_open = metrics_open
        self.failures = FailureLimit(failures_per_minute)
        self.hashing = HashPool()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if (
            path == HEALTH_PATH
            or (self.metrics_open and path == "/metrics")
            or (self.mode == "token" and is_console_file(path))
        ):
            await self.app(scope, receive, send)
            return
        claim = self._claim(scope)
        principal = None
        if claim is not None:
            principal = self.credentials.remembered(*claim)
        if principal is None and claim is not None:
            client = (scope.get("client") or ("unknown", 0))[0]
            wait = self.failures.reserve(client)
            if wait is not None:
                message = (
                    f"too many failed credential checks from {client}: at most "
                    f"{self.failures.per_minute} a minute; retry in {wait} s"
                )
                await send_error(
                    send,
                    path,
                    429,
                    message,
                    code="auth.rate_limited",
                    key="rest.auth.failures.per.minute",
                    headers=((b"retry-after", str(wait).encode()),),
                )
                return
            try:
                principal = await self.hashing.run(self.credentials.check, *claim)
            finally:
                self.failures.settle(client, failed=principal is None)
        if principal is None:
            challenge = 'Basic realm="sluice"' if self.mode == "basic" else 'Bearer realm="sluice"'
            await send_error(
                send,
                path,
                401,
                "authentication required",
                code="auth.required",
                headers=((b"www-authenticate", challenge.encode()),),
            )
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _claim(self, scope: Scope) -> tuple[str | None, str] | None:
        """(user name or None for a token, secret) from the Authorization header, if usable."""
        header = ""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if self.mode == "basic" and scheme.lower() == "basic" and value:
            try:
                user, sep, password = base64.b64decode(value).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            return (user, password) if sep else None
        if self.mode == "token" and scheme.lower() == "bearer" and value:
            return (None, value)
        return None


async def send_error(
    send: Send,
    path: str,
    status: int,
    message: str,
    *,
    code: str | None = None,
    key: str | None = None,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """An error answered by an ASGI middleware, before any route: the body in the shape of the
    face `path` belongs to (as `sluice.rest.app.error_body` makes it for the routes)."""
    data = json.dumps(_error_payload(path, status, message, code, key)).encode()
    sent = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*sent, *headers]})
    await send({"type": "http.response.body", "body": data})


def error_json(
    path: str, status: int, message: str, *, code: str | None = None, key: str | None = None
) -> JSONResponse:
    """The same error as a response object (for a route that refuses before it runs)."""
    return JSONResponse(_error_payload(path, status, message, code, key), status_code=status)


def _error_payload(
    path: str, status: int, message: str, code: str | None, key: str | None
) -> dict[str, Any]:
    status_key = "error_code" if is_v1_face(path) else "errorCode"
    body = {status_key: status, "message": message, "code": code, "key": key}
    body.update(suggestion=None, errors=[])
    return body


#: `rest.request.max.bytes` by default, 4 MiB: far above any config or offsets list seen (Kafka's
#: own config topic takes 1 MB per config).
DEFAULT_MAX_REQUEST_BYTES = 4 << 20
#: `rest.request.body.timeout.ms` by default: a config of 4 MiB arrives in well under a second
#: on any network a worker is managed over; a body still arriving after 30 s is a slow client
#: holding a connection (slowloris), not an upload.
DEFAULT_BODY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RestSecurity:
    """The worker's REST security keys: `rest.auth`, `rest.auth.file`, `rest.auth.metrics.open`,
    `rest.auth.failures.per.minute`, `rest.tls.cert`, `rest.tls.key`, `rest.request.max.bytes`,
    `rest.request.body.timeout.ms`."""

    mode: str = "none"
    credentials: Credentials | None = None
    metrics_open: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    #: `rest.request.max.bytes`: the largest request body read (see `sluice.rest._limits`)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    #: `httpHost` is a loopback address: other Hosts are refused (see `sluice.rest._cross_site`)
    loopback_only: bool = False
    #: `rest.auth.failures.per.minute`: failed credential checks per client address (0: no limit)
    failures_per_minute: int = DEFAULT_FAILURES_PER_MINUTE
    #: `rest.request.body.timeout.ms` in seconds: the longest a request body may take to arrive
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    @classmethod
    def from_properties(cls, props: MutableMapping[str, str] | dict[str, str]) -> RestSecurity:
        """Parsed and checked; a problem is a ConfigException naming the key."""
        from sluice.runtime.worker_config import WORKER_KEYS
        from sluice.sdk import ConfigException

        values = WORKER_KEYS.parse(props)
        mode = values["rest.auth"]
        credentials = None
        if mode != "none":
            path = values["rest.auth.file"]
            if not path:
                raise ConfigException(
                    "rest.auth.file",
                    f"required when rest.auth={mode}",
                    suggestion="create it with `sluice users add` or `sluice users token`",
                )
            try:
                credentials = Credentials(path)
            except OSError as exc:
                raise ConfigException("rest.auth.file", f"cannot read {path}: {exc}") from None
            except ValueError as exc:
                raise ConfigException("rest.auth.file", str(exc)) from None
        cert, key = values["rest.tls.cert"], values["rest.tls.key"]
        if bool(cert) != bool(key):
            missing = "rest.tls.key" if cert else "rest.tls.cert"
            raise ConfigException(missing, "rest.tls.cert and rest.tls.key go together")
        for name, path in (("rest.tls.cert", cert), ("rest.tls.key", key)):
            if path and not os.path.isfile(path):
                raise ConfigException(name, f"no such file: {path}")
        return cls(
            mode,
            credentials,
            values["rest.auth.metrics.open"],
            cert,
            key,
            values["rest.request.max.bytes"],
            is_loopback(values["httpHost"]),
            values["rest.auth.failures.per.minute"],
            values["rest.request.body.timeout.ms"] / 1000,
        )

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for `uvicorn.Config` (TLS when configured)."""
        if not self.tls_cert:
            return {}
        return {"ssl_certfile": self.tls_cert, "ssl_keyfile": self.tls_key}
