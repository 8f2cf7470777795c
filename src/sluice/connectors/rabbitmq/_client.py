"""The RabbitMQ connection settings every RabbitMQ connector shares, and its error mapping.

`rabbitmq.url` (``amqp://user:password@host:port/vhost``, ``amqps://`` for TLS; the vhost ``/`` is
written ``%2F``) is the one address; RocketMQ Connect's ``host`` / ``port`` / ``username`` /
``password`` / ``virtualHost`` keys are accepted instead of it. pika is imported lazily.

The URL's query parameters go to pika's `URLParameters` (``amqps://h?ssl_options={'cafile':
'/etc/ca.pem'}``) under the worker's client policy (`sluice.sdk.RABBITMQ_CLIENT`); each entry
of ``ssl_options`` is judged as ``ssl_options.<name>`` (its certificate and key files inside
`file.allowed.dirs`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from sluice.sdk import (
    RABBITMQ_CLIENT,
    ClientOption,
    ConfigException,
    ConfigKey,
    ConnectException,
    RetriableException,
    redact_url,
    refuse_unsafe,
    url_options,
)
from sluice.sdk.extras import RABBITMQ, require

URL = "rabbitmq.url"
CONNECTION_KEYS = (
    ConfigKey(URL, default="", doc="amqp://user:password@host:port/vhost (amqps:// for TLS)"),
    ConfigKey("rabbitmq.username", default="", doc="user (overrides the URL's)"),
    ConfigKey(
        "rabbitmq.password", type="password", default="", doc="password (overrides the URL's)"
    ),
    ConfigKey("rabbitmq.timeout.ms", type="int", default=5000, min=1, doc="connect/socket timeout"),
    ConfigKey(
        "rabbitmq.heartbeat.s",
        type="int",
        default=300,
        min=0,
        doc="AMQP heartbeat (0: off); above the longest micro-batch, or unacked messages return",
    ),
    # RocketMQ Connect's names, used when rabbitmq.url is not set
    ConfigKey("host", default="", doc="host (RocketMQ Connect name; rabbitmq.url is preferred)"),
    ConfigKey("port", type="int", default=5672, min=1, doc="port (RocketMQ Connect name)"),
    ConfigKey("username", default="guest", doc="user (RocketMQ Connect name)"),
    ConfigKey("password", type="password", default="guest", doc="password (RocketMQ Connect name)"),
    ConfigKey("virtualHost", default="/", doc="virtual host (RocketMQ Connect name)"),
)


def pika_module() -> Any:
    """pika (the ``rabbitmq`` extra), or an error naming the install line."""
    return require(RABBITMQ, "the RabbitMQ connectors")


def client_options(config: Mapping[str, str]) -> list[ClientOption]:
    """What `rabbitmq.url` hands to pika besides its address: its query parameters, with each
    entry of ``ssl_options`` (a Python dict literal, as pika reads it) as ``ssl_options.<name>``
    (`Connector.client_options`)."""
    url = config.get(URL, "").strip()
    if not url:
        return []  # host/port/virtualHost make a URL without parameters
    try:
        params = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigException(URL, f"cannot parse {redact_url(url)!r}: {exc}") from None
    found = []
    for name, value in params:
        if name != "ssl_options":
            found.append((name, value))
            continue
        try:
            ssl = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            ssl = value  # not a literal: refused below
        if ssl is not None and not isinstance(ssl, dict):
            raise ConfigException(
                URL,
                "URL parameter 'ssl_options' must be a dict literal such as "
                "{'cafile': '/etc/ssl/ca.pem'} (or None)",
            )
        found += [(f"ssl_options.{k}", str(v)) for k, v in (ssl or {}).items()]
    return url_options(RABBITMQ_CLIENT, URL, found)


@dataclass(frozen=True)
class Settings:
    """Where and how to connect (picklable: travels to executors inside the task config)."""

    url: str
    key: str  # the config key that named the address, for error messages
    username: str | None
    password: str | None
    timeout_s: float
    heartbeat_s: int

    @staticmethod
    def of(values: Mapping[str, Any]) -> Settings:
        user, password = values["rabbitmq.username"], values["rabbitmq.password"]
        if values[URL]:
            url, key = values[URL], URL
            if not url.startswith(("amqp://", "amqps://")):
                raise ConfigException(URL, f"expected amqp://host:port/vhost, got {url!r}")
            refuse_unsafe(client_options({URL: url}))
        elif values["host"]:
            vhost = quote(values["virtualHost"], safe="")
            url, key = f"amqp://{values['host']}:{values['port']}/{vhost}", "host"
            user, password = user or values["username"], password or values["password"]
        else:
            raise ConfigException(URL, "required key is missing (or set host/port)")
        timeout_s = values["rabbitmq.timeout.ms"] / 1000
        return Settings(
            url, key, user or None, password or None, timeout_s, values["rabbitmq.heartbeat.s"]
        )

    @property
    def where(self) -> str:
        return redact_url(self.url)

    def parameters(self) -> Any:
        """pika connection parameters."""
        pika = pika_module()
        try:
            params = pika.URLParameters(self.url)
        except Exception as exc:
            raise ConfigException(self.key, f"invalid address {self.where}: {exc}") from None
        if self.username or self.password:
            current = params.credentials
            params.credentials = pika.PlainCredentials(
                self.username or current.username, self.password or current.password
            )
        params.socket_timeout = params.blocked_connection_timeout = self.timeout_s
        params.stack_timeout = self.timeout_s * 2
        params.connection_attempts, params.heartbeat = 1, self.heartbeat_s
        return params

    def connect(self) -> Any:
        """A new blocking connection, or the sluice error for why not."""
        try:
            return pika_module().BlockingConnection(self.parameters())
        except Exception as exc:
            raise self.failure("connecting", exc) from None

    def failure(
        self, doing: str, exc: BaseException, *, name_key: str = "", at_create: bool = False
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
                f"{self.key}={self.where}: {doing}: the connection closed during its handshake "
                f"(refused credentials or vhost, or the server going away): {exc!r}"
            )
        if isinstance(exc, e.ProbableAuthenticationError | e.AuthenticationError):
            return ConfigException(
                "rabbitmq.password",
                f"{self.where} refused the credentials while {doing}: {exc!r}",
                suggestion="check rabbitmq.username / rabbitmq.password (or the URL's)",
            )
        if isinstance(exc, e.ProbableAccessDeniedError):
            return ConfigException(self.key, f"{self.where}: access to the vhost refused: {exc!r}")
        if isinstance(exc, e.ChannelClosedByBroker) and exc.reply_code == 404 and name_key:
            return ConfigException(name_key, f"{self.where}: {exc.reply_text}")
        if isinstance(exc, e.AMQPConnectionError | e.ChannelWrongStateError | OSError):
            return RetriableException(f"{self.key}={self.where}: {doing}: {exc!r}")
        return ConnectException(f"{self.key}={self.where}: {doing}: {exc!r}")

    def probe(self, doing: str = "connecting") -> Any:
        """A connection that opened (driver, in `validate`); unreachable → ConfigException."""
        try:
            return pika_module().BlockingConnection(self.parameters())
        except Exception as exc:
            err = self.failure(doing, exc, at_create=True)
            if isinstance(err, ConfigException):
                raise err from None
            raise ConfigException(
                self.key, f"cannot reach RabbitMQ at {self.where}: {exc!r}"
            ) from None

    def check_exists(self, key: str, kind: str, names: list[str]) -> None:
        """Each queue (or exchange) of `names` exists: a passive declare of each (driver)."""
        connection = self.probe()
        try:
            for name in names:
                channel = connection.channel()
                try:
                    if kind == "exchange":
                        channel.exchange_declare(name, passive=True)
                    else:
                        channel.queue_declare(name, passive=True)
                except Exception as exc:
                    err = self.failure(
                        f"looking up {kind} {name!r}", exc, name_key=key, at_create=True
                    )
                    if isinstance(err, ConfigException):
                        raise ConfigException(
                            key, f"{kind} {name!r} does not exist on {self.where}"
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
