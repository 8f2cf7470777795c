"""Topics on Kafka through confluent-kafka (librdkafka): the `TopicLog` of `bus=kafka`.

* A sluice topic is a Kafka topic, a queue is a partition, a queue offset is the Kafka offset.
* Key → Kafka key, extensions → headers, timestamp → CreateTime.
* Reads are ``assign`` + position at the exact start offset with ``isolation.level=read_committed``,
  up to the last stable offset (LSO), with ``auto.offset.reset=error``: a range that retention
  removed is reported, never silently skipped. Offsets of a topic are not dense (each transaction
  ends with a commit or abort marker, and aborted messages are skipped), so a reader stops at its
  end offset by the consumer's position, not by counting messages.
* Consumer-group offsets (``commit_group_offsets``) are committed for monitoring only, waiting at
  most ``bus.request.timeout.ms`` for the broker.

Writes from the executors (every topic write inside a Spark micro-batch)
-------------------------------------------------------------------------
Each Spark task sends its *part* of a micro-batch (writer *W* = ``<connector>/<run>``, batch
*B*, task *p* = the Spark partition) itself, from the executor that produced the rows, batched
by librdkafka, in parallel with the other tasks (except where records of one source range must
follow each other in a queue: :mod:`sluice.bus.spark`).

* **One transaction per part.** The part's producer has ``transactional.id =
  sluice-<W>#<p>`` — the same for every batch and every attempt of task *p* of that writer, so a
  new attempt fences the old ones. Inside the transaction, before the records, the task commits
  the part's *marker*: offset *B + 1* of the consumer group named like the transactional id, on
  partition 0 of the first topic the part writes. Records and marker become visible together or
  not at all.
* **Why not one atomic commit of the micro-batch.** Kafka's transactions belong to one producer:
  a commit spans one producer's partitions, and a transaction that was prepared but not committed
  does not outlive its producer (KIP-939's two-phase commit is not in librdkafka). A driver that
  "commits when every task is prepared" would have to ask each executor's producer to commit,
  and a part whose executor died after preparing could not be committed by anyone: that batch
  would be half visible with its other half lost for good. So each part commits on its own when
  its task ends, exactly once, and the driver's commit records the micro-batch in the journal
  (checked against the writer's lease generation: a fenced writer's micro-batch fails) and waits
  until ``read_committed`` readers can see the parts.
* **Exactly once per part, however often the task runs.** An attempt (a) makes a new producer
  of the id (none is kept from one micro-batch to the next: Spark runs a task in its idle Python
  workers in turn, so a kept one would be fenced by the next): ``init_transactions`` fences
  every older producer of the id (its open transaction is aborted, its later requests refused)
  and first completes a transaction an older producer had already asked to commit; (b) reads
  the marker with
  ``isolation.level=read_committed`` (OffsetFetch with RequireStable: a marker whose transaction is
  still being completed is waited for); (c) if it names *B* or later, the part is in the topic:
  nothing is produced; (d) else, after the lease check below, begins a transaction and adds the
  marker first — which fails at once if another producer took the id since (a); the task then
  makes a new producer and starts again at (b) — then produces its rows and commits. Two commits
  of one part cannot both succeed: say *P* commits, then *Q*. *Q*'s producer was initialised after
  *P*'s (else *P*'s initialisation fenced it) and after *P*'s commit (else it fenced *P*), so *Q*'s
  marker read, which follows its initialisation, saw *B* and *Q* produced nothing. A commit that
  fails leaves nothing visible (aborted), and the task fails; Spark runs it again (or the query
  restarts and replays the batch), and that attempt starts at (a).
* **Zombies.** An attempt whose producer lives on past it (its executor paused, its result
  lost) cannot make its records visible once a newer attempt or replay initialised the id: its
  transaction was aborted and its later produce and commit are refused (fenced by epoch). If it
  committed before that, its records *are* the part, and the newer attempt's marker read finds
  them.
* **Lease generations (distributed mode).** Before (d) the task checks the connector's lease
  generation in the journal (:mod:`sluice.bus._external`). A zombie worker's task that passes the
  check belongs to a micro-batch whose offsets the zombie had written to its checkpoint before
  the check, hence before the new owner recorded its generation and copied that checkpoint, so the
  new owner's batch *B* is the same data and the marker keeps it once; a micro-batch the zombie
  plans after the takeover fails the check.
* **After a kill -9** the replay's tasks take the same transactional ids: their
  ``init_transactions`` aborts what the dead attempts left open (their records never become
  visible), and parts that committed are skipped by their markers.

**What a plain ``read_committed`` consumer sees**: every record once. A micro-batch appears part
by part — each task's share all at once when that task ends, possibly before sluice counts the
micro-batch committed — and a part left open by a dead task holds the partitions' LSO until the
replay (or ``transaction.timeout.ms``, 60 s by default, ``kafka.transaction.timeout.ms``)
aborts it. A part of a micro-batch that is never replayed (its connector's offsets were reset
or the connector deleted right after a crash mid-batch) stays visible. ``read_uncommitted``
consumers also see aborted records.

Writes from the driver (outside a micro-batch)
----------------------------------------------
A topic writer called outside a Spark micro-batch (no batch id on the executor side) stages its
rows and the driver sends them through the commit journal of :mod:`sluice.bus._external`, each
commit (one micro-batch of one writer to one topic) as **one Kafka transaction**, every message
tagged with the ``sluice.writer`` header (stripped by the reader). Why that is exactly once:

* The producer of a writer has ``transactional.id = sluice-<writer id>``. Creating it calls
  ``init_transactions``: the transaction coordinator bumps the producer epoch, **aborts the open
  transaction of an older producer with this id** (or completes one whose commit it had already
  accepted), and from then on refuses that older producer (a zombie).
* Which producer may use the id is decided by the writer's **lease generation**, not by Kafka:
  Spark runs a query's driver-side commit in whichever of its pooled Python workers is idle, so
  two processes of one live writer may each make a producer, and the newer one fences the older.
  A commit whose producer was fenced therefore checks the journal's fence: if its generation is
  still the newest (or there is none, in standalone mode) it makes a new producer, which takes
  the id back, and completes the batch from its ``pending`` row; if another worker took the
  connector over, it stops with ``WriterFenced``. A writer whose generation was superseded never
  makes a producer at all (the fence is checked first), so it cannot fence the new owner's.
* The journal row is written ``pending`` (with each partition's high watermark) *before* the
  transaction begins, and ``done`` after ``commit_transaction`` returned.
* A replay that finds no row: nothing was sent; ``done``: everything is visible, send nothing.
  ``pending``: the earlier attempt died somewhere between the journal row and the ``done`` mark.
  The replay's producer is a fresh one, so ``init_transactions`` has settled the earlier
  transaction: committed or aborted as a whole, on every partition at once. Counting this
  writer's messages from the recorded watermarks as a ``read_committed`` consumer (after waiting
  for the LSO to pass the high watermark, so no open transaction hides any) therefore gives, per
  partition, either all of the batch's rows or none — and only the missing rows are sent, in a
  new transaction.

Clients are created lazily, once per process and configuration (Spark reuses its Python workers,
so a task usually finds its consumer already connected), and are never pickled.
"""

from __future__ import annotations

import bisect
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.bus._external import (
    WRITER_TAG,
    ExternalLog,
    attempt_id,
    headers_without_tag,
    writer_tag,
)
from sluice.bus.base import (
    STORED_SCHEMA,
    BusError,
    BusUnavailable,
    OffsetOutOfRange,
    PartWriter,
    QueueRange,
    TopicInfo,
    UnknownTopic,
    WrittenPart,
)
from sluice.clients.kafka import (
    PER_BATCH_PRODUCER,
    arrow_headers,
    arrow_millis,
    next_consume_wait,
    produce_rows,
)
from sluice.clients.kafka_fetch import FetchError, LeaderFetcher, Unsupported, decode_records
from sluice.sdk.extras import KAFKA, require

log = logging.getLogger(__name__)
_client_log = logging.getLogger("sluice.bus.kafka.librdkafka")

_T = TypeVar("_T")
_CHUNK = 10_000  # messages per consume() call and per Arrow batch
_LOCK = threading.Lock()
# (pid, role, config) -> client: shared by every KafkaLog copy in a process (each Spark task
# unpickles its own copy of the plan).
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENT_LOCKS: dict[tuple[Any, ...], threading.RLock] = {}
_LEADERS: dict[tuple[str, str, int], tuple[str, int]] = {}  # (servers, topic, queue) -> leader
_WRITERS: dict[str, str] = {}  # writer tag -> writer id, for the producer of a commit
# How many times one commit takes its transactional.id back from another process of the same
# writer before it gives up (each time costs one init_transactions).
_REINITS = 3


_QUEUE_MESSAGES = 1_000_000  # the part producer's local queue (queue.buffering.max.messages)


def part_transactional_id(writer_id: str, task: int) -> str:
    """The ``transactional.id`` of task ``task``'s part producer (also its marker group)."""
    return f"sluice-{writer_id}#{task}"


def transactional_id(writer_id: str) -> str:
    """The ``transactional.id`` of a writer's producer: stable across restarts of the writer."""
    return f"sluice-{writer_id}"


class ProducerFenced(BusError):
    """A newer producer with this writer's ``transactional.id`` fenced ours: its open
    transaction was aborted, nothing of it is visible."""


def _kafka() -> Any:
    require(KAFKA, "bus=kafka", key="bus")
    import confluent_kafka
    import confluent_kafka.admin  # a submodule the package does not import itself

    return confluent_kafka


class _Sender:
    """A transactional producer (initialised: older producers with its ``transactional.id`` are
    fenced) plus the delivery errors it reported (only errors are reported)."""

    def __init__(self, config: dict[str, Any], timeout_s: float) -> None:
        self.errors: list[str] = []
        self.fatal: str | None = None
        self.fenced = False

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"partition {msg.partition()}: {err.str()}")

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = err.str()
                self.fenced = self.fenced or _fenced(err)

        self.producer = _kafka().Producer(
            {
                **config,
                "on_delivery": on_delivery,
                "error_cb": on_error,
                "delivery.report.only.error": True,
            }
        )
        self.producer.init_transactions(timeout_s)


class _PartClient:
    """A part attempt's transactional producer (initialised: every older producer of its id is
    fenced), the consumer of its marker group (cached per process: it reads the marker and gives
    the producer the group's metadata), and the delivery errors the producer reported (only
    errors are reported)."""

    def __init__(self, producer_config: dict[str, Any], consumer: Any, timeout_s: float) -> None:
        self.errors: list[str] = []
        self.fatal: str | None = None
        self.fenced = False  # a newer producer of the id took over (or another fatal error)
        self.consumer = consumer

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"{msg.topic()} partition {msg.partition()}: {err.str()}")

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = err.str()
                self.fenced = self.fenced or _fenced(err)

        self.producer = _kafka().Producer(
            {
                **producer_config,
                "on_delivery": on_delivery,
                "error_cb": on_error,
                "delivery.report.only.error": True,
            }
        )
        try:
            self.producer.init_transactions(timeout_s)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let go of the producer (after its transaction ended, or when it failed)."""
        try:
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.poll(0)
        except Exception as exc:  # it is being thrown away anyway
            log.debug("purging a part producer: %s", exc)
        self.producer = None


class _KafkaPart(PartWriter):
    """One task's part of a micro-batch, in one transaction (see the module docstring)."""

    def __init__(
        self, log_: KafkaLog, writer_id: str, batch: int, task: int, fence: tuple[str, int] | None
    ) -> None:
        self.log, self.writer_id, self.batch, self.task, self.fence = (
            log_,
            writer_id,
            batch,
            task,
            fence,
        )
        self.txn_id = part_transactional_id(writer_id, task)
        self.owner = attempt_id()
        self.client: _PartClient | None = None
        self.state = "new"  # → "open" (a transaction began) or "replayed" (the marker had it)
        self.rows = 0
        self.queues: dict[str, set[int]] = {}

    # -- (a)-(d) of the module docstring ----------------------------------------------------
    def _start(self, topic: str) -> None:
        kafka = _kafka()
        marker = kafka.TopicPartition(topic, 0)
        for attempt in range(_REINITS + 1):
            client = self.log._part_client(self.txn_id)  # (a): a new producer, initialised
            try:
                (stored,) = client.consumer.committed([marker], timeout=self.log.timeout_s)  # (b)
            except kafka.KafkaException as exc:
                raise self.log._error(f"reading the batch marker of {self.txn_id}", exc) from None
            if stored.error is not None:
                raise self.log._error(
                    f"reading the batch marker of {self.txn_id}", kafka.KafkaException(stored.error)
                )
            if stored.offset >= self.batch + 1:  # (c)
                client.close()
                log.info(
                    "%s batch %d: its part is in the topic already (marker %d)",
                    self.txn_id,
                    self.batch,
                    stored.offset,
                )
                self.state = "replayed"
                return
            self.log._journal.check_fence(self.fence, topic)
            try:  # (d): the marker first, so a producer superseded since (a) fails here
                client.producer.begin_transaction()
                client.producer.send_offsets_to_transaction(
                    [kafka.TopicPartition(topic, 0, self.batch + 1, metadata=self.writer_id)],
                    client.consumer.consumer_group_metadata(),
                    self.log.timeout_s,
                )
            except kafka.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                client.close()
                if hasattr(err, "code") and (_fenced(err) or err.fatal()) and attempt < _REINITS:
                    # Another process of this task's producer took the id (an earlier batch ran
                    # task p elsewhere): take it back and read the marker again.
                    log.info("%s: producer superseded (%s), starting a new one", self.txn_id, err)
                    continue
                raise self.log._error(f"beginning the transaction of {self.txn_id}", exc) from None
            self.client = client
            self.state = "open"
            return
        raise ProducerFenced(f"{self.txn_id}: producer fenced again and again")  # pragma: no cover

    def add(self, topic: str, queue: int, rows: pa.RecordBatch) -> None:
        if self.state == "new":
            self._start(topic)
        if self.state == "replayed" or not rows.num_rows:
            return
        client = self.client
        assert client is not None
        try:
            _produce_rows(client.producer, topic, queue, rows)
        except _kafka().KafkaException as exc:
            err = exc.args[0] if exc.args else None
            self._fail(client.fatal or (err.str() if hasattr(err, "str") else str(exc)), err)
        if client.fatal or client.errors:
            self._fail(client.fatal or client.errors[0])
        self.rows += rows.num_rows
        self.queues.setdefault(topic, set()).add(queue)

    def _fail(self, problem: str, error: Any = None) -> None:
        """Drop the producer (its transaction is aborted by the broker or the next producer of
        the id) and raise: `ProducerFenced` when a newer attempt took the id, else
        `BusUnavailable`."""
        client, self.client = self.client, None
        fenced = (client is not None and client.fenced) or (
            hasattr(error, "code") and _fenced(error)
        )
        if client is not None:
            client.close()
        where = f"kafka bootstrap.servers={self.log.bootstrap_servers}: part {self.txn_id} batch "
        if fenced:
            raise ProducerFenced(
                f"{where}{self.batch} was fenced by a newer attempt of the task: {problem} "
                "(nothing of this attempt is visible)"
            )
        raise BusUnavailable(
            f"{where}{self.batch} not delivered: {problem} (its transaction is aborted)",
            suggestion="the task is run again, or the micro-batch replayed",
        )

    def finish(self) -> WrittenPart:
        kafka = _kafka()
        client = self.client
        ends: dict[str, dict[int, int]] = {}
        if self.state == "open" and client is not None:
            try:
                client.producer.commit_transaction(self.log.timeout_s)
            except kafka.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                problem = err.str() if hasattr(err, "str") else str(exc)
                self._fail(client.fatal or problem, err)
            if client.fatal or client.errors:
                self._fail(client.fatal or client.errors[0])
            self.client = None
            client.close()
            for topic, queues in sorted(self.queues.items()):
                ends[topic] = self.log._list_offsets(
                    topic, sorted(queues), latest=True, committed=False
                )
        # the task finished: a task whose records follow this one's may send now
        self.log._journal.finish_part(self.writer_id, self.batch, self.task, "", self.owner)
        return WrittenPart(
            self.writer_id, self.batch, self.task, self.rows, ends, self.state == "replayed"
        )

    def abort(self) -> None:
        client, self.client = self.client, None
        if client is None or self.state != "open":
            return
        try:
            client.producer.abort_transaction(min(self.log.timeout_s, 10.0))
        except Exception as exc:  # the next producer of this id aborts it in init_transactions
            log.info("%s: abort failed (%s)", self.txn_id, exc)
        client.close()


def _new_consumer(config: dict[str, Any]) -> Any:
    return _kafka().Consumer(config)


def _produce_rows(producer: Any, topic: str, queue: int, rows: pa.RecordBatch) -> None:
    """Queue ``rows`` (STORED_SCHEMA) for ``topic`` partition ``queue``, in order."""
    keys = rows.column("key")
    produce_rows(
        producer,
        topic,
        queue,
        rows.column("value").to_pylist(),
        keys=None if keys.null_count == len(keys) else keys.to_pylist(),
        millis=arrow_millis(rows.column("timestamp")),
        headers=arrow_headers(rows.column("headers")),
        queue_limit=_QUEUE_MESSAGES,
    )


class KafkaLog(ExternalLog):
    """Topics on a Kafka cluster (``bootstrap.servers``), with ``client_config`` passed through to
    every librdkafka client (security, timeouts, …). Picklable; see the module docstring."""

    broker_name = "kafka"
    # Kafka's topic rule (org.apache.kafka.common.internals.Topic): ASCII letters, digits, '.',
    # '_' and '-', at most 249.
    topic_chars = "A-Za-z0-9._-"
    topic_max = 249

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
        outage_s: float = 300.0,
        replication_factor: int = -1,
    ) -> None:
        super().__init__(state_dir, outage_s=outage_s)
        self.bootstrap_servers = bootstrap_servers
        self.client_config = dict(client_config or {})
        self.timeout_s = timeout_s
        self.replication_factor = replication_factor  # -1: the broker's default.replication.factor

    def __repr__(self) -> str:
        return f"KafkaLog(bootstrap.servers={self.bootstrap_servers!r})"

    # -- clients ---------------------------------------------------------------------------------
    def _base(self) -> dict[str, Any]:
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers}

    def _client(
        self, role: str, extra: Mapping[str, Any], make: Callable[[dict], _T]
    ) -> tuple[_T, threading.RLock]:
        """This process's client for ``role`` (created on first use) and the lock that
        serialises its use by threads (a consumer's assignment is shared state)."""
        config = {**self._base(), **extra}
        key = (os.getpid(), role, tuple(sorted((k, str(v)) for k, v in config.items())))
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                try:
                    client = make({**config, "logger": _client_log})
                except _kafka().KafkaException as exc:
                    raise self._error("cannot create a client", exc) from None
                _CLIENTS[key] = client
                _CLIENT_LOCKS[key] = threading.RLock()
            return client, _CLIENT_LOCKS[key]

    def _forget(self, role: str, extra: Mapping[str, Any]) -> None:
        """Drop this process's client for ``role``: the next use makes a new one."""
        config = {**self._base(), **extra}
        key = (os.getpid(), role, tuple(sorted((k, str(v)) for k, v in config.items())))
        with _LOCK:
            _CLIENTS.pop(key, None)

    def _admin(self) -> Any:
        # A metadata request naming a topic would create it on a broker that auto-creates
        # topics (an admin client is a producer to librdkafka, whose default allows it).
        return self._client("admin", self._ADMIN, lambda c: _kafka().admin.AdminClient(c))[0]

    _ADMIN = {"allow.auto.create.topics": False}

    _CONSUMER = {
        "group.id": "sluice-reader",  # never joined: the reader assigns partitions itself
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
        "isolation.level": "read_committed",
        # big fetches: a range read takes whole MBs of one partition per round trip
        "max.partition.fetch.bytes": 8 << 20,
        "fetch.max.bytes": 64 << 20,
    }

    def _consumer(self) -> tuple[Any, threading.RLock]:
        return self._client("consumer", self._CONSUMER, lambda c: _kafka().Consumer(c))

    _PRODUCER = {
        "linger.ms": 5,
        "queue.buffering.max.messages": 500_000,
    }

    def _producer_config(self, writer_id: str) -> dict[str, Any]:
        return {**self._PRODUCER, "transactional.id": transactional_id(writer_id)}

    def _sender(self, writer_id: str) -> tuple[_Sender, threading.RLock]:
        """This process's transactional producer of ``writer_id``; creating it fences (and
        settles the open transaction of) any older producer of the same writer."""
        return self._client(
            "producer", self._producer_config(writer_id), lambda c: _Sender(c, self.timeout_s)
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
        """Task ``task``'s part of micro-batch ``batch_id``: one transaction with its marker."""
        return _KafkaPart(self, writer_id, batch_id, task, fence)

    _PART_PRODUCER = {
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": _QUEUE_MESSAGES,
        **PER_BATCH_PRODUCER,  # a producer is made for every part
    }

    def _part_client(self, txn_id: str) -> _PartClient:
        """A new producer of ``txn_id``, initialised (which fences every older producer of the
        id and settles its transaction), with this process's consumer of the marker group."""
        base = {**self._base(), "logger": _client_log}
        producer = {
            **self._PART_PRODUCER,
            "client.id": f"sluice-part-{socket.gethostname()}-{os.getpid()}",
            **base,
            "transactional.id": txn_id,
        }
        group = {"group.id": txn_id, "enable.auto.commit": False}
        consumer, _ = self._client(f"marker:{txn_id}", {**self._CONSUMER, **group}, _new_consumer)
        try:
            return _PartClient(producer, consumer, self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot start the producer of {txn_id}", exc) from None

    def _await_parts(self, topic: str, ends: Mapping[int, int]) -> None:
        """Wait until the LSO of each queue reached ``ends`` (commit markers are written after
        ``commit_transaction`` returned). Another writer's open transaction below our parts holds
        the LSO back: then give up after ``bus.request.timeout.ms`` with a warning (the parts
        are committed; readers see them when that transaction ends)."""
        queues = sorted(ends)
        deadline = time.monotonic() + self.timeout_s
        pause = 0.002
        while True:
            stable = self._list_offsets(topic, queues, latest=True)
            if all(stable[q] >= ends[q] for q in queues):
                return
            if time.monotonic() > deadline:
                log.warning(
                    "kafka topic %r: committed records not yet readable after %.0fs (last "
                    "stable offsets %s, below %s): another writer's transaction is open",
                    topic,
                    self.timeout_s,
                    stable,
                    dict(ends),
                )
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _drop_sender(self, writer_id: str, sender: _Sender) -> None:
        """Forget a producer that failed: the next attempt makes a new one, whose
        ``init_transactions`` aborts what this one left open and fences it (its requests still in
        flight are refused by the brokers), so a recount sees a settled transaction."""
        self._forget("producer", self._producer_config(writer_id))
        try:
            sender.producer.purge(in_queue=True, in_flight=True, blocking=False)
            sender.producer.poll(0)
        except Exception as exc:  # it is being thrown away anyway
            log.debug("purging a failed producer: %s", exc)

    def _commit(
        self,
        writer_id: str,
        batch_id: int,
        topic: str,
        segs: list[Any],
        fence: tuple[str, int] | None = None,
    ) -> bool:
        _WRITERS[writer_tag(writer_id)] = writer_id
        for attempt in range(_REINITS + 1):
            # a writer whose lease generation was superseded never makes a producer: it would
            # fence the new owner's
            self._journal.check_fence(fence, topic)
            try:
                self._sender(writer_id)  # fence an older producer of this writer first
            except _kafka().KafkaException as exc:
                raise self._error(f"cannot start the producer of {writer_id}", exc) from None
            try:
                return super()._commit(writer_id, batch_id, topic, segs, fence)
            except ProducerFenced as exc:
                self._journal.check_fence(fence, topic)  # superseded: WriterFenced, stop
                if attempt == _REINITS:
                    raise
                # Still the owner: the newer producer belongs to another process of this very
                # writer (Spark runs the driver-side commit in whichever pooled Python worker
                # is idle, and each process makes its own producer). Take the id back; the
                # journal row is `pending`, so the batch is completed, not sent twice.
                log.info("%s; the writer still holds its lease: starting a new producer", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def _before_recount(self, topic: str) -> None:
        # The producer is fresh (see _commit), so this writer's earlier transaction is settled;
        # wait until no open transaction (of any writer) keeps the LSO below the high watermark,
        # so that counting as a read_committed consumer sees everything that is committed.
        self._wait_stable(
            topic,
            list(range(self.queue_count(topic))),
            timeout_s=max(self.timeout_s, 120.0),
            problem="is kept unstable by an open transaction",
            suggestion="a writer died mid-transaction; it is aborted after its "
            "transaction.timeout.ms",
        )

    def _error(self, what: str, exc: Exception, *, transient: tuple[int, ...] = ()) -> BusError:
        err = exc.args[0] if exc.args else None
        text = f"{err.str()} ({err.name()})" if hasattr(err, "str") else str(exc)
        message = f"kafka bootstrap.servers={self.bootstrap_servers}: {what}: {text}"
        kafka_error = _kafka().KafkaError
        transient = {
            kafka_error._TRANSPORT,
            kafka_error._TIMED_OUT,
            kafka_error._ALL_BROKERS_DOWN,
            kafka_error._RESOLVE,
            kafka_error._MSG_TIMED_OUT,
            kafka_error._WAIT_COORD,
            kafka_error.LEADER_NOT_AVAILABLE,
            kafka_error.NOT_LEADER_FOR_PARTITION,
            kafka_error.REQUEST_TIMED_OUT,
            kafka_error.NETWORK_EXCEPTION,
            # a broker that restarted: the client's leader epochs are stale until it refreshes
            kafka_error.FENCED_LEADER_EPOCH,
            kafka_error.UNKNOWN_LEADER_EPOCH,
            *transient,
        }
        if hasattr(err, "code") and (err.code() in transient or err.retriable()):
            return BusUnavailable(message, suggestion="is the Kafka cluster up and reachable?")
        return BusError(message)

    # -- admin -----------------------------------------------------------------------------------
    def _metadata(self, topic: str | None = None) -> dict[str, int]:
        """Partition count per topic (of ``topic`` alone when given: a cluster's whole metadata
        is thousands of partitions on a busy cluster, ~70 ms of a worker's CPU each time)."""
        try:
            md = self._admin().list_topics(topic, timeout=self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error("cannot list topics", exc) from None
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def check(self) -> None:
        """Raise :class:`BusUnavailable` unless the cluster answers (used at worker start)."""
        self._metadata()

    def topics(self) -> list[str]:
        return sorted(self._metadata())

    def topic_exists(self, topic: str) -> bool:
        return topic in self._metadata(topic)

    def queue_count(self, topic: str) -> int:
        count = self._metadata(topic).get(topic)
        if count is None:
            raise UnknownTopic(topic)
        return count

    def create_topic(self, topic: str, queues: int = 8, *, exist_ok: bool = True) -> TopicInfo:
        if topic in self._metadata(topic):
            if not exist_ok:
                raise FileExistsError(f"topic {topic!r} already exists")
            return self.describe(topic)
        kafka = _kafka()
        new = kafka.admin.NewTopic(topic, queues, replication_factor=self.replication_factor)
        future = self._admin().create_topics([new], request_timeout=self.timeout_s)[topic]
        try:
            future.result()
        except kafka.KafkaException as exc:
            code = exc.args[0].code()
            if code == kafka.KafkaError._UNSUPPORTED_FEATURE:
                # No topic admin API (e.g. librdkafka's mock cluster): let the broker create it
                # on first use, with its own default partition count (`num.partitions`).
                self._auto_create(topic)
            elif code != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._error(f"cannot create topic {topic!r}", exc) from None
        deadline = time.monotonic() + self.timeout_s
        while (count := self._metadata(topic).get(topic)) is None:
            if time.monotonic() > deadline:
                raise BusError(f"kafka: topic {topic!r} was created but never became visible")
            time.sleep(0.1)
        # a new topic's partitions get their leaders a moment after it is listed
        while True:
            try:
                self._list_offsets(topic, list(range(count)), latest=True)
                break
            except BusUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        if count != queues:
            log.warning(
                "kafka topic %r has %d partitions (the broker's default), not %d",
                topic,
                count,
                queues,
            )
        return self.describe(topic)

    def _auto_create(self, topic: str) -> None:
        try:
            # a plain producer's metadata request asks the broker to create the topic
            maker = self._client("meta", {}, lambda c: _kafka().Producer(c))[0]
            maker.list_topics(topic, timeout=self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot create topic {topic!r}", exc) from None

    def offsets(self, topic: str) -> dict[int, QueueRange]:
        count = self.queue_count(topic)
        lows = self._list_offsets(topic, list(range(count)), latest=False)
        highs = self._list_offsets(topic, list(range(count)), latest=True)
        return {q: QueueRange(q, lows[q], highs[q]) for q in range(count)}

    def _list_offsets(
        self, topic: str, queues: list[int], *, latest: bool, committed: bool = True
    ) -> dict[int, int]:
        """Earliest or latest offsets; the latest of ``committed`` is the last stable offset
        (what read_committed readers can reach), otherwise the high watermark."""
        if not queues:
            return {}
        kafka = _kafka()
        spec = kafka.admin.OffsetSpec.latest() if latest else kafka.admin.OffsetSpec.earliest()
        level = kafka.IsolationLevel.READ_COMMITTED if committed else None
        # A leader that just moved (a new topic's partitions get theirs a moment after it is
        # listed) is asked again after a refresh, for a few seconds, before it counts as down.
        moved = {
            kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
            kafka.KafkaError.LEADER_NOT_AVAILABLE,
            kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
        }
        stale = {kafka.KafkaError.FENCED_LEADER_EPOCH, kafka.KafkaError.UNKNOWN_LEADER_EPOCH}
        moved |= stale
        deadline = time.monotonic() + 5.0
        while True:
            futures = self._admin().list_offsets(
                {kafka.TopicPartition(topic, q): spec for q in queues},
                request_timeout=self.timeout_s,
                **({"isolation_level": level} if level is not None else {}),
            )
            out = {}
            try:
                for tp, future in futures.items():
                    out[tp.partition] = future.result().offset
                return out
            except kafka.KafkaException as exc:
                if exc.args[0].code() in stale:
                    # the admin client's leader epochs predate a broker restart and it does not
                    # refresh them by itself: a new client starts from fresh metadata
                    self._forget("admin", self._ADMIN)
                if exc.args[0].code() in moved and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                # "no leaders found" (_NOENT) for a topic that exists: its brokers are down
                raise self._error(
                    f"cannot list offsets of topic {topic!r}",
                    exc,
                    transient=(kafka.KafkaError._NOENT,),
                ) from None

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (needs the topic admin API)."""
        future = self._admin().delete_topics([topic], request_timeout=self.timeout_s)[topic]
        try:
            future.result()
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot delete topic {topic!r}", exc) from None

    # -- reading ---------------------------------------------------------------------------------
    def read(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        ranges = self.offsets(topic)
        if queue not in ranges:
            raise ValueError(f"invalid queue {queue!r} for topic {topic!r}")
        rng = ranges[queue]
        if start < rng.min_offset or start > rng.max_offset:
            raise OffsetOutOfRange(topic, queue, start, rng.min_offset, rng.max_offset)
        stop = min(end, rng.max_offset)
        if stop <= start:
            return iter(())
        return self._read(topic, queue, start, stop)

    def _read(
        self, topic: str, queue: int, start: int, stop: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Straight from the partition's leader, decoded column-wise
        (`sluice.clients.kafka_fetch`), where it can; through librdkafka otherwise (TLS or SASL,
        compressed batches), from wherever the fast path stopped."""
        pos = start
        fetcher = self._fetcher()
        if fetcher is not None:
            try:
                for first, batch, next_offset in self._fetch(fetcher, topic, queue, start, stop):
                    if batch.num_rows:
                        yield first, batch
                    pos = next_offset
                return
            except Unsupported as exc:
                log.info(
                    "kafka topic %r partition %d: %s; reading with librdkafka", topic, queue, exc
                )
        for first, rows in self._consume(topic, queue, pos, stop):
            yield first, _to_batch(rows)

    def _fetcher(self) -> LeaderFetcher | None:
        """This process's fetcher of the cluster's leaders, or None when the clients talk TLS or
        SASL (configured through ``kafka.*``), which only librdkafka speaks here."""
        protocol = str(self.client_config.get("security.protocol", "plaintext")).lower()
        if protocol != "plaintext" or any(
            k.startswith(("sasl.", "ssl.")) for k in self.client_config
        ):
            return None
        key = (os.getpid(), "fetcher", self.bootstrap_servers)
        with _LOCK:
            found = _CLIENTS.get(key)
            if found is None:
                found = _CLIENTS[key] = LeaderFetcher(
                    self._leader,
                    self._forget_leader,
                    timeout_s=self.timeout_s,
                    max_bytes=8 << 20,
                    client_id=f"sluice-reader-{socket.gethostname()}-{os.getpid()}",
                )
            return found

    def _leader(self, topic: str, queue: int) -> tuple[str, int]:
        """The ``(host, port)`` of the leader of ``topic`` partition ``queue`` (metadata cached
        per process until `_forget_leader`)."""
        key = (self.bootstrap_servers, topic, queue)
        found = _LEADERS.get(key)
        if found is not None:
            return found
        try:
            md = self._admin().list_topics(topic, timeout=self.timeout_s)
        except _kafka().KafkaException as exc:
            raise self._error(f"cannot read the metadata of topic {topic!r}", exc) from None
        meta = md.topics.get(topic)
        part = meta.partitions.get(queue) if meta is not None else None
        broker = md.brokers.get(part.leader) if part is not None else None
        if broker is None:
            raise BusUnavailable(
                f"kafka bootstrap.servers={self.bootstrap_servers}: topic {topic!r} partition "
                f"{queue} has no leader now",
                suggestion="is the Kafka cluster up and reachable?",
            )
        found = _LEADERS[key] = (broker.host, broker.port)
        return found

    def _forget_leader(self, topic: str, queue: int) -> None:
        _LEADERS.pop((self.bootstrap_servers, topic, queue), None)

    def _fetch(
        self, fetcher: LeaderFetcher, topic: str, queue: int, start: int, stop: int
    ) -> Iterator[tuple[int, pa.RecordBatch, int]]:
        """``(first offset, STORED_SCHEMA batch + offsets, next offset)`` of ``[start, stop)``
        from the leader; waits out empty fetches for up to ``bus.request.timeout.ms``."""
        pos = start
        idle_since = time.monotonic()
        while pos < stop:
            try:
                records, aborted = fetcher.fetch(topic, queue, pos)
            except FetchError as exc:
                if exc.code == 1:  # OFFSET_OUT_OF_RANGE
                    rng = self.offsets(topic)[queue]
                    raise OffsetOutOfRange(
                        topic, queue, pos, rng.min_offset, rng.max_offset
                    ) from None
                raise BusUnavailable(
                    f"kafka bootstrap.servers={self.bootstrap_servers}: reading topic {topic!r} "
                    f"partition {queue} at {pos}: {exc}",
                    suggestion="is the Kafka cluster up and reachable?",
                ) from None
            got = decode_records(records, pos, stop, aborted, drop_header=WRITER_TAG)
            if got is None or got.next_offset <= pos:
                if time.monotonic() - idle_since > self.timeout_s:
                    raise BusUnavailable(
                        f"kafka bootstrap.servers={self.bootstrap_servers}: no data from topic "
                        f"{topic!r} partition {queue} at offset {pos} (expected up to {stop}) "
                        f"for {self.timeout_s:.0f}s"
                    )
                continue
            idle_since = time.monotonic()
            rows = got.batch
            batch = pa.RecordBatch.from_arrays(
                [
                    rows.column("key"),
                    rows.column("value"),
                    pc.multiply(rows.column("timestamp_ms"), 1000).cast(
                        STORED_SCHEMA.field("timestamp").type
                    ),
                    rows.column("headers"),
                    rows.column("offset"),
                ],
                names=[*STORED_SCHEMA.names, "offset"],
            )
            first = int(rows.column("offset")[0].as_py()) if rows.num_rows else pos
            yield first, batch, got.next_offset
            pos = got.next_offset

    def _consume(
        self, topic: str, queue: int, start: int, stop: int
    ) -> Iterator[tuple[int, list[Any]]]:
        """Messages with ``start <= offset < stop`` in chunks of ``(first offset, messages)``."""
        kafka = _kafka()
        consumer, lock = self._consumer()
        with lock:
            consumer.assign([kafka.TopicPartition(topic, queue, start)])
            try:
                pos = start
                idle_since = time.monotonic()
                wait = next_consume_wait(None, False)
                while pos < stop:
                    msgs = consumer.consume(num_messages=min(stop - pos, _CHUNK), timeout=wait)
                    wait = next_consume_wait(wait, bool(msgs))
                    failed = [m.error() for m in msgs if m.error() is not None]
                    if failed:
                        self._raise_read_error(topic, queue, pos, failed[0])
                    rows = msgs
                    if msgs and msgs[-1].offset() >= stop:  # in offset order: cut at `stop`
                        offsets = [m.offset() for m in msgs]
                        rows = msgs[: bisect.bisect_left(offsets, stop)]
                    if rows:
                        idle_since = time.monotonic()
                        first = rows[0].offset()
                        pos = rows[-1].offset() + 1
                        yield first, rows
                    elif msgs and msgs[0].offset() >= stop:
                        break  # the records left before `stop` were not data (gaps)
                    elif self._position(consumer, topic, queue) >= stop:
                        break  # the rest were transaction markers or aborted messages
                    elif time.monotonic() - idle_since > self.timeout_s:
                        raise BusUnavailable(
                            f"kafka bootstrap.servers={self.bootstrap_servers}: no data from "
                            f"topic {topic!r} partition {queue} at offset {pos} (expected up to "
                            f"{stop}) for {self.timeout_s:.0f}s"
                        )
            finally:
                consumer.unassign()

    @staticmethod
    def _position(consumer: Any, topic: str, queue: int) -> int:
        return int(consumer.position([_kafka().TopicPartition(topic, queue)])[0].offset)

    def _raise_read_error(self, topic: str, queue: int, pos: int, err: Any) -> None:
        kafka = _kafka()
        if err.code() in (
            kafka.KafkaError._AUTO_OFFSET_RESET,
            kafka.KafkaError.OFFSET_OUT_OF_RANGE,
        ):
            rng = self.offsets(topic)[queue]
            raise OffsetOutOfRange(topic, queue, pos, rng.min_offset, rng.max_offset)
        raise self._error(f"reading topic {topic!r} partition {queue}", kafka.KafkaException(err))

    # -- the commit steps (see sluice.bus._external) ---------------------------------------------
    def _end_offsets(self, topic: str, queues: list[int]) -> dict[int, int]:
        # the high watermark: above every message of this writer's earlier batches, even while
        # their commit markers are still being written (the LSO could lag below them)
        return self._list_offsets(topic, queues, latest=True, committed=False)

    def _count_tagged(self, topic: str, queue: int, start: int, tag: str) -> int:
        end = self._list_offsets(topic, [queue], latest=True)[queue]
        wanted = tag.encode()
        count = 0
        for _, rows in self._consume(topic, queue, start, end) if end > start else ():
            for m in rows:
                if (WRITER_TAG, wanted) in (m.headers() or ()):
                    count += 1
        return count

    def _send(
        self, topic: str, tables: Mapping[int, pa.Table], tag: str, check: Callable[[], None]
    ) -> None:
        # `check` is not needed: a newer producer of this writer aborts our transaction and
        # makes its commit fail (the broker fences by producer epoch), see `_commit`
        writer_id = _WRITERS[tag]
        sender, lock = self._sender(writer_id)
        with lock:  # one transaction at a time per producer
            self._send_locked(writer_id, sender, topic, tables, tag)

    def _send_locked(
        self, writer_id: str, sender: _Sender, topic: str, tables: Mapping[int, pa.Table], tag: str
    ) -> None:
        kafka = _kafka()
        producer = sender.producer
        sender.errors.clear()
        tag_header = (WRITER_TAG, tag.encode())
        try:
            producer.begin_transaction()
            for queue, table in sorted(tables.items()):
                for batch in table.to_batches(max_chunksize=_CHUNK):
                    self._produce(producer, topic, queue, batch, tag_header)
                    if sender.fatal or sender.errors:
                        break
            if not (sender.fatal or sender.errors):
                producer.commit_transaction(self.timeout_s)
        except kafka.KafkaException as exc:
            self._drop_sender(writer_id, sender)
            err = exc.args[0] if exc.args else None
            if sender.fenced or (hasattr(err, "code") and _fenced(err)):
                raise self._fenced_error(writer_id, sender.fatal or str(err)) from None
            raise self._error(f"cannot write to topic {topic!r}", exc) from None
        if not (sender.fatal or sender.errors):
            self._wait_stable(topic, sorted(tables))
            return
        self._drop_sender(writer_id, sender)
        if sender.fenced:
            raise self._fenced_error(writer_id, sender.fatal)
        if sender.fatal or sender.errors:
            problem = sender.fatal or sender.errors[0]
            raise BusUnavailable(
                f"kafka bootstrap.servers={self.bootstrap_servers}: writing topic {topic!r} "
                f"failed: {problem}",
                suggestion="the micro-batch is completed when it is replayed",
            )

    def _fenced_error(self, writer_id: str, detail: str | None) -> BusError:
        # Not retried here: `_commit` decides, from the writer's lease generation, whether this
        # writer stops (another worker owns it) or takes the id back (another process of its
        # own). Its open transaction is aborted either way.
        return ProducerFenced(
            f"kafka bootstrap.servers={self.bootstrap_servers}: writer {writer_id} "
            f"(transactional.id {transactional_id(writer_id)!r}) was fenced by a newer producer "
            f"with the same id, or failed fatally: {detail} (nothing of this transaction is "
            "visible)"
        )

    def _wait_stable(
        self,
        topic: str,
        queues: list[int],
        *,
        timeout_s: float | None = None,
        problem: str = "stays unstable after a commit",
        suggestion: str = "another writer keeps a transaction open on it",
    ) -> None:
        """Return once read_committed readers see everything committed so far, i.e. once the
        last stable offset (LSO) of each queue has reached its high watermark.

        After our own commit this is needed because ``commit_transaction`` returns when the
        coordinator has decided, before the commit markers are on every partition (until then
        the LSO stays below the batch); before a recount, because another writer's open
        transaction holds the LSO back."""
        high = self._list_offsets(topic, queues, latest=True, committed=False)
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            stable = self._list_offsets(topic, queues, latest=True)
            if all(stable[q] >= high[q] for q in queues):
                return
            if time.monotonic() > deadline:
                raise BusUnavailable(
                    f"kafka bootstrap.servers={self.bootstrap_servers}: topic {topic!r} "
                    f"{problem} (last stable {stable}, high {high})",
                    suggestion=suggestion,
                )
            time.sleep(0.005)

    @staticmethod
    def _produce(
        producer: Any, topic: str, queue: int, batch: pa.RecordBatch, tag: tuple[str, bytes]
    ) -> None:
        keys = batch.column("key")
        extra = arrow_headers(batch.column("headers"))
        produce_rows(
            producer,
            topic,
            queue,
            batch.column("value").to_pylist(),
            keys=None if keys.null_count == len(keys) else keys.to_pylist(),
            millis=arrow_millis(batch.column("timestamp")),
            headers=[[tag]] * len(batch)
            if extra is None
            else [[tag, *pairs] if pairs else [tag] for pairs in extra],
            queue_limit=KafkaLog._PRODUCER["queue.buffering.max.messages"],
        )

    # -- monitoring ------------------------------------------------------------------------------
    def _group(self, group: str) -> tuple[_GroupClient, threading.RLock]:
        """This process's consumer of ``group`` (never joined: it only commits and reads the
        group's offsets) and its lock."""
        kafka = _kafka()
        extra = {"group.id": group, "enable.auto.commit": False}

        def make(config: dict) -> _GroupClient:
            commits = _Commits()
            return _GroupClient(kafka.Consumer({**config, "on_commit": commits}), commits)

        return self._client(f"group:{group}", extra, make)

    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``offsets`` under ``group``, waiting at most ``timeout_s``
        (``bus.request.timeout.ms``) for the broker: they are for lag tools only (a reader's
        positions are stored elsewhere), so a broker gone since the batch was planned must not
        hold up the reader's commit for the whole outage. Past the bound, ``BusUnavailable``
        (the next batch commits again). The commit left waiting may still land later, so no
        other is sent before librdkafka reported it: asynchronous commits may land out of
        order, and a late one must not overwrite newer offsets."""
        if not offsets:
            return
        kafka = _kafka()
        client, lock = self._group(group)
        parts = [kafka.TopicPartition(t, q, o) for (t, q), o in sorted(offsets.items())]
        deadline = time.monotonic() + self.timeout_s
        if not lock.acquire(timeout=self.timeout_s):
            raise self._unanswered(group, "another thread's commit holds the group's client")
        try:
            client.consumer.poll(0)  # serve the outcome of a commit given up on, if it came
            if client.commits.waiting:
                raise self._unanswered(group, "an earlier commit is still unanswered")
            client.commits.waiting = True
            try:
                client.consumer.commit(offsets=parts, asynchronous=True)
            except kafka.KafkaException as exc:
                client.commits.waiting = False
                raise self._error(f"cannot commit offsets of group {group!r}", exc) from None
            # librdkafka reports the outcome from poll(), through the consumer's on_commit. A
            # consumer's poll returns at a message or its timeout, not after serving a callback
            # (this one is assigned nothing): short polls, or every commit took a whole poll.
            pause = 0.001
            while client.commits.waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    why = f"no answer within bus.request.timeout.ms ({self.timeout_s:g} s)"
                    raise self._unanswered(group, why)
                client.consumer.poll(min(left, pause))
                pause = min(pause * 2, 0.05)
            failure = client.commits.failure
        finally:
            lock.release()
        if failure is not None:
            exc = kafka.KafkaException(failure)
            raise self._error(f"cannot commit offsets of group {group!r}", exc) from None

    def _unanswered(self, group: str, why: str) -> BusUnavailable:
        return BusUnavailable(
            f"kafka bootstrap.servers={self.bootstrap_servers}: offsets of group {group!r} not "
            f"committed: {why}",
            suggestion="is the Kafka cluster up and reachable?",
        )

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The offsets committed under ``group`` for each partition of ``topic`` (-1: none)."""
        kafka = _kafka()
        client, lock = self._group(group)
        parts = [kafka.TopicPartition(topic, q) for q in range(self.queue_count(topic))]
        with lock:
            try:
                committed = client.consumer.committed(parts, timeout=self.timeout_s)
            except kafka.KafkaException as exc:
                raise self._error(f"cannot read offsets of group {group!r}", exc) from None
        return {tp.partition: tp.offset for tp in committed}


class _Commits:
    """The ``on_commit`` of a group's consumer: whether its one asynchronous commit is still
    unanswered, and how the last one ended (None: committed; else the ``KafkaError`` of the
    request or of its first partition)."""

    def __init__(self) -> None:
        self.waiting = False
        self.failure: Any = None

    def __call__(self, err: Any, partitions: list[Any]) -> None:
        failed = [tp.error for tp in partitions or [] if tp.error is not None]
        self.failure = err if err is not None else (failed[0] if failed else None)
        self.waiting = False


@dataclass(frozen=True)
class _GroupClient:
    """A group's consumer and the outcomes of its commits (`KafkaLog._group`)."""

    consumer: Any
    commits: _Commits


def _fenced(err: Any) -> bool:
    """Whether a Kafka error leaves the transactional producer unusable: a newer producer with
    our transactional.id took over, or another fatal error. librdkafka reports a fencing that
    happened in the background as ``_FATAL`` ("Unable to produce message: Local: Fatal error")
    from the next call, before the error callback names the cause; either way the producer
    must be replaced, and the writer's lease generation decides whether by this writer."""
    kafka_error = _kafka().KafkaError
    codes = {kafka_error._FENCED, kafka_error.INVALID_PRODUCER_EPOCH, kafka_error._FATAL}
    codes.add(getattr(kafka_error, "PRODUCER_FENCED", kafka_error._FENCED))
    return err.code() in codes


def _to_batch(rows: list[Any]) -> pa.RecordBatch:
    """Consumed messages as a STORED_SCHEMA batch plus their real offsets: one pass over the
    messages per column (headers only for the messages that have some)."""
    # (type, ms) per message; a message without a timestamp has type 0 and ms -1
    millis = np.array([m.timestamp()[1] for m in rows], dtype=np.int64)
    pairs = [m.headers() for m in rows]
    headers: pa.Array = pa.nulls(len(rows), pa.string())
    if any(pairs):
        headers = pa.array(
            [
                headers_without_tag(
                    [(k, v.decode("utf-8", "replace") if v is not None else None) for k, v in p]
                )
                if p
                else None
                for p in pairs
            ],
            pa.string(),
        )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in rows], pa.binary()),
            pa.array([m.value() for m in rows], pa.binary()),
            pa.array(millis * 1000, pa.int64(), mask=millis < 0).cast(
                STORED_SCHEMA.field("timestamp").type
            ),
            headers,
            pa.array([m.offset() for m in rows], pa.int64()),
        ],
        names=[*STORED_SCHEMA.names, "offset"],
    )
