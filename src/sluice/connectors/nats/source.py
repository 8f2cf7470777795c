"""NatsSourceConnector: copies JetStream streams into topics by stream sequence, exactly once.

Delivery: exactly-once. A JetStream stream numbers its messages (the stream sequence), so the
connector reads exact ranges ``(start, end]``: `latest` (driver) asks the stream's last sequence
(``STREAM.INFO``) and caps it at ``read.max.rows`` past the start; `read` (executor) creates an
ephemeral pull consumer that starts at ``start + 1`` (``deliver_policy=by_start_sequence``,
``ack_policy=none``, held in memory, removed when the read ends or, if the process dies, by the
server after ``inactive_threshold``) and pulls pages of ``nats.fetch.size`` until it reaches
``end`` (`_jetstream.pull`: one request and one subscription callback per page, the sequences and
times read from the messages' reply subjects in Arrow). Nothing is
acknowledged and no durable consumer is kept: the position is sluice's, so a replayed
micro-batch reads the same messages again. Messages removed by the stream's limits (``max_age``,
``max_msgs``…) before they were read fail the task naming the stream: they cannot be delivered.

Unit of parallelism: one stream (``nats.streams``; each stream belongs to one task, `max.tasks` at
most); a range is cut into sub-ranges read in parallel when `max.tasks` allows more Spark
partitions than there are streams (`split`).
Position: ``{"stream": <name>}`` → ``{"seq": <stream sequence of the last delivered message>}``.

``nats.subject`` filters the stream's subjects (one subject, wildcards ``*`` and ``>`` allowed;
nats-server before 2.10 has no list of filters). Sequences still count every message of the
stream, so with a filter a micro-batch may hold fewer than ``read.max.rows`` records.

Record mapping: the message data → value (BYTES); the header ``nats.key.header`` (default
``Sluice-Key``) → key (BYTES, UTF-8 of the header); every other header → an extension (a header
given several times keeps its last value); the subject → extension ``nats.subject``; the time the
stream stored the message → timestamp. This is what `NatsSinkConnector` writes, so a stream
copies to a stream intact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors._messaging import NamedSourceConnector, patiently, source_batch
from sluice.connectors.nats._client import Session, nats_module, probe
from sluice.connectors.nats._config import SOURCE_CONFIG, Settings
from sluice.connectors.nats._jetstream import positions, pull
from sluice.sdk import (
    ConfigException,
    ConnectException,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
)
from sluice.sdk.extras import NATS

SUBJECT_EXTENSION = "nats.subject"
_CONSUMER_IDLE_S = 60.0  # the server removes a reader's consumer this long after a crash


class _Reader:
    """One read of ``(pos, stop]`` of a stream: a pull consumer, recreated after a failure."""

    def __init__(self, stream: str, subject: str, pos: int, stop: int, fetch: int) -> None:
        self.stream, self.subject, self.pos, self.stop, self.fetch = (
            stream,
            subject,
            pos,
            stop,
            fetch,
        )
        self.consumer = ""  # the pull consumer's name, once created
        self.pending = 0  # messages matching the filter after `pos`, when the consumer started

    async def page(self, js: Any, nc: Any, timeout_s: float) -> list[Any]:
        api = nats_module().js.api
        if not self.consumer:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=self.pos + 1,
                ack_policy=api.AckPolicy.NONE,
                filter_subject=self.subject or None,
                inactive_threshold=_CONSUMER_IDLE_S,
                mem_storage=True,
                num_replicas=1,
            )
            info = await js.add_consumer(self.stream, config=config)
            self.pending, self.consumer = info.num_pending, info.name
        # never ask for more than exists before `stop`, so a pull never waits for messages
        want = min(self.fetch, self.pending, self.stop - self.pos)
        if want <= 0:
            return []
        msgs = await pull(nc, self.stream, self.consumer, want, max(timeout_s, 30.0))
        self.pending -= len(msgs)
        return msgs

    async def close(self, js: Any) -> None:
        if self.consumer:
            consumer, self.consumer = self.consumer, ""
            await js.delete_consumer(self.stream, consumer)


class NatsSourceTask(ReplayableSourceTask):
    """Reads its streams in exact sequence ranges."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.streams: list[str] = values["nats.streams"]
        self.subject: str = values["nats.subject"]
        self.topic = values["connect.topicname"] or None
        self.key_header: str = values["nats.key.header"]
        self.fetch: int = values["nats.fetch.size"]
        self._session: Session | None = None

    def _driver(self) -> Session:
        if self._session is None:
            self._session = Session(self.settings)
        return self._session

    def partitions(self) -> list[RecordPartition]:
        return [{"stream": s} for s in self.streams]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        stream = partition["stream"]
        info = self._driver().call(f"STREAM.INFO {stream}", lambda js: js.stream_info(stream))
        state, pos = info.state, start["seq"] if start else 0
        if start is not None:
            _check_still_there(stream, pos, state.first_seq, state.last_seq)
        end = (
            state.last_seq if limit.max_rows is None else min(state.last_seq, pos + limit.max_rows)
        )
        return {"seq": end} if end > pos else start

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        low, high = start["seq"] if start else 0, end["seq"]
        cuts = sorted({low + (high - low) * i // parts for i in range(1, parts)})
        return [{"seq": c} for c in cuts if low < c < high]

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        stream = partition["stream"]
        reader = _Reader(stream, self.subject, start["seq"] if start else 0, end["seq"], self.fetch)
        session = Session(self.settings)
        try:
            while reader.pos < reader.stop:
                msgs = self._page(session, reader)
                if not msgs:
                    return  # nothing more matches the filter
                seqs, stamps = positions(msgs)
                kept = pc.sum(pc.less_equal(seqs, reader.stop)).as_py()
                if kept:
                    yield self._batch(stream, msgs[:kept], stamps[:kept])
                    reader.pos = seqs[kept - 1].as_py()
                if kept < len(msgs):
                    return  # past `stop`
        finally:
            # if this fails the server removes the consumer by itself after _CONSUMER_IDLE_S
            with contextlib.suppress(ConnectException):
                session.call(f"deleting a consumer of {stream}", reader.close)
            session.close()

    def _page(self, session: Session, reader: _Reader) -> list[Any]:
        def forget() -> None:
            reader.consumer = ""  # its connection is gone: start a new consumer at pos + 1

        timeout_s = self.settings.timeout_s
        return patiently(
            lambda: session.call(
                f"reading {reader.stream}",
                lambda js: reader.page(js, session.connection, timeout_s),
            ),
            after_failure=forget,
        )

    def _batch(self, stream: str, msgs: list[Any], stamps: pa.Array) -> pa.RecordBatch:
        keys, headers = [], []
        for msg in msgs:
            found = dict(msg.headers or {})
            key = found.pop(self.key_header, None)
            keys.append(key.encode() if key is not None else None)
            found[SUBJECT_EXTENSION] = msg.subject
            headers.append(list(found.items()))
        return source_batch(self.topic or stream, keys, [m.data for m in msgs], stamps, headers)

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _check_still_there(stream: str, committed: int, first: int, last: int) -> None:
    if last < committed:
        raise ConnectException(
            f"nats.streams: stream {stream!r} ends at sequence {last}, before the committed "
            f"position {committed}: it was purged or created anew",
            suggestion="reset the connector's offsets to read it from the start",
        )
    if first > committed + 1 and last > committed:
        raise ConnectException(
            f"nats.streams: messages {committed + 1}..{first - 1} of stream {stream!r} were "
            "removed (by its limits or a purge) before they were read",
            suggestion="raise the stream's max_age/max_msgs, or reset the connector's offsets",
        )


class NatsSourceConnector(NamedSourceConnector):
    """Copies NATS JetStream streams (``nats.streams``) into a topic by stream sequence, exactly
    once, with keys, headers and timestamps."""

    names_key = "nats.streams"
    config_def = SOURCE_CONFIG
    task_class = NatsSourceTask
    requires = (NATS,)
    offset_counts = ("seq",)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SOURCE_CONFIG.parse(config)
        streams = values["nats.streams"]
        if not streams:
            raise ConfigException("nats.streams", "names no stream")

        async def check(js: Any) -> None:
            for stream in streams:
                try:
                    await js.stream_info(stream)
                except nats_module().js.errors.NotFoundError:
                    raise ConfigException(
                        "nats.streams", f"stream {stream!r} does not exist"
                    ) from None

        probe(Settings.of(values), check)

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=200_000)


__all__ = ["NatsSourceConnector", "NatsSourceTask"]
