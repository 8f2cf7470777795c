"""RabbitMQSinkConnector: publishes each record as one message to an exchange, with publisher
confirms.

Delivery: **at-least-once, with a deduplication id**. A micro-batch commits only after RabbitMQ
confirmed every message of it (``basic.ack`` of publisher confirms: the broker took
responsibility, persisted it for a durable queue). A replayed micro-batch (after a crash, or a
retry after the connection dropped mid-batch) publishes its records again; AMQP 0-9-1 has no
idempotent publish, so a consumer sees such a message twice — with the same ``message_id``,
``<topic>/<queue>/<offset>`` (the record's position), by which it can drop the second.

Unit of parallelism: one task per group of topic queues (`max.tasks`); a queue's records are
published in order on one channel.

Mapping: the record's value → body (bytes as they are, text as UTF-8, anything else as JSON
text); extensions → message headers (text); the timestamp → ``timestamp`` (seconds);
``message_id`` as above; ``delivery_mode`` 2 (persistent) unless ``rabbitmq.persistent=false``.
The routing key is ``rabbitmq.routing.key.format``: ``${key}`` (the default: the record key as
UTF-8 text), ``${topic}``, and ``${header.NAME}`` (the record's header NAME) are replaced, so
``orders.${header.region}`` routes by a header. A record whose routing key needs a key or header
it does not have is given up (dead-lettered with ``errors.tolerance=all``, else the micro-batch
fails naming it).

``rabbitmq.mandatory=true`` (the default) asks the broker to return a message no queue is bound
for; such a record is given up the same way, naming the exchange and routing key, instead of
being dropped silently. A ``basic.nack`` (the broker could not store it) or a lost connection
fails the publish with a retriable error: the micro-batch is retried (``errors.retry.*``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.connectors._messaging import Refusals, Row, RowSinkTask
from sluice.connectors.rabbitmq._client import check_exists, failure, parameters, pika_module, probe
from sluice.connectors.rabbitmq._config import SINK_CONFIG, Settings
from sluice.connectors.rabbitmq._config import client_options as rabbitmq_options
from sluice.sdk import (
    BatchId,
    ClientOption,
    ConfigException,
    RetriableException,
    SinkConnector,
)
from sluice.sdk.extras import RABBITMQ


def message_id(row: Row) -> str:
    """The deduplication id of a record's message: its position."""
    return f"{row.topic}/{row.queue}/{row.offset}"


def routing_key(template: str, row: Row) -> tuple[str | None, str]:
    """`(routing key, "")`, or `(None, why not)` when the record lacks what the template needs."""
    out = template.replace("${topic}", row.topic)
    if "${key}" in out:
        if row.key is None:
            return None, f"null key, which rabbitmq.routing.key.format={template!r} needs"
        out = out.replace("${key}", row.key.decode("utf-8", errors="replace"))
    while "${header." in out:
        start = out.index("${header.")
        end = out.index("}", start)
        name = out[start + 9 : end]
        if name not in row.headers:
            return None, f"no header {name!r}, which rabbitmq.routing.key.format needs"
        out = out[:start] + row.headers[name] + out[end + 1 :]
    return out, ""


class _Publisher:
    """Publishes on pika's asynchronous connection with pipelined publisher confirms, driven to
    completion by each `publish` call (pika's blocking channel waits for every confirm in turn).

    Not thread-safe; one per task. The connection is kept between calls and opened again after
    it was lost.
    """

    def __init__(self, settings: Settings, exchange: str, mandatory: bool, window: int) -> None:
        self.settings = settings
        self.exchange = exchange
        self.mandatory = mandatory
        self.window = window
        self._conn: Any = None
        self._channel: Any = None
        self._error: BaseException | None = None
        self._tag = 0
        self._waiting: dict[int, int] = {}  # delivery tag → index in the current call
        self._returned: dict[str, str] = {}  # message id → why the broker returned it
        self._nacked: list[int] = []

    # -- the I/O loop runs until a condition holds ----------------------------------------
    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.ioloop.stop()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._stop()

    def _run(self, done: Callable[[], bool], doing: str) -> None:
        timer = self._conn.ioloop.call_later(
            self.settings.timeout_s * 4, lambda: self._fail(TimeoutError(f"no answer {doing}"))
        )
        try:
            while self._error is None and not done():
                self._conn.ioloop.start()
        finally:
            self._conn.ioloop.remove_timeout(timer)
        if self._error is not None:
            error, self._error = self._error, None
            self.close()
            raise failure(self.settings, doing, error, name_key="rabbitmq.exchange") from None

    def _open(self) -> None:
        pika = pika_module()
        self._conn = pika.SelectConnection(
            parameters(self.settings),
            on_open_callback=lambda c: c.channel(on_open_callback=self._channel_open),
            on_open_error_callback=lambda _c, exc: self._fail(exc),
            on_close_callback=lambda _c, reason: self._fail(reason),
        )
        self._run(lambda: self._channel is not None, "connecting")

    def _channel_open(self, channel: Any) -> None:
        channel.add_on_close_callback(lambda _ch, reason: self._fail(reason))
        channel.add_on_return_callback(self._on_return)

        def confirming(_frame: Any) -> None:
            self._channel = channel
            self._stop()

        channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=confirming)

    def _on_return(self, _ch: Any, method: Any, props: Any, _body: bytes) -> None:
        # a return comes before the message's ack
        self._returned[props.message_id] = f"{method.reply_code} {method.reply_text}"

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        nack = method.NAME == "Basic.Nack"
        tags = (
            [t for t in self._waiting if t <= method.delivery_tag]
            if method.multiple
            else [method.delivery_tag]
        )
        for tag in tags:
            index = self._waiting.pop(tag, None)
            if nack and index is not None:
                self._nacked.append(index)
        if not self._waiting:
            self._stop()

    # -- publishing ------------------------------------------------------------------------
    def publish(self, messages: list[tuple[str, bytes, Any]]) -> dict[int, str]:
        """Publish `(routing key, body, properties)`s, each confirmed; returns the index of each
        message the broker returned (unroutable) with the reason. Raises `RetriableException`
        when the connection is lost or the broker nacks (nothing of the call is known stored)."""
        if self._channel is None:
            self._open()
        self._returned.clear()
        returned: dict[int, str] = {}
        for first in range(0, len(messages), self.window):
            chunk = messages[first : first + self.window]
            for i, (key, body, props) in enumerate(chunk, first):
                self._channel.basic_publish(
                    self.exchange, key, body, props, mandatory=self.mandatory
                )
                self._tag += 1
                self._waiting[self._tag] = i
            self._run(lambda: not self._waiting, f"publishing to exchange {self.exchange!r}")
            if self._nacked:
                count, self._nacked = len(self._nacked), []
                raise RetriableException(
                    f"{self.settings.where}: the broker refused (basic.nack) {count} messages "
                    f"published to exchange {self.exchange!r}"
                )
        for i, (_, _, props) in enumerate(messages):
            if props.message_id in self._returned:
                returned[i] = self._returned[props.message_id]
        return returned

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        self._waiting.clear()
        self._nacked.clear()
        self._tag = 0
        if conn is not None and conn.is_open:
            conn.close()
            self._conn = conn
            while not conn.is_closed:  # let the close handshake finish
                conn.ioloop.start()
            self._conn = None
            self._error = None


class RabbitMQSinkTask(RowSinkTask):
    """Publishes each record to the exchange and waits for the broker's confirms."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.exchange = values["rabbitmq.exchange"]
        self.template = values["rabbitmq.routing.key.format"]
        self.persistent = values["rabbitmq.persistent"]
        self._publisher = _Publisher(
            self.settings,
            self.exchange,
            values["rabbitmq.mandatory"],
            values["rabbitmq.publish.window"],
        )
        self._refusals = Refusals(self.context)

    def write_rows(self, rows: list[Row]) -> None:
        pika = pika_module()
        mode = pika.DeliveryMode.Persistent if self.persistent else pika.DeliveryMode.Transient
        messages, sent = [], []
        for row in rows:
            key, why = routing_key(self.template, row)
            if key is None:
                self._refusals.refuse(row, why)
                continue
            props = pika.BasicProperties(
                message_id=message_id(row), headers=row.headers or None, delivery_mode=mode
            )
            messages.append((key, row.value if row.value is not None else b"", props))
            sent.append(row)
        for index, reason in self._publisher.publish(messages).items():
            self._refusals.refuse(
                sent[index],
                f"unroutable: exchange {self.exchange!r} routed routing key "
                f"{messages[index][0]!r} to no queue ({reason}; rabbitmq.mandatory=true)",
            )

    def flush(self, batch_id: BatchId) -> Any:
        return None

    def stop(self) -> None:
        self._publisher.close()


class RabbitMQSinkConnector(SinkConnector):
    """Publishes records to a RabbitMQ exchange with publisher confirms: at-least-once, each
    message's ``message_id`` its record's position for deduplication."""

    config_def = SINK_CONFIG
    task_class = RabbitMQSinkTask
    requires = (RABBITMQ,)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters of rabbitmq.url (each ssl_options entry on its own)."""
        return rabbitmq_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        settings = Settings.of(values)
        if values["rabbitmq.exchange"]:
            check_exists(settings, "rabbitmq.exchange", "exchange", [values["rabbitmq.exchange"]])
        else:
            probe(settings).close()
        template = values["rabbitmq.routing.key.format"]
        for part in template.split("${")[1:]:
            name = part.split("}", 1)[0]
            if "}" not in part or not (name in ("key", "topic") or name.startswith("header.")):
                raise ConfigException(
                    "rabbitmq.routing.key.format",
                    f"{template!r}: unknown placeholder ${{{name}; use ${{key}}, ${{topic}} or "
                    "${header.NAME}",
                )

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


__all__ = ["RabbitMQSinkConnector", "RabbitMQSinkTask", "message_id", "routing_key"]
