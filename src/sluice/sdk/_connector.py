"""Connectors plan, tasks run.

A connector (`SourceConnector` / `SinkConnector`) lives on the driver: it validates its config and
splits the work into at most `max.tasks` task configs. Each task config becomes one Spark partition
of every micro-batch; the task object is created where that partition runs (an executor), so a task
must open its clients in `start()` — never in `__init__` — and must not rely on in-memory state
surviving between micro-batches: its state is its positions.

Which base class a source task extends states its delivery guarantee:

* `ReplayableSourceTask` — exactly-once. The runtime asks where the data ends now (`latest`, on the
  driver) and then reads exactly the range between two positions (`read`, on an executor). A
  replayed micro-batch reads the same range again, so nothing is lost or duplicated.
* `SourceTask` — poll-only, at-least-once. `poll()` hands over records, which the runtime stages
  durably in the bus before they are processed; `commit()` acknowledges them only after the
  micro-batch that carried them committed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from sluice.sdk._client_options import ClientOption
from sluice.sdk._config import ConfigDef
from sluice.sdk._errors import ConfigException, InvalidConfig
from sluice.sdk._record import ConnectRecord, RecordOffset, RecordPartition
from sluice.sdk._schema import Schema
from sluice.sdk.extras import Requirement

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class ReadLimit:
    """How much one source partition may read in one micro-batch (backpressure).

    `None` means unbounded. A task should stay at or below `max_rows` records and about `max_bytes`
    bytes, but always make progress: one record larger than `max_bytes` is still read.
    """

    max_rows: int | None = None
    max_bytes: int | None = None

    @property
    def unbounded(self) -> bool:
        return self.max_rows is None and self.max_bytes is None


class BatchId(NamedTuple):
    """Identifies one micro-batch of one run of a query.

    `run` changes whenever the query starts from a fresh checkpoint (e.g. after an offsets reset),
    so `(run, number)` never repeats for different data: it is the idempotency key of a commit.
    """

    run: str
    number: int

    def __str__(self) -> str:
        return f"{self.run}/{self.number}"


class OffsetStorageReader(ABC):
    """Reads the positions the runtime last committed for this connector (driver or executor)."""

    @abstractmethod
    def offset(self, partition: RecordPartition) -> RecordOffset | None:
        """The committed offset of `partition`, or None if it has none."""

    def offsets(self, partitions: Iterable[RecordPartition]) -> list[RecordOffset | None]:
        return [self.offset(p) for p in partitions]


class _NoOffsets(OffsetStorageReader):
    def offset(self, partition: RecordPartition) -> RecordOffset | None:
        return None


@dataclass(frozen=True)
class ConnectorContext:
    """What the runtime tells a connector on the driver before it validates or starts (Kafka
    Connect's `ConnectorContext`): the name it runs under, e.g. to name a topic of its own."""

    connector_name: str = ""


@dataclass
class SourceTaskContext:
    """What the runtime tells a source task: its connector, task id and committed positions."""

    connector_name: str = ""
    task_id: int = 0
    offset_storage_reader: OffsetStorageReader = field(default_factory=_NoOffsets)


@dataclass
class SinkTaskContext:
    """What a sink task can ask of the runtime while it runs a micro-batch.

    Requests (`reset_offset`, `pause`, `resume`) are carried back to the driver with the task's
    commit and take effect from the next micro-batch on. Partitions are queue partitions:
    `{"topic": …, "queueId": "3"}`.
    """

    connector_name: str = ""
    task_id: int = 0
    batch_id: BatchId | None = None
    #: Where a push sink (`sluice.push`) reads its live limits and reports its progress (the
    #: worker's push board); empty when the runtime keeps none (a test harness).
    push_board_path: str = ""
    assigned: list[RecordPartition] = field(default_factory=list)
    offset_resets: list[tuple[RecordPartition, RecordOffset]] = field(default_factory=list)
    paused: list[RecordPartition] = field(default_factory=list)
    resumed: list[RecordPartition] = field(default_factory=list)
    #: Records the task gave up on (`dead_letter`), and records it wrote to its own topics
    #: (`produce`); the runtime writes both in the micro-batch's commit.
    dead_letters: list[DeadLetterRequest] = field(default_factory=list)
    produced: list[ProduceRequest] = field(default_factory=list)

    def assignment(self) -> list[RecordPartition]:
        """The queue partitions this task reads in the current micro-batch."""
        return list(self.assigned)

    def reset_offset(self, partition: RecordPartition, offset: RecordOffset) -> None:
        """Re-read `partition` from `offset` (`{"queueOffset": n}`) in the next micro-batch."""
        self.offset_resets.append((dict(partition), dict(offset)))

    def pause(self, *partitions: RecordPartition) -> None:
        """Stop reading these partitions until `resume` (their position is kept)."""
        self.paused.extend(dict(p) for p in partitions)

    def resume(self, *partitions: RecordPartition) -> None:
        """Read these paused partitions again."""
        self.resumed.extend(dict(p) for p in partitions)

    def dead_letter(
        self,
        record: ConnectRecord,
        message: str,
        *,
        exception_class: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Give up on `record` (executor, during `put`/`flush`): the runtime routes it as it routes
        a record that does not convert — to `errors.deadletterqueue.topic.name` with the
        `__connect.errors.*` headers (plus `headers`), logged, counted — when
        `errors.tolerance=all`; with `none` the micro-batch fails naming the record. Written in
        the micro-batch's commit, once."""
        self.dead_letters.append(
            DeadLetterRequest(record, message, exception_class, dict(headers or {}))
        )

    def produce(
        self,
        topic: str,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Write a record to one of the connector's own topics (`SinkConnector.owned_topics`),
        exactly once, in the micro-batch's commit (executor, during `put`/`flush`). A sink parks
        work for later this way (a retry topic), durably before the micro-batch commits."""
        self.produced.append(ProduceRequest(topic, key, value, dict(headers or {})))


@dataclass(frozen=True)
class DeadLetterRequest:
    """A record a sink task gave up on (see `SinkTaskContext.dead_letter`)."""

    record: ConnectRecord
    message: str
    exception_class: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProduceRequest:
    """A record a sink task writes to its own topic (see `SinkTaskContext.produce`)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: dict[str, str] = field(default_factory=dict)


class Delivery(StrEnum):
    """A connector's delivery guarantee (`Connector.delivery`), shown by `/plugin/list` and in
    the connector's status."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


class Connector(ABC):
    """A configured plugin instance: validates its config and plans tasks (driver side).

    Subclasses declare `config_def` (their keys) and `task_class`, and implement `task_configs`.
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    task_class: ClassVar[type]
    #: keys whose change makes the stored positions mean something else (a JDBC source's `mode`):
    #: the runtime refuses to change them in place while positions are stored
    position_keys: ClassVar[tuple[str, ...]] = ()
    #: other names of its keys (e.g. Kafka's `file` for `filename`): the runtime renames them
    #: before the connector sees the config
    key_aliases: ClassVar[dict[str, str]] = {}
    #: client libraries its tasks import that the core install may lack (`sluice.sdk.extras`):
    #: the runtime refuses a create or validation naming the install line when one is missing
    requires: ClassVar[tuple[Requirement, ...]] = ()

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.context = ConnectorContext()

    def initialize(self, context: ConnectorContext) -> None:
        """Called by the runtime before `validate` and `start`, with what it knows of the
        connector (its name)."""
        self.context = context

    @classmethod
    def delivery(cls, config: Mapping[str, str]) -> Delivery:
        """The guarantee this connector gives under `config` (driver; `{}` for the defaults)."""
        raise NotImplementedError

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The options of `config` this connector hands to a client library as typed (Kafka's
        ``source.kafka.<option>`` keys, a URL's parameters), so that the worker's client policy
        applies to them (see `sluice.sdk._client_options`). Driver, at create, update and
        validation, on the config with references resolved, before `validate`; nothing is
        connected. Default: none. A connector that passes options through overrides it, and
        calls `refuse_unsafe` on the same options where it builds its client. A config it
        cannot read yet may raise `ConfigException`; the worker then leaves it to `validate`."""
        return []

    def problems(self, config: Mapping[str, str]) -> list[ConfigException]:
        """Every problem of `config`, one `ConfigException` per bad key (Kafka's `validate`
        returning `ConfigValue`s with their error messages). Driver, at create, before start.

        The default checks `config_def` (types, choices, each key's `check`); override to add
        checks across keys or against the outside world (reachability, a table's columns):
        call `super().problems(config)` and append.
        """
        return self.config_def.problems(config)

    def validate(self, config: Mapping[str, str]) -> None:
        """Raise if `problems` finds any: their `ConfigException`, or `InvalidConfig` carrying
        all of them. What the runtime calls; override `problems` instead."""
        found = self.problems(config)
        if len(found) == 1:
            raise found[0]
        if found:
            raise InvalidConfig(found)

    def start(self, config: Mapping[str, str]) -> None:
        """Called once on the driver with the validated config, before `task_configs`."""
        self.config = dict(config)

    @abstractmethod
    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """Split the work into at most `max_tasks` task configs (driver, at start)."""

    def stop(self) -> None:
        """Called once on the driver when the connector stops. Optional."""


def count_problem(offset: RecordOffset, keys: Iterable[str]) -> str | None:
    """Why `offset` lacks one of `keys` as a count (an integer ≥ 0), None when it has them all."""
    for key in keys:
        value = offset.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{key!r} must be an integer ≥ 0, got {value!r}"
    return None


class SourceConnector(Connector):
    """A connector that brings records into topics. Its delivery follows from its task's base
    class: exactly-once for a `ReplayableSourceTask`, at-least-once for a `SourceTask`."""

    #: The offset keys that hold a count (an integer ≥ 0) in every offset of this source, e.g.
    #: `("position",)`: an offset set by hand (`PATCH /v1/connectors/{name}/offsets`) must have
    #: them, so a typo is a 400 rather than a task failing at its next read.
    offset_counts: ClassVar[tuple[str, ...]] = ()

    def offset_problem(self, partition: RecordPartition, offset: RecordOffset) -> str | None:
        """Why the tasks could not resume `partition` from an offset set by hand, None when they
        can. Default: `offset_counts` checked; override for other shapes. Driver, no `start`."""
        return count_problem(offset, self.offset_counts)

    @classmethod
    def delivery(cls, config: Mapping[str, str]) -> Delivery:
        if issubclass(cls.task_class, ReplayableSourceTask):
            return Delivery.EXACTLY_ONCE
        return Delivery.AT_LEAST_ONCE

    def key_schema(self) -> Schema:
        """The schema of record keys (after `start`). Default: optional STRING."""
        return Schema.string()

    def value_schema(self) -> Schema:
        """The schema of record values (after `start`). Default: optional STRING."""
        return Schema.string()

    def value_schemas(self) -> list[tuple[RecordPartition, Schema]]:
        """Each partition's value schema, for a connector whose partitions differ in shape (the
        tables of a database, each written to its own topic). Driver, once, after `start`.

        When it lists any, it replaces `value_schema()`: every partition the tasks own must be
        listed, and the records of one topic must share one schema. Only replayable sources
        (`ReplayableSourceTask`) may differ in shape. Default: none; every record has
        `value_schema()`.
        """
        return []

    def default_read_limit(self) -> ReadLimit:
        """The per-partition read limit of one micro-batch when the config sets none."""
        return ReadLimit(max_rows=1_000_000)


class SinkConnector(Connector):
    """A connector that delivers records from topics to an external system.

    At-least-once unless it says otherwise: a sink whose `commit` (or target) makes a replayed
    micro-batch a no-op sets `guarantee` (the file sink with `StagedAppend`, the broker sinks
    with ids derived from positions); one whose guarantee depends on its config overrides
    `delivery` (a JDBC sink is exactly-once only in upsert mode).
    """

    #: the guarantee under every config; `delivery` returns it unless overridden
    guarantee: ClassVar[Delivery] = Delivery.AT_LEAST_ONCE

    @classmethod
    def delivery(cls, config: Mapping[str, str]) -> Delivery:
        return cls.guarantee

    #: True when `commit` applies the tasks' results in task order (as the file sink does): the
    #: runtime may then split one queue's range over several tasks without reordering it.
    ordered_commit: ClassVar[bool] = False

    def micro_batch_interval_ms(self) -> int | None:
        """How often the runtime starts this connector's micro-batches, in ms (driver, once,
        after `start`). A sink whose `commit` publishes what it wrote (a lake table's files,
        version or snapshot) gets a roll interval this way: each commit then carries what
        arrived in that time. Default None: the worker's interval
        (`offsetCommitIntervalMsConfig`)."""
        return None

    def owned_topics(self) -> list[str]:
        """Topics this connector writes itself (`SinkTaskContext.produce`) and reads back beside
        `connect.topicnames` — e.g. a retry topic (driver, after `start`). The runtime creates
        them. Default: none."""
        return []

    def delayed_topics(self) -> dict[str, str]:
        """Which of `owned_topics` are delay queues, each with the record header that holds a
        record's due time (unix seconds, as text): the runtime reads a queue of one only up to
        its first record not yet due, so a record read back is always due (driver, after
        `start`). Default: none."""
        return {}

    def commit(self, batch_id: BatchId, messages: list[Any]) -> None:
        """Make a micro-batch's writes visible (driver, once all its tasks returned from `flush`).

        `messages` are the tasks' `flush` results in task order. Spark may call this again with the
        same `batch_id` after a crash: an exactly-once sink makes the second call a no-op.
        """

    def abort(self, batch_id: BatchId, messages: list[Any]) -> None:
        """Discard a failed micro-batch's writes (driver). `messages` may contain None."""


class ReplayableSourceTask(ABC):
    """A source whose data can be read again between two positions: exactly-once.

    The contract, for each partition the task owns:

    * `latest(partition, start, limit)` runs on the **driver** once per micro-batch and returns the
      offset *after* the last record the batch should include (at most `limit` past `start`), or
      `start` itself when there is nothing new.
    * `read(partition, start, end)` runs on an **executor** and yields exactly the records after
      `start` up to and including the record whose offset is `end`. `start=None` means "from the
      very beginning". It must be deterministic: the same range always yields the same records.
    """

    context: SourceTaskContext

    def start(self, config: Mapping[str, str]) -> None:
        """Called with the task config wherever the task runs (driver and executors)."""

    @abstractmethod
    def partitions(self) -> list[RecordPartition]:
        """The partitions (files, tables, queues) this task owns. Driver, every micro-batch."""

    @abstractmethod
    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        """The end offset of the next range to read (driver, once per micro-batch)."""

    @abstractmethod
    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterable[ConnectRecord] | Iterable[pa.RecordBatch]:
        """Yield the records in `(start, end]` (executor).

        Either `ConnectRecord`s, or — for speed — `pyarrow.RecordBatch`es with a `value` column
        (and optionally `key`, `timestamp`, `headers`, `topic`) typed as the connector's schemas.
        """

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        """Optional (driver): up to `parts - 1` ascending offsets strictly inside `(start, end)`.

        When `max.tasks` allows more Spark partitions than there are ranges to read, the runtime
        reads the sub-ranges in parallel; their records still reach the topic in order, because
        sub-ranges are committed in order and share the partition's queue. Default: no cuts.
        """
        return []

    def commit(self, positions: list[tuple[RecordPartition, RecordOffset]]) -> None:
        """Optional (driver): the micro-batch that ended at these positions (this task's
        partitions) has committed and the positions are stored.

        A source whose external system retains data until told (a replication slot, a consumer
        group) releases it here, never earlier: a replay may still re-read any range that starts
        at or after the last committed positions. `context.offset_storage_reader` reads the
        positions stored now (those of every partition of the connector). Spark reports a
        micro-batch committed when it plans the next one, so the last batch's data is released
        when more arrives. Default: nothing.
        """

    def watch_paths(self) -> list[str]:
        """Optional (driver): files whose change means this task may have new data (a file
        source's input). While a micro-batch finds nothing new, the runtime waits on them (see
        `sluice.sdk.wakeup`) and asks `latest` again at the first write, instead of at the next
        trigger: a trickled record starts its micro-batch at once. Default: none (asked once
        per trigger interval)."""
        return []

    #: what `lag` counts: "bytes" (a file, a change log) or "records" (rows, stream entries)
    lag_unit: ClassVar[str] = "records"

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Optional (driver, on a task instance of its own): how far `position` (the last
        committed one; None = nothing read yet) is behind the end of `partition`, in `lag_unit`.

        Called by the worker's `/metrics` in the background, at most once per
        `metrics.source.lag.interval.ms` per connector, never per scrape, so one cheap query is
        fine; it may run while the connector is paused or stopped. None (the default) when the
        system cannot tell.
        """
        return None

    def stop(self) -> None:
        """Release what `start` opened. Optional."""


class SourceTask(ABC):
    """A source that can only be polled (webhooks, pop-style queues): at-least-once.

    `poll()` runs on the driver between micro-batches, and also while a micro-batch has run or
    waited for a core for over 10 s (a few polls ahead, so that `poll` raising
    `RetriableException` in an outage shows in the task's status); what it returns is staged
    durably before processing. `poll`, `commit` and `stop` are never called at the same time.
    `commit(records)` runs after the micro-batch that carried those records committed;
    acknowledge them to the external system there. After a crash, records polled but not committed
    may be polled again (the external system redelivers them).
    """

    context: SourceTaskContext

    def start(self, config: Mapping[str, str]) -> None:
        """Called once with the task config before the first poll."""

    @abstractmethod
    def poll(self) -> list[ConnectRecord] | pa.RecordBatch:
        """Return the records available now (possibly none). Must not block for long.

        Either `ConnectRecord`s, or — for speed — one `pyarrow.RecordBatch` with a `value` column
        (and optionally `key`, `timestamp`, `headers`, `topic`) typed as the connector's schemas,
        all from one source partition (the task's); other columns (what `commit` needs to
        acknowledge) are not staged.
        """

    def commit(self, records: list[ConnectRecord] | pa.RecordBatch) -> None:
        """Acknowledge records whose micro-batch has committed (what `poll` returned). Optional."""

    def stop(self) -> None:
        """Release what `start` opened. Optional."""


class SinkTask(ABC):
    """Delivers the records of its share of each micro-batch (runs on an executor).

    Per micro-batch: `put_batch` (default: convert to records and call `put`) once or more, then
    `flush(batch_id)`, whose return value reaches `SinkConnector.commit` on the driver. A replayed
    micro-batch is delivered again with the same `batch_id`: make writes idempotent per batch for
    exactly-once, or accept at-least-once.
    """

    context: SinkTaskContext

    def start(self, config: Mapping[str, str]) -> None:
        """Called with the task config before the first `put` of a micro-batch."""

    @abstractmethod
    def put(self, records: list[ConnectRecord]) -> None:
        """Deliver (or buffer) these records, in order."""

    def put_batch(self, batch: pa.RecordBatch) -> None:
        """Arrow fast path: columns `topic, queue_id, queue_offset, key, value, timestamp, headers`
        (`headers` as JSON object text, null when a record has none).

        Override to avoid building one Python object per record.
        """
        from sluice.sdk._arrow import records_from_batch

        self.put(records_from_batch(batch))

    def flush(self, batch_id: BatchId) -> Any:
        """Finish this task's share of the micro-batch; return a picklable commit message."""
        return None

    def stop(self) -> None:
        """Release what `start` opened. Optional."""
