"""The Redis connection settings every Redis connector shares, and the errors they raise.

`redis.url` (``redis://[user:password@]host:port/db``, ``rediss://`` for TLS) is the one address;
RocketMQ Connect's ``redisAddr`` / ``redisPort`` / ``redisPassword`` / ``timeout`` keys are
accepted instead of it. redis-py is imported lazily, so the rest of sluice does not need it.

The URL's query parameters go to redis-py's connection (``rediss://h?ssl_ca_certs=/etc/ca.pem``)
under the worker's client policy (`sluice.sdk.REDIS_CLIENT`), and so does a ``unix://`` socket
path (a local file: inside `file.allowed.dirs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.sdk import (
    REDIS_CLIENT,
    ClientOption,
    ConfigException,
    ConfigKey,
    RetriableException,
    redact_url,
    refuse_unsafe,
    url_options,
)
from sluice.sdk.extras import REDIS, require

URL = "redis.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="", doc="redis://[user:password@]host:port/db (rediss:// for TLS)"),
    ConfigKey("redis.username", default="", doc="ACL user (overrides the URL's)"),
    ConfigKey("redis.password", type="password", default="", doc="password (overrides the URL's)"),
    ConfigKey("redis.timeout.ms", type="int", default=3000, min=1, doc="socket timeout"),
    # RocketMQ Connect's names, used when redis.url is not set
    ConfigKey("redisAddr", default="", doc="host (RocketMQ Connect name; redis.url is preferred)"),
    ConfigKey("redisPort", type="int", default=6379, min=1, doc="port (RocketMQ Connect name)"),
    ConfigKey("redisPassword", type="password", default="", doc="password (RocketMQ Connect name)"),
    ConfigKey("timeout", type="int", default=0, min=0, doc="timeout ms (RocketMQ Connect name)"),
)


def redis_module() -> Any:
    """redis-py (the ``redis`` extra), or an error naming the install line."""
    return require(REDIS, "the Redis connectors")


def client_options(config: Mapping[str, str]) -> list[ClientOption]:
    """What `redis.url` hands to redis-py besides its address: its query parameters, and the
    socket path of a ``unix://`` URL (`Connector.client_options`)."""
    url = config.get(URL, "").strip()
    if not url:
        return []  # redisAddr/redisPort make a URL without parameters
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigException(URL, f"cannot parse {redact_url(url)!r}: {exc}") from None
    params = parse_qsl(parts.query, keep_blank_values=True)
    if parts.scheme == "unix" and parts.path:
        params.append(("path", unquote(parts.path)))
    return url_options(REDIS_CLIENT, URL, params)


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    url: str
    key: str  # the config key that named the address, for error messages
    username: str | None
    password: str | None
    timeout_s: float

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        if values[URL]:
            url, key = values[URL], URL
            if not url.startswith(("redis://", "rediss://", "unix://")):
                raise ConfigException(URL, f"expected redis://host:port[/db], got {url!r}")
            refuse_unsafe(client_options({URL: url}))
        elif values["redisAddr"]:
            url, key = f"redis://{values['redisAddr']}:{values['redisPort']}/0", "redisAddr"
        else:
            raise ConfigException(URL, "required key is missing (or set redisAddr/redisPort)")
        password = values["redis.password"] or values["redisPassword"] or None
        timeout_ms = values["timeout"] or values["redis.timeout.ms"]
        return Settings(url, key, values["redis.username"] or None, password, timeout_ms / 1000)

    @property
    def where(self) -> str:
        return redact_url(self.url)

    def connect(self) -> Any:
        """A new client; the connection opens on the first command."""
        r = redis_module()
        extra: dict[str, Any] = {}
        if self.username:
            extra["username"] = self.username
        if self.password:
            extra["password"] = self.password
        try:
            return r.Redis.from_url(
                self.url,
                socket_timeout=self.timeout_s,
                socket_connect_timeout=self.timeout_s,
                **extra,
            )
        except ValueError as exc:
            raise ConfigException(self.key, f"invalid address {self.where}: {exc}") from None

    def failure(self, doing: str, exc: Exception) -> Exception:
        """The sluice error for a redis-py exception: bad credentials are a config error, a lost
        or refused connection is retriable, anything else names the command."""
        r = redis_module()
        if isinstance(exc, r.AuthenticationError | r.exceptions.NoPermissionError):
            return ConfigException(
                "redis.password",
                f"{self.where} refused the credentials while {doing}: {exc}",
                suggestion="check redis.username / redis.password",
            )
        if isinstance(exc, r.ConnectionError | r.TimeoutError | r.exceptions.BusyLoadingError):
            return RetriableException(f"{self.key}={self.where}: {doing}: {exc}")
        from sluice.sdk import ConnectException

        return ConnectException(f"{self.key}={self.where}: {doing}: {exc}")

    def probe(self) -> Any:
        """A client that answered PING (driver, in `validate`); unreachable → ConfigException."""
        client = self.connect()
        try:
            client.ping()
        except Exception as exc:
            err = self.failure("connecting", exc)
            if isinstance(err, ConfigException):
                raise err from None
            raise ConfigException(self.key, f"cannot reach Redis at {self.where}: {exc}") from None
        return client
