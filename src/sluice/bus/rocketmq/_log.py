"""Topics on Apache RocketMQ (4.x, remoting protocol): the `TopicLog` of `bus=rocketmq`.

* A sluice topic is a RocketMQ topic; its queues are the topic's read queues, numbered over the
  brokers in name order (one broker: queue *n* is RocketMQ queue *n*); a queue offset is the
  consume-queue offset. Positions name the real ``brokerName`` and ``queueId``.
* Message mapping (as RocketMQ Connect): key → ``KEYS``, extensions → user properties (an
  extension named ``TAGS`` becomes the message tag), the record timestamp → user property
  ``sluice.ts`` (a batch has one born timestamp), plus ``sluice.writer`` (the tag a replay
  counts) and ``UNIQ_KEY``. A key that is not UTF-8 is stored base64-encoded with
  ``sluice.kenc=b64``. Messages are encoded column-wise on the executors.
* Per queue, messages are sent one SEND_BATCH_MESSAGE after the other to that exact queue (a
  batch is stored whole, and the next is sent only once the previous one is stored), so what
  reached a queue is always a *prefix* of what was meant for it.
* **Writes from the executors** (inside a Spark micro-batch): each task sends its *part* of the
  micro-batch (writer *W*, batch *B*, task *p*) itself, every message tagged ``sluice.writer =
  digest(W, B, p)``; no other part carries that tag. Exactly once per part: before its first send
  to a topic the attempt records in the journal (:mod:`sluice.bus._external`), in one transaction
  with the lease check, the part's row for that topic — ``pending``, each queue's end offset taken
  before the send (``starts``), and itself as the owner. When everything is stored and readable
  the row becomes ``sent``. An attempt that finds the row ``sent`` sends nothing for that topic;
  ``pending`` (an earlier attempt died, or still runs): it becomes the owner, waits until the broker
  made every stored message readable, counts per queue the messages with the part's tag from
  ``starts`` on — the length of the prefix that arrived — and skips that many of its rows for the
  queue. This needs the replay to produce the same rows per queue (Spark's offset log makes its
  input the same; routing is deterministic). An attempt that is no longer the owner stops before
  its next round trip (each checks the owner and the lease). RocketMQ cannot fence a producer:
  one round trip an old attempt had in flight when a new one counted can still land (the same
  window the driver-side commit has when a lease moves). A part is visible as it is sent, before
  the driver's commit.
* **Writes from the driver** (outside a micro-batch): staged rows and the commit journal of
  :mod:`sluice.bus._external`, messages tagged with the writer; the driver's commit sends them.
* Reads are PULL_MESSAGE from exact offsets, several pulls in flight per queue (a broker returns
  at most 32 messages per pull from memory); messages are decoded here, so binary bodies survive.
* Consumer-group offsets are committed with UPDATE_CONSUMER_OFFSET, so ``mqadmin consumerProgress``
  shows a sink's lag.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from queue import Full, Queue
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.bus._external import (
    WRITER_TAG,
    ExternalLog,
    PartTakenOver,
    attempt_id,
    writer_tag,
)
from sluice.bus.base import (
    STORED_SCHEMA,
    BusError,
    BusUnavailable,
    OffsetOutOfRange,
    PartWriter,
    QueueRange,
    StagedSegment,
    TopicInfo,
    UnknownTopic,
    WrittenPart,
)
from sluice.clients import rocketmq as rm

log = logging.getLogger(__name__)

TIMESTAMP_PROPERTY = rm.TIMESTAMP_PROPERTY
KEY_ENCODING_PROPERTY = rm.KEY_ENCODING_PROPERTY
_PULL_BATCH = rm.PULL_BATCH
_PULL_WINDOW = 32  # pulls in flight per queue
_SEND_BYTES = rm.SEND_BYTES
_SEND_COUNT = rm.SEND_COUNT
_ARROW_ROWS = 8192  # rows per Arrow batch the reader yields

SYSTEM_PROPERTIES = rm.SYSTEM_PROPERTIES


_GROUPS: set[tuple[int, str, str]] = set()  # (pid, broker, group) registered for monitoring
# (pid, broker, group, topic) whose offset table the broker has (see `commit_group_offsets`)
_OFFSET_TABLES: set[tuple[int, str, str, str]] = set()


@contextmanager
def _bus_errors() -> Iterator[None]:
    """The boundary between the RocketMQ client and the bus: the client's errors as bus errors
    (same message, prefixed ``rocketmq``), so the bus's callers see only `BusError`s."""
    try:
        yield
    except rm.RocketMQOffsetMoved:
        raise  # `_pull` turns it into OffsetOutOfRange, knowing the sluice queue
    except rm.RocketMQUnavailable as exc:
        raise BusUnavailable(f"rocketmq {exc.message}", suggestion=exc.suggestion) from exc
    except rm.RocketMQError as exc:
        raise BusError(f"rocketmq {exc}") from exc


class RocketMQLog(ExternalLog):
    """Topics of the RocketMQ cluster behind ``namesrv_addr`` (``host:port``, ``;``-separated
    for several name servers). Picklable; connections are per process (see
    `sluice.clients.rocketmq`), requests go through one `RocketMQClient` (``self.client``)."""

    broker_name = "rocketmq"  # only a default: positions name each queue's real broker
    # The broker's rule (TopicValidator): ^[%|a-zA-Z0-9_-]+$, at most 127; no '.'.
    topic_chars = "A-Za-z0-9%|_-"
    topic_max = 127

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        namesrv_addr: str,
        producer_group: str = "sluice-producer",
        consumer_group: str = "sluice-reader",
        cluster: str | None = None,
        timeout_s: float = 10.0,
        max_message_size: int = 4 << 20,
        outage_s: float = 300.0,
        credentials: rm.Credentials | None = None,
    ) -> None:
        super().__init__(state_dir, outage_s=outage_s)
        self.namesrv_addr = namesrv_addr
        self.credentials = credentials  # ACL: every request is signed with them
        self.producer_group = producer_group
        self.consumer_group = consumer_group
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.max_message_size = max_message_size
        # reads pull as the consumer group; writes name the producer group (`_send_ext`)
        self.client = rm.RocketMQClient(
            namesrv_addr, timeout_s=timeout_s, group=consumer_group, credentials=credentials
        )

    def __repr__(self) -> str:
        return f"RocketMQLog(namesrvAddr={self.namesrv_addr!r})"

    # -- routes ----------------------------------------------------------------------------------
    def _routed(self, topic: str) -> tuple[rm.MessageQueue, ...]:
        """``topic``'s queues as the name server routes them; none for a topic it does not
        know, unless no broker is registered at all: then it raises (`BusUnavailable`), since a
        stopped broker's routes go with it and "no route" says nothing about the topic."""
        queues = self.client.queues(topic)
        if not queues:
            self.client.cluster_info()
        return queues

    def _require(self, topic: str) -> tuple[rm.MessageQueue, ...]:
        queues = self._routed(topic)
        if not queues:
            raise UnknownTopic(topic)
        return queues

    def _queue(self, topic: str, queue: int) -> rm.MessageQueue:
        """The RocketMQ queue of sluice queue ``queue``."""
        queues = self._require(topic)
        if isinstance(queue, bool) or not isinstance(queue, int) or not 0 <= queue < len(queues):
            raise ValueError(
                f"invalid queue {queue!r} for topic {topic!r}: must be an int in [0, {len(queues)})"
            )
        return queues[queue]

    # -- admin -----------------------------------------------------------------------------------
    @_bus_errors()
    def check(self) -> None:
        """Raise :class:`BusUnavailable` unless the name server answers (used at worker start)."""
        self.client.cluster_info()

    @_bus_errors()
    def topics(self) -> list[str]:
        return self.client.topics()

    @_bus_errors()
    def topic_exists(self, topic: str) -> bool:
        return bool(self._routed(topic))

    @_bus_errors()
    def queue_count(self, topic: str) -> int:
        return len(self._require(topic))

    @_bus_errors()
    def queue_partition(self, topic: str, queue: int) -> dict[str, str]:
        queues = self.client.queues(topic)
        if not 0 <= queue < len(queues):
            return {"topic": topic, "brokerName": self.broker_name, "queueId": str(queue)}
        return {
            "topic": topic,
            "brokerName": queues[queue].broker,
            "queueId": str(queues[queue].queue_id),
        }

    @_bus_errors()
    def create_topic(self, topic: str, queues: int = 8, *, exist_ok: bool = True) -> TopicInfo:
        if self.topic_exists(topic):
            if not exist_ok:
                raise FileExistsError(f"topic {topic!r} already exists")
        elif self.client.known_to_brokers(topic):
            # The name server does not route it (yet): a broker restarting. Creating it again
            # could change its queue count, so wait for the route instead.
            raise self.client.unavailable(f"topic {topic!r}", "no route yet (a broker restarting?)")
        self.client.create_topic(topic, queues, cluster=self.cluster)
        return self.describe(topic)

    def ensure_topic(self, topic: str, queues: int = 8) -> int:
        # The queue count comes from the name server, whose route outlives a broker that died
        # (it drops one after two minutes without heartbeats; a clean stop unregisters at once,
        # and `_routed` reads the empty route as the outage); reading the queues' offsets
        # (`create_topic` → `describe`) asks the broker itself. A writer then meets a broker
        # outage here, where `TopicWriterPlan.routed` rides it out, not in its first send,
        # whose failure would fail the task.
        return self.create_topic(topic, queues).queues

    @_bus_errors()
    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` from its brokers and the name servers."""
        self._require(topic)
        self.client.delete_topic(topic)

    @_bus_errors()
    def offsets(self, topic: str) -> dict[int, QueueRange]:
        queues = self._require(topic)
        ranges = self.client.offsets(topic, queues)
        return {i: QueueRange(i, *ranges[q]) for i, q in enumerate(queues)}

    # -- staging: messages are encoded on the executors ------------------------------------
    def stage_for(
        self, writer_id: str, topic: str, queue: int, data: pa.RecordBatch | pa.Table
    ) -> StagedSegment:
        """Encode ``data``'s rows as RocketMQ messages tagged with ``writer_id`` and stage them
        (one binary ``message`` column): the driver's commit then only moves bytes."""
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if table.num_rows:
            self._check_encodable(topic, table)
            encoded = rm.encode_messages(table, WRITER_TAG, writer_tag(writer_id))
            table = pa.table({"message": encoded})
        return self._write_staged(writer_id, topic, queue, table)

    def _check_encodable(self, topic: str, table: pa.Table | pa.RecordBatch) -> None:
        """Fail the task that produced a record RocketMQ cannot carry, with a clear message,
        rather than the commit of the whole micro-batch."""
        headers = table.column("headers")
        # as raw characters or as JSON escapes (json.dumps writes \x01 as \u0001)
        bad = pc.match_substring_regex(headers, r"[\x01\x02]|\\u000[12]")
        if pc.any(bad).as_py():
            raise ValueError(
                f"topic {topic!r}: a record extension contains the control character "
                "\\x01 or \\x02, which RocketMQ uses to separate message properties"
            )
        biggest = pc.max(pc.binary_length(table.column("value"))).as_py() or 0
        if biggest > self.max_message_size:
            raise ValueError(
                f"topic {topic!r}: a record value has {biggest} bytes, more than "
                f"maxMessageSize={self.max_message_size}"
            )

    # -- writes from the executors: parts ------------------------------------------------------
    def part_writer(
        self,
        writer_id: str,
        batch_id: int,
        task: int,
        *,
        fence: tuple[str, int] | None = None,
    ) -> PartWriter:
        """Task ``task``'s part of micro-batch ``batch_id``: sends counted on replay."""
        return _RocketMQPart(self, writer_id, batch_id, task, fence)

    # -- reading ---------------------------------------------------------------------------------
    @_bus_errors()
    def read(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        mq = self._queue(topic, queue)
        rng = self.offsets(topic)[queue]
        if start < rng.min_offset or start > rng.max_offset:
            raise OffsetOutOfRange(topic, queue, start, rng.min_offset, rng.max_offset)
        stop = min(end, rng.max_offset)
        if stop <= start:
            return iter(())
        pulled = _prefetched(lambda: self._pull(topic, queue, mq, start, stop))
        return self._decode(pulled, stop)

    @staticmethod
    def _decode(pulled: Iterable[bytes], stop: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Pull response bodies as reader batches (messages at offsets below ``stop``), about
        ``_ARROW_ROWS`` rows each: the bodies of many pulls are joined and decoded at once."""
        chunk: list[bytes] = []
        for body in pulled:
            chunk.append(body)
            if len(chunk) >= _ARROW_ROWS // _PULL_BATCH:
                yield from _decode_chunk(b"".join(chunk), stop)
                chunk = []
        if chunk:
            yield from _decode_chunk(b"".join(chunk), stop)

    def _pull(
        self, topic: str, queue: int, mq: rm.MessageQueue, start: int, stop: int
    ) -> Iterator[bytes]:
        """Pull response bodies covering offsets ``start`` to (at least) ``stop``, in order,
        ``_PULL_WINDOW`` pulls in flight at a time."""
        with _bus_errors():
            try:
                yield from self.client.pull_bodies(topic, mq, start, stop, window=_PULL_WINDOW)
            except rm.RocketMQOffsetMoved as exc:
                raise OffsetOutOfRange(
                    topic, queue, exc.offset, exc.min_offset, exc.max_offset
                ) from exc

    def _register_group(self, address: str, group: str) -> None:
        """Make ``group`` known the way a Java consumer's first heartbeat does (its subscription
        group and its ``%RETRY%`` topic), so that ``mqadmin consumerProgress`` can show it."""
        key = (os.getpid(), address, group)
        if key in _GROUPS:
            return
        try:
            self.client.create_group(address, group)
        except rm.RocketMQAccessDenied as exc:
            if exc.kind != "admin":
                raise
            # ACL: an account without admin rights cannot create groups; the broker creates the
            # group itself on the first commit (autoCreateSubscriptionGroup), only the retry
            # topic that mqadmin looks for is missing.
            log.info(
                "rocketmq: group %r not registered on %s (the account is not admin)", group, address
            )
            _GROUPS.add(key)
            return
        ext = rm.create_topic_ext(f"%RETRY%{group}", 1)
        (resp,) = self.client.broker(address, [(rm.UPDATE_AND_CREATE_TOPIC, ext, b"")])
        if resp.code != rm.SUCCESS:
            refusal = rm.acl_refusal(resp, self.credentials)
            if refusal is None or refusal.kind != "admin":
                raise self.client.failed(f"create the retry topic of group {group!r}", resp)
            # ACL 2.0 (5.x) may let an account create the group but not the retry topic: the
            # group is usable, only mqadmin's view of it lacks the retry topic.
            log.info("rocketmq: no retry topic for group %r on %s (not an admin)", group, address)
        _GROUPS.add(key)

    # -- the commit steps (see sluice.bus._external) ---------------------------------------------
    @_bus_errors()
    def _end_offsets(self, topic: str, queues: list[int]) -> dict[int, int]:
        ranges = self.offsets(topic)
        return {q: ranges[q].max_offset for q in queues}

    @_bus_errors()
    def _count_tagged(self, topic: str, queue: int, start: int, tag: str) -> int:
        mq = self._queue(topic, queue)
        end = self.offsets(topic)[queue].max_offset
        return sum(
            1
            for body in self._pull(topic, queue, mq, start, end)
            for m in rm.decode_messages(body)
            if m.queue_offset < end and m.properties.get(WRITER_TAG) == tag
        )

    @_bus_errors()
    def _send(
        self, topic: str, tables: Mapping[int, pa.Table], tag: str, check: Callable[[], None]
    ) -> None:
        # One batch per queue in flight at a time (a later batch of a queue is sent only once the
        # earlier one is stored), but the queues of one broker share each round trip. RocketMQ
        # cannot fence a producer: the writer's lease generation is checked before each round.
        pending: dict[int, Iterator[tuple[memoryview, int]]] = {
            q: rm.batch_bodies(table.column("message")) for q, table in sorted(tables.items())
        }
        self._await_readable(topic, self._send_rounds(topic, pending, check))

    def _send_rounds(
        self,
        topic: str,
        pending: dict[int, Iterator[tuple[memoryview, int]]],
        check: Callable[[], None],
    ) -> dict[int, int]:
        """Send each queue's bodies in order, one per queue in flight (the queues of a broker
        share each round trip), ``check()`` before each round; return each queue's end offset
        after its last batch."""
        where = {q: self._queue(topic, q) for q in pending}
        ends: dict[int, int] = {}
        while pending:
            check()
            round_: dict[str, list[tuple[int, bytes, int]]] = {}
            for q in list(pending):
                item = next(pending[q], None)
                if item is None:
                    del pending[q]
                    continue
                round_.setdefault(where[q].address, []).append((q, *item))
            for address, items in round_.items():
                self._send_round(topic, address, items, where, ends, check)
        return ends

    def _send_round(
        self,
        topic: str,
        address: str,
        items: list[tuple[int, bytes, int]],
        where: Mapping[int, Any],
        ends: dict[int, int],
        check: Callable[[], None],
    ) -> None:
        """One round trip to a broker: a batch per queue; a batch the broker refuses as busy
        (flow control) is sent again after a pause (`rm.send_riding_busy`), the writer's
        ownership checked after each pause; each queue's next batch waits for its busy one,
        so a queue's order holds."""
        requests = [
            (rm.SEND_BATCH_MESSAGE, self._send_ext(topic, where[q].queue_id), body)
            for q, body, _ in items
        ]
        responses = rm.send_riding_busy(
            lambda reqs: self.client.broker(address, reqs), requests, check=check
        )
        for (q, _, count), resp in zip(items, responses, strict=True):
            if resp.code not in rm.STORED_CODES:
                raise self.client.failed(f"send to topic {topic!r} queue {q}", resp)
            ends[q] = int(resp.field("queueOffset")) + count

    def _await_readable(self, topic: str, ends: Mapping[int, int]) -> None:
        """Wait until each queue's readable end reaches ``ends``: a broker acknowledges a send
        once it is in the commit log, and makes it readable (consume queue) a moment later."""
        deadline = time.monotonic() + self.timeout_s
        while ends:
            ranges = self.offsets(topic)
            ends = {q: e for q, e in ends.items() if ranges[q].max_offset < e}
            if not ends:
                return
            if time.monotonic() > deadline:
                raise self.client.unavailable(
                    f"topic {topic!r}", f"sent messages not readable after {self.timeout_s}s"
                )
            time.sleep(0.005)

    @_bus_errors()
    def _before_recount(self, topic: str) -> None:
        # What an earlier attempt stored must be readable before it is counted.
        for address in sorted({q.address for q in self._require(topic)}):
            self.client.wait_dispatched(address)

    def _send_ext(self, topic: str, qid: int) -> dict[str, Any]:
        return rm.send_ext(self.producer_group, topic, qid, rm.now_ms())

    # -- monitoring ------------------------------------------------------------------------------
    @_bus_errors()
    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        by_broker: dict[str, list[tuple[int, Mapping[str, Any], bytes]]] = {}
        for (topic, queue), offset in sorted(offsets.items()):
            if not self.topic_exists(topic):
                continue
            mq = self._queue(topic, queue)
            ext = {
                "consumerGroup": group,
                "topic": topic,
                "queueId": mq.queue_id,
                "commitOffset": offset,
            }
            by_broker.setdefault(mq.address, []).append((rm.UPDATE_CONSUMER_OFFSET, ext, b""))
        for address, requests in by_broker.items():
            self._register_group(address, group)
            self._commit_first_apart(address, group, requests)

    def _commit_first_apart(
        self, address: str, group: str, requests: list[tuple[int, Mapping[str, Any], bytes]]
    ) -> None:
        # A broker creates a (topic, group)'s offset table on its first commit without a lock
        # and runs pipelined requests on several threads: concurrent first commits each made
        # a table and the last replaced the others, losing their queues. So the first commit
        # of each topic goes alone (one per topic at once is safe), the rest after it.
        first: dict[str, tuple[int, Mapping[str, Any], bytes]] = {}
        rest = []
        for request in requests:
            topic = request[1]["topic"]
            if topic in first or (os.getpid(), address, group, topic) in _OFFSET_TABLES:
                rest.append(request)
            else:
                first[topic] = request
        for batch in (list(first.values()), rest):
            for resp in self.client.broker(address, batch) if batch else ():
                if resp.code != rm.SUCCESS:
                    raise self.client.failed(f"commit offsets of group {group!r}", resp)
        _OFFSET_TABLES.update((os.getpid(), address, group, topic) for topic in first)

    @_bus_errors()
    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The offsets committed under ``group`` for each queue of ``topic`` (-1: none)."""
        out = {}
        for queue, mq in enumerate(self._require(topic)):
            ext = {"consumerGroup": group, "topic": topic, "queueId": mq.queue_id}
            (resp,) = self.client.broker(mq.address, [(rm.QUERY_CONSUMER_OFFSET, ext, b"")])
            if rm.acl_refusal(resp, self.credentials) is not None:
                raise self.client.failed(f"offsets of group {group!r} on topic {topic!r}", resp)
            out[queue] = int(resp.field("offset")) if resp.code == rm.SUCCESS else -1
        return out


#: Bytes of encoded messages a part holds before it sends them (all queues together).
_PART_FLUSH_BYTES = 8 << 20


@dataclass
class _TopicPart:
    """A part's progress on one topic: rows seen and to skip per queue (what an earlier attempt
    stored), encoded messages not yet sent, end offsets after the last send."""

    sent: bool = False  # an earlier attempt finished this topic: send nothing
    skip: dict[int, int] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)
    held: dict[int, list[pa.Array]] = field(default_factory=dict)
    held_bytes: int = 0
    ends: dict[int, int] = field(default_factory=dict)
    taken_over: bool = False  # an earlier attempt had begun this topic


class _RocketMQPart(PartWriter):
    """One task's part of a micro-batch, sent from the executor (see the module docstring)."""

    def __init__(
        self,
        log_: RocketMQLog,
        writer_id: str,
        batch: int,
        task: int,
        fence: tuple[str, int] | None,
    ) -> None:
        self.log, self.writer_id, self.batch, self.task, self.fence = (
            log_,
            writer_id,
            batch,
            task,
            fence,
        )
        self.tag = writer_tag(f"{writer_id}\x00{batch}\x00{task}")
        self.owner = attempt_id()
        self.topics: dict[str, _TopicPart] = {}
        self.rows = 0

    def _topic(self, topic: str) -> _TopicPart:
        found = self.topics.get(topic)
        if found is not None:
            return found
        the_log, journal = self.log, self.log._journal
        with _bus_errors():
            starts = {q: r.max_offset for q, r in the_log.offsets(topic).items()}
        state, stored = journal.claim_part(
            self.writer_id, self.batch, self.task, topic, self.owner, starts, self.fence
        )
        part = self.topics[topic] = _TopicPart(sent=state == "sent", taken_over=state != "new")
        if state == "pending":
            the_log._before_recount(topic)
            part.skip = {q: the_log._count_tagged(topic, q, stored[q], self.tag) for q in stored}
            log.info(
                "rocketmq: part of task %d of %s batch %d on %r taken over; already stored per "
                "queue: %s",
                self.task,
                self.writer_id,
                self.batch,
                topic,
                {q: n for q, n in part.skip.items() if n},
            )
        return part

    def add(self, topic: str, queue: int, rows: pa.RecordBatch) -> None:
        part = self._topic(topic)
        n = rows.num_rows
        if part.sent or not n:
            return
        seen, skip = part.seen.get(queue, 0), part.skip.get(queue, 0)
        part.seen[queue] = seen + n
        if seen + n <= skip:
            return
        if seen < skip:  # the first rows reached the queue in an earlier attempt
            rows = rows.slice(skip - seen)
        self.log._check_encodable(topic, rows)
        encoded = rm.encode_messages(pa.Table.from_batches([rows]), WRITER_TAG, self.tag)
        part.held.setdefault(queue, []).append(encoded)
        part.held_bytes += encoded.nbytes
        self.rows += len(encoded)
        if part.held_bytes >= _PART_FLUSH_BYTES:
            self._send(topic, part)

    def _check(self, topic: str) -> None:
        """Before each round trip: still this attempt's part, and the lease not superseded."""
        journal = self.log._journal
        if journal.part_owner(self.writer_id, self.batch, self.task, topic) != self.owner:
            raise PartTakenOver(self.writer_id, self.batch, self.task, topic)
        journal.check_fence(self.fence, topic)

    def _send(self, topic: str, part: _TopicPart) -> None:
        held, part.held, part.held_bytes = part.held, {}, 0
        pending = {
            q: rm.batch_bodies(pa.chunked_array(arrays, pa.binary()))
            for q, arrays in sorted(held.items())
        }
        with _bus_errors():
            ends = self.log._send_rounds(topic, pending, lambda: self._check(topic))
        part.ends.update(ends)

    def finish(self) -> WrittenPart:
        journal = self.log._journal
        for topic, part in sorted(self.topics.items()):
            if part.sent:
                continue
            if part.held:
                self._send(topic, part)
            if part.ends:
                with _bus_errors():
                    self.log._await_readable(topic, part.ends)
            journal.finish_part(
                self.writer_id, self.batch, self.task, topic, self.owner, self.fence
            )
        # the task finished: a task whose records follow this one's may send now
        journal.finish_part(self.writer_id, self.batch, self.task, "", self.owner)
        ends = {t: dict(p.ends) for t, p in self.topics.items() if p.ends}
        replayed = any(p.sent or p.taken_over for p in self.topics.values())
        return WrittenPart(self.writer_id, self.batch, self.task, self.rows, ends, replayed)

    def abort(self) -> None:
        # What was sent stays (RocketMQ cannot take it back): the next attempt counts it.
        for part in self.topics.values():
            part.held.clear()


_PREFETCH = 4  # pull windows a reader keeps ahead of its decoding
_DONE = object()


def _prefetched(pulls: Callable[[], Iterable[bytes]]) -> Iterator[bytes]:
    """The bodies of ``pulls()``, pulled by a helper thread up to `_PREFETCH` windows ahead while
    the caller decodes (the pulls wait on the broker, the decoding on the CPU). An error of the
    pulls is raised here, in order; closing the iterator stops the helper."""
    ahead: Queue[Any] = Queue(maxsize=_PREFETCH * _PULL_WINDOW)
    stopped = threading.Event()

    def put(item: Any) -> bool:
        while not stopped.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def run() -> None:
        try:
            for body in pulls():
                if not put(body):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failed(exc))
            return
        put(_DONE)

    helper = threading.Thread(target=run, name="sluice-rocketmq-pull", daemon=True)
    helper.start()
    try:
        while True:
            item = ahead.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stopped.set()
        helper.join()


@dataclass(frozen=True)
class _Failed:
    error: BaseException


def _decode_chunk(data: bytes, stop: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Joined pull bodies as (first offset, reader batch): vectorised when every message has
    IPv4 hosts, an uncompressed body and only the properties sluice's writer sets for a record
    without key or extensions (`_to_batch_fast`); message by message otherwise."""
    try:
        cols = rm.decode_pulled(data, stop)
    except rm.RemotingError as exc:
        raise BusError(f"rocketmq: a pull response could not be decoded: {exc}") from None
    if cols is not None and len(cols.offsets):
        batch = _to_batch_fast(cols)
        if batch is not None:
            yield int(cols.offsets[0]), batch
            return
    offsets: list[int] = []
    bodies: list[bytes] = []
    born: list[int] = []
    props: list[str] = []
    rm.decode_columns(data, stop, offsets, bodies, born, props)
    if offsets:
        yield offsets[0], _to_batch(offsets, bodies, born, props)


_BROKER_PROPERTIES = SYSTEM_PROPERTIES - {"KEYS", "UNIQ_KEY"}
_TAG_LEN, _ID_LEN = 16, 32  # writer_tag() and unique_ids() lengths
_HEAD = f"{WRITER_TAG}\x01".encode()
_MIDDLE = b"\x02UNIQ_KEY\x01"
_FIXED = len(_HEAD) + _TAG_LEN + len(_MIDDLE) + _ID_LEN + 1
_TEMPLATE = np.frombuffer(_HEAD + b"?" * _TAG_LEN + _MIDDLE + b"?" * _ID_LEN + b"\x02", np.uint8)
_TEXT = np.ones(_FIXED, bool)
_TEXT[len(_HEAD) : len(_HEAD) + _TAG_LEN] = False
_TEXT[len(_HEAD) + _TAG_LEN + len(_MIDDLE) : -1] = False
_STAMP = f"{TIMESTAMP_PROPERTY}\x01".encode()
_STAMP_DIGITS = 18


def _to_batch_fast(cols: rm.PulledColumns) -> pa.RecordBatch | None:
    """`_to_batch` with numpy, for messages sluice wrote from records without key or extensions:
    properties ``sluice.writer``, ``UNIQ_KEY`` (as both encoders write them), an optional
    ``sluice.ts``, then the same system properties on every message (the broker adds
    ``CLUSTER``). None when a message has anything else (it takes the per-message path)."""

    data, at, length = cols.data, cols.properties_at, cols.properties_len
    n = len(at)
    if not (length >= _FIXED).all():
        return None
    # the fixed part: its text where the template has text, no separator in the tag and the id
    head = data[at[:, None] + np.arange(_FIXED)]
    if not (
        (head[:, _TEXT] == _TEMPLATE[_TEXT]).all() and not np.isin(head[:, ~_TEXT], (1, 2)).any()
    ):
        return None

    def equal(pos: Any, text: bytes) -> Any:
        return (rm.grab(data, pos, len(text)) == np.frombuffer(text, np.uint8)).all(axis=1)

    end = at + length
    stamp_at = at + _FIXED
    has_stamp = (length >= _FIXED + len(_STAMP) + 2) & equal(stamp_at, _STAMP)
    digits = rm.grab(data, stamp_at + len(_STAMP), _STAMP_DIGITS + 1).astype(np.int64)
    is_end = digits == 2
    count = is_end.argmax(axis=1)  # digits before the first separator
    place = np.arange(_STAMP_DIGITS + 1)[None, :]
    before = place < count[:, None]
    valid = (
        is_end[np.arange(n), count]
        & (count > 0)
        & ((digits >= 48) & (digits <= 57) | ~before).all(axis=1)
        & (stamp_at + len(_STAMP) + count < end)
    )
    if not valid[has_stamp].all():
        return None
    power = np.where(before, count[:, None] - 1 - place, 0)
    millis = ((digits - 48) * np.where(before, 10**power, 0)).sum(axis=1)
    stamps = np.where(has_stamp, millis, cols.born)
    rest_at = np.where(has_stamp, stamp_at + len(_STAMP) + count + 1, stamp_at)
    rest_len = end - rest_at
    if n and (rest_len != rest_len[0]).any():
        return None
    if n and rest_len[0]:
        rest = rm.grab(data, rest_at, int(rest_len[0]))
        if (rest != rest[0]).any() or not _only_broker_properties(rest[0].tobytes()):
            return None
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.binary()),
            cols.bodies,
            pa.array(stamps * 1000, pa.int64()).cast(STORED_SCHEMA.field("timestamp").type),
            pa.nulls(n, pa.string()),
            pa.array(cols.offsets, pa.int64()),
        ],
        names=[*STORED_SCHEMA.names, "offset"],
    )


def _only_broker_properties(text: bytes) -> bool:
    """Whether ``text`` (the end of a property list) holds only system properties but ``KEYS``
    and ``UNIQ_KEY``, each ``name\\x01value``, separated by ``\\x02``."""
    for item in text.split(b"\x02"):
        if not item:
            continue
        name, sep, value = item.partition(b"\x01")
        if not sep or b"\x01" in value or name.decode("utf-8", "replace") not in _BROKER_PROPERTIES:
            return False
    return True


def _to_batch(
    offsets: list[int], bodies: list[bytes], born: list[int], properties: list[str]
) -> pa.RecordBatch:
    """Pulled messages (as columns) as a STORED_SCHEMA batch plus their offsets."""
    keys: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[str | None] = []
    system = SYSTEM_PROPERTIES
    for text, born_ts in zip(properties, born, strict=True):
        try:
            props = dict(item.split("\x01", 1) for item in text.split("\x02") if item)
        except ValueError:  # an item without a value: the tolerant parser
            props = rm.decode_properties(text.encode("utf-8"))
        key = props.get("KEYS")
        if key is None:
            keys.append(None)
        elif props.get(KEY_ENCODING_PROPERTY) == "b64":
            keys.append(base64.b64decode(key))
        else:
            keys.append(key.encode("utf-8"))
        stamp = props.get(TIMESTAMP_PROPERTY)
        stamps.append((int(stamp) if stamp else born_ts) * 1000)
        user = {k: v for k, v in props.items() if k not in system and not k.startswith("sluice.")}
        headers.append(json.dumps(user, sort_keys=True) if user else None)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(bodies, pa.binary()),
            pa.array(stamps, pa.int64()).cast(STORED_SCHEMA.field("timestamp").type),
            pa.array(headers, pa.string()),
            pa.array(offsets, pa.int64()),
        ],
        names=[*STORED_SCHEMA.names, "offset"],
    )
