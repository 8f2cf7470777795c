"""The Redis client every Redis connector uses: a connection made from `Settings`, and the
sluice error for what redis-py raises. redis-py is imported lazily, so the rest of sluice does
not need it.
"""

from __future__ import annotations

from typing import Any

from sluice.connectors.redis._config import Settings
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk.extras import REDIS, require


def redis_module() -> Any:
    """redis-py (the ``redis`` extra), or an error naming the install line."""
    return require(REDIS, "the Redis connectors")


def connect(settings: Settings) -> Any:
    """A new client; the connection opens on the first command."""
    r = redis_module()
    extra: dict[str, Any] = {}
    if settings.username:
        extra["username"] = settings.username
    if settings.password:
        extra["password"] = settings.password
    try:
        return r.Redis.from_url(
            settings.url,
            socket_timeout=settings.timeout_s,
            socket_connect_timeout=settings.timeout_s,
            **extra,
        )
    except ValueError as exc:
        raise ConfigException(settings.key, f"invalid address {settings.where}: {exc}") from None


def failure(settings: Settings, doing: str, exc: Exception) -> Exception:
    """The sluice error for a redis-py exception: bad credentials are a config error, a lost
    or refused connection is retriable, anything else names the command."""
    r = redis_module()
    where = settings.where
    if isinstance(exc, r.AuthenticationError | r.exceptions.NoPermissionError):
        return ConfigException(
            "redis.password",
            f"{where} refused the credentials while {doing}: {exc}",
            suggestion="check redis.username / redis.password",
        )
    if isinstance(exc, r.ConnectionError | r.TimeoutError | r.exceptions.BusyLoadingError):
        return RetriableException(f"{settings.key}={where}: {doing}: {exc}")
    return ConnectException(f"{settings.key}={where}: {doing}: {exc}")


def probe(settings: Settings) -> Any:
    """A client that answered PING (driver, in `validate`); unreachable → ConfigException."""
    client = connect(settings)
    try:
        client.ping()
    except Exception as exc:
        err = failure(settings, "connecting", exc)
        if isinstance(err, ConfigException):
            raise err from None
        raise ConfigException(
            settings.key, f"cannot reach Redis at {settings.where}: {exc}"
        ) from None
    return client
