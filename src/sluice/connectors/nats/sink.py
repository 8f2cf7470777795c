"""NatsSinkConnector: publishes records to NATS JetStream, exactly once within the duplicate window.

Every message carries a ``Nats-Msg-Id`` derived from the record's position,
``<connector>:<run>:<topic>:<queue>:<offset>``, and JetStream drops a message whose id it has
already stored during the stream's **duplicate window** (``duplicate_window``, 2 minutes by
default). A replayed micro-batch — the task retried, or the worker killed and restarted — publishes
the same ids again, so the stream gains nothing twice, **provided the replay comes within the
window**: a worker that stays down longer than the window and then replays its last micro-batch
adds that batch's messages again. Set the stream's ``duplicate_window`` above the longest outage
you want to survive without duplicates (it costs the server memory for the ids it remembers).
`<run>` changes when the connector's offsets are reset, so records read again on purpose are
published again. Delivery: exactly-once within the duplicate window, at-least-once beyond it.

Each micro-batch's messages are published with a reply subject each, at most 5000 awaiting their
acknowledgement (`_jetstream.publish`: one subscription takes the acknowledgements, cheaper than
nats-py's future per ``publish_async``), and the task waits for every acknowledgement before it
returns: a message the server did not store fails the batch naming the record, and a lost
connection or a timeout is retried (``errors.retry.*``) by publishing the whole share again, which
the ids make harmless.
After such a retry the order of a queue's messages in the stream may differ from the topic's.

Unit of parallelism: one task per group of queues (`max.tasks`).

Record mapping: value → data (BYTES as they are, text as UTF-8, anything else as JSON); key →
header ``nats.key.header`` (default ``Sluice-Key``; the key must be UTF-8 text; no header when
null); each extension → a header, except ``nats.subject`` (what `NatsSourceConnector` records of
the message it read). ``nats.subject.format`` names the subject: ``${topic}`` and ``${key}`` are
replaced (default ``${topic}``); a stream must take that subject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.connectors._messaging import Row, RowSinkTask, addressed
from sluice.connectors.nats._client import Session, failure, nats_module, probe
from sluice.connectors.nats._config import SINK_CONFIG, Settings
from sluice.connectors.nats._jetstream import publish
from sluice.connectors.nats.source import SUBJECT_EXTENSION
from sluice.sdk import (
    ConfigException,
    ConnectException,
    Delivery,
    SinkConnector,
)
from sluice.sdk.extras import NATS

MSG_ID = "Nats-Msg-Id"
_WINDOW = 5000  # publishes awaiting their acknowledgement at most (nats-py's own limit: 4000)


class NatsSinkTask(RowSinkTask):
    """Publishes its share of each micro-batch and waits for every acknowledgement."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.subject_format: str = values["nats.subject.format"]
        self.key_header: str = values["nats.key.header"]
        batch = self.context.batch_id
        self.prefix = f"{self.context.connector_name}:{batch.run if batch else 'norun'}"
        self._session: Session | None = None

    def _message(self, row: Row) -> tuple[str, bytes, dict[str, str]]:
        subject, headers = addressed(
            row, self.subject_format, "nats.subject.format", self.key_header, SUBJECT_EXTENSION
        )
        headers[MSG_ID] = f"{self.prefix}:{row.topic}:{row.queue}:{row.offset}"
        return subject, row.value if row.value is not None else b"", headers

    def write_rows(self, rows: list[Row]) -> None:
        if not rows:
            return
        messages = [self._message(row) for row in rows]
        if self._session is None:
            self._session = Session(self.settings)
        session, timeout_s = self._session, self.settings.timeout_s

        async def publish_all(_js: Any) -> dict[int, BaseException]:
            return await publish(session.connection, messages, _WINDOW, timeout_s)

        first, last = rows[0], rows[-1]
        doing = f"publishing {len(rows)} records (record {first.where} .. offset {last.offset})"
        refused = session.call(doing, publish_all)
        for i, exc in sorted(refused.items())[:1]:  # the first refusal fails the share
            self._refused(exc, rows[i], messages[i][0])

    def _refused(self, exc: BaseException, row: Row, subject: str) -> None:
        if isinstance(exc, nats_module().js.errors.NoStreamResponseError):
            raise ConnectException(
                f"nats.subject.format: no JetStream stream takes subject {subject!r} "
                f"(record {row.where})",
                suggestion="add the subject to a stream, or change nats.subject.format",
            )
        # a retriable one makes the runtime publish the share again (the ids dedupe it)
        raise failure(self.settings, f"publishing record {row.where} to {subject!r}", exc)

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


class NatsSinkConnector(SinkConnector):
    """Publishes records to NATS JetStream subjects with ``Nats-Msg-Id``s derived from their
    positions: exactly-once within the stream's duplicate window."""

    config_def = SINK_CONFIG
    task_class = NatsSinkTask
    requires = (NATS,)
    guarantee = Delivery.EXACTLY_ONCE

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        fmt = values["nats.subject.format"]
        subjects = [
            fmt.replace("${topic}", t) for t in values["connect.topicnames"] if "${key}" not in fmt
        ]

        async def check(js: Any) -> None:
            for subject in subjects:
                try:
                    await js.find_stream_name_by_subject(subject)
                except nats_module().js.errors.NotFoundError:
                    raise ConfigException(
                        "nats.subject.format",
                        f"no JetStream stream takes subject {subject!r}",
                        suggestion="add the subject to a stream, or change nats.subject.format",
                    ) from None

        probe(Settings.of(values), check)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


__all__ = ["NatsSinkConnector", "NatsSinkTask"]
