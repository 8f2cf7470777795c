"""The RabbitMQ client every RabbitMQ connector uses: pika connections made from `Settings`,
and the sluice error for what pika raises. pika is imported lazily.
"""

from __future__ import annotations

from typing import Any

from sluice.connectors.rabbitmq._config import Settings
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk.extras import RABBITMQ, require


def pika_module() -> Any:
    """pika (the ``rabbitmq`` extra), or an error naming the install line."""
    return require(RABBITMQ, "the RabbitMQ connectors")


def parameters(settings: Settings) -> Any:
    """pika connection parameters."""
    pika = pika_module()
    try:
        params = pika.URLParameters(settings.url)
    except Exception as exc:
        raise ConfigException(settings.key, f"invalid address {settings.where}: {exc}") from None
    if settings.username or settings.password:
        current = params.credentials
        params.credentials = pika.PlainCredentials(
            settings.username or current.username, settings.password or current.password
        )
    params.socket_timeout = params.blocked_connection_timeout = settings.timeout_s
    params.stack_timeout = settings.timeout_s * 2
    params.connection_attempts, params.heartbeat = 1, settings.heartbeat_s
    return params


def connect(settings: Settings) -> Any:
    """A new blocking connection, or the sluice error for why not."""
    try:
        return pika_module().BlockingConnection(parameters(settings))
    except Exception as exc:
        raise failure(settings, "connecting", exc) from None


def failure(
    settings: Settings,
    doing: str,
    exc: BaseException,
    *,
    name_key: str = "",
    at_create: bool = False,
) -> Exception:
    """The sluice error for a pika exception: bad credentials or a refused vhost are a config
    error, a lost or refused connection is retriable, a queue or exchange that does not exist
    (404) names `name_key`, anything else names what was being done.

    pika's "probable" refusals are its guess from a connection lost during the handshake: at
    create (`at_create`, the server just answered) they are read as the refusal they
    probably are; on a running task they are as likely a server going away at that moment
    (stopping, restarting, a network cut), so they are retried like a lost connection and
    the retry note says both readings."""
    e = pika_module().exceptions
    probable = e.ProbableAuthenticationError | e.ProbableAccessDeniedError
    if isinstance(exc, probable) and not at_create:
        return RetriableException(
            f"{settings.key}={settings.where}: {doing}: the connection closed during its handshake "
            f"(refused credentials or vhost, or the server going away): {exc!r}"
        )
    if isinstance(exc, e.ProbableAuthenticationError | e.AuthenticationError):
        return ConfigException(
            "rabbitmq.password",
            f"{settings.where} refused the credentials while {doing}: {exc!r}",
            suggestion="check rabbitmq.username / rabbitmq.password (or the URL's)",
        )
    if isinstance(exc, e.ProbableAccessDeniedError):
        return ConfigException(
            settings.key, f"{settings.where}: access to the vhost refused: {exc!r}"
        )
    if isinstance(exc, e.ChannelClosedByBroker) and exc.reply_code == 404 and name_key:
        return ConfigException(name_key, f"{settings.where}: {exc.reply_text}")
    if isinstance(exc, e.AMQPConnectionError | e.ChannelWrongStateError | OSError):
        return RetriableException(f"{settings.key}={settings.where}: {doing}: {exc!r}")
    return ConnectException(f"{settings.key}={settings.where}: {doing}: {exc!r}")


def probe(settings: Settings, doing: str = "connecting") -> Any:
    """A connection that opened (driver, in `validate`); unreachable → ConfigException."""
    try:
        return pika_module().BlockingConnection(parameters(settings))
    except Exception as exc:
        err = failure(settings, doing, exc, at_create=True)
        if isinstance(err, ConfigException):
            raise err from None
        raise ConfigException(
            settings.key, f"cannot reach RabbitMQ at {settings.where}: {exc!r}"
        ) from None


def check_exists(settings: Settings, key: str, kind: str, names: list[str]) -> None:
    """Each queue (or exchange) of `names` exists: a passive declare of each (driver)."""
    connection = probe(settings)
    try:
        for name in names:
            channel = connection.channel()
            try:
                if kind == "exchange":
                    channel.exchange_declare(name, passive=True)
                else:
                    channel.queue_declare(name, passive=True)
            except Exception as exc:
                err = failure(
                    settings, f"looking up {kind} {name!r}", exc, name_key=key, at_create=True
                )
                if isinstance(err, ConfigException):
                    raise ConfigException(
                        key, f"{kind} {name!r} does not exist on {settings.where}"
                    ) from None
                raise ConfigException(key, str(err)) from None
            channel.close()
    finally:
        if connection.is_open:
            connection.close()


def header_text(value: Any) -> str:
    """An AMQP header value as the text a record extension holds."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)
