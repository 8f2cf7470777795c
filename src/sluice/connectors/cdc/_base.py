"""What the CDC source connectors share: the connector side (the common keys, keys into a JDBC
connection, the snapshot-mode refusal, schemas, the task plan), the task side (the plan, the
captured tables and their rows' column checks, the change records, riding out an outage of the
database) and small helpers. Each database's module adds how it reads its log and decodes its
values.

Outages: a lost connection (refused, reset, the server gone away or restarting, a backend
terminated) is retried where it happens — planning on the driver (`latest`: listing the binlogs,
peeking at the slot, chunk progress), reading on an executor (the log from the last whole
transaction delivered, a chunk from its SELECT) — with backoff doubling from 300 ms up to
`errors.retry.delay.max.ms`, for `errors.retry.timeout` ms. Unlike the runtime's default (0, no
retry), a CDC connector's default is -1, forever, as Debezium's `errors.max.retries` is: a
capture that stops at the first blip of its database is not one anybody wants. Meanwhile the task
stays RUNNING and its status shows `retrying`, naming the server (`sluice.engine.retry`). The
position is the log's (binlog file + position, a slot's LSN), so the capture continues where it
stood: nothing is lost or read twice."""

from __future__ import annotations

import json
import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import pyarrow as pa

from sluice.connectors._sql.connection import (
    Connection,
    connection_client_options,
    parse_connection,
)
from sluice.connectors._sql.dialect import Mapped
from sluice.connectors.cdc._config import RETRY_KEYS, TypedKeys, connection_config
from sluice.connectors.cdc._envelope import envelope_schema, key_text, source_block
from sluice.connectors.cdc._snapshot import SnapshotTask, check_mode
from sluice.sdk import (
    ClientOption,
    ConfigDef,
    ConfigException,
    ConnectException,
    ConnectRecord,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    RetriableException,
    Schema,
    SourceConnector,
)
from sluice.sdk.retry import Backoff, LoopReport, retry

PLAN_KEY = "cdc.task.plan"
log = logging.getLogger(__name__)
T = TypeVar("T")
_FIRST_DELAY_S = 0.3


def partition(prefix: str, table: str) -> RecordPartition:
    """A captured table's partition (one per table: its position moves with the log's)."""
    return {"server": prefix, "table": table}


def sql_error(exc: BaseException) -> str:
    """The first line of a database error (the driver's, under SQLAlchemy's wrapper)."""
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


class CdcSourceConnector(SourceConnector):
    """A change-data-capture connector: one task reads the log of the tables `start` described
    (`self.tables`, see `describe_table`); records are Debezium envelopes keyed by the primary
    key as JSON text. A database's connector sets `config_def` and fills in `jdbc_url`, `check`
    and (if it prepares anything on the server) `prepare`.

    `validate` (create time, one connection attempt) connects and runs `check` — the server's
    log settings, the user's rights, the tables and their keys — so a create that cannot run is
    a 400 naming the key that was typed; `start` runs it again, then `prepare`."""

    config_def: ConfigDef

    @abstractmethod
    def jdbc_url(self, values: Mapping[str, Any]) -> str | None:
        """The JDBC URL the `database.*` keys make (None without `database.hostname`); raises
        a `ConfigException` naming a key the database needs beside it."""

    @abstractmethod
    def check(
        self, db: Any, conn: Any, values: Mapping[str, Any], keys: TypedKeys
    ) -> list[dict[str, Any]]:
        """Check the server's log settings and the user's rights, without changing anything,
        and describe the captured tables (`describe_table`); a `ConfigException` naming the key
        (`keys`: the ones typed) for what is wrong."""

    def prepare(self, db: Any, conn: Any, values: Mapping[str, Any]) -> None:
        """Prepare the log for capture (a slot, a publication), at start (driver)."""

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """`connection.url`'s parameters that reach the driver (the worker's client policy
        applies to them as to the JDBC connectors'; the `database.*` keys make a URL without)."""
        values = cls.config_def.parse(config)
        return connection_client_options(connection_config(values, config, cls().jdbc_url(values)))

    def check_values(self, values: Mapping[str, Any]) -> None:
        """Checks of the parsed keys beyond the connection (`validate`)."""
        check_mode(values["snapshot.mode"])

    def _connection(self, config: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        values = self.config_def.parse(config)
        return values, connection_config(values, config, self.jdbc_url(values))

    def validate(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        keys = TypedKeys.of(config)
        values, connection = self._connection(config)
        try:
            settings = parse_connection(connection)
        except ConfigException as exc:
            raise keys.retyped(exc) from None
        self.check_values(values)
        # One connection attempt: validation answers a REST call; `start` retries.
        db = Database(replace(settings, attempts=1))
        try:
            with db.connect(attempts=1) as conn:
                self.check(db, conn, values, keys)
        except ConfigException as exc:
            raise keys.retyped(exc) from None
        except ConnectException as exc:  # the server is unreachable
            raise ConfigException(keys.server, exc.message, suggestion=exc.suggestion) from None

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        super().start(config)
        keys = TypedKeys.of(config)
        self.values, self.connection = self._connection(config)
        db = Database(parse_connection(self.connection))
        try:
            with db.connect() as conn:
                self.tables = self.check(db, conn, self.values, keys)
                self.prepare(db, conn, self.values)
                conn.commit()
        except ConfigException as exc:
            raise keys.retyped(exc) from None

    def key_schema(self) -> Schema:
        return Schema.string()

    def value_schemas(self) -> list[tuple[RecordPartition, Schema]]:
        return [
            (
                partition(self.values["topic.prefix"], t["table"]),
                envelope_schema(t["topic"], [(n, Schema.from_json(s)) for n, s in t["columns"]]),
            )
            for t in self.tables
        ]

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=200_000)

    def task_plan(self) -> dict[str, Any]:
        """What the task needs beyond the connection and the tables."""
        return {}

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        retry = RETRY_KEYS.parse({k: v for k, v in self.config.items() if k in RETRY_KEYS.keys})
        plan = {
            "prefix": self.values["topic.prefix"],
            "snapshot": self.values["snapshot.mode"],
            "retry": {
                "timeout_ms": retry["errors.retry.timeout"],
                "max_delay_ms": retry["errors.retry.delay.max.ms"],
            },
            **self.task_plan(),
            "tables": self.tables,
        }
        return [{**self.connection, PLAN_KEY: json.dumps(plan)}]


class CdcTable:
    """One captured table as a task knows it (from the plan: `describe_table`'s dict)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.name: str = data["table"]
        self.topic: str = data["topic"]
        self.pk: list[str] = data["pk"]
        self.columns = [(n, Schema.from_json(s)) for n, s in data["columns"]]
        self.schemas = dict(self.columns)
        #: the database (MySQL) or schema (PostgreSQL) and the table's own name
        self.space, self.short = self.name.split(".", 1)
        #: the value type of the table's events, and how the JDBC dialect's page reads each
        #: column (None in a plan from before it was recorded: chunks are read row by row)
        self.envelope_type: pa.StructType = envelope_schema(self.topic, self.columns).to_arrow()
        convs = data.get("convs")
        self.mapped = None if convs is None else [Mapped(n, s, *convs[n]) for n, s in self.columns]

    def check_columns(self, names: Collection[str], where: str, *, partial: bool = False) -> None:
        """Fail naming the columns if a logged row's `names` do not fit the connector's schema:
        a column it does not know, or (unless `partial`, a key-only image) a required one
        missing."""
        extra = [n for n in names if n not in self.schemas]
        if extra:
            raise ConnectException(
                f"{where}: table {self.name} now has column(s) {extra} that the connector's "
                "schema does not know (ALTER TABLE … ADD COLUMN while running)",
                suggestion="restart the connector: it reads the table's columns again at start",
            )
        missing = (
            [] if partial else [n for n, s in self.columns if n not in names and not s.optional]
        )
        if missing:
            raise ConnectException(
                f"{where}: table {self.name} has no column(s) {missing} in the log, which the "
                "connector's schema requires (a DROP or RENAME COLUMN)",
                suggestion="restart the connector to register the new schema",
            )


class CdcTask(SnapshotTask, ReplayableSourceTask):
    """The task side of a CDC connector: reads the plan (`start`, then `configure` with the
    database's part of it), owns one partition per table, and builds the change records."""

    connector_name: str  # the `source.connector` value: "mysql", "postgresql"
    table_class: type[CdcTable] = CdcTable

    def start(self, config: Mapping[str, str]) -> None:
        from sluice.connectors._sql.db import Database

        plan = json.loads(config[PLAN_KEY])
        self.prefix: str = plan["prefix"]
        self.snapshot_mode = plan.get("snapshot", "never")
        self.tables = {t["table"]: self.table_class(t) for t in plan["tables"]}
        # One attempt per connection: the task's own loop rides an outage out (`riding_out`),
        # with its backoff and its retry note from the first failure on.
        self.connection: Connection = replace(parse_connection(config), attempts=1)
        self.db = Database(self.connection)
        self._asked: set[str] = set()
        retry = plan.get("retry", {})
        self.retry_timeout_ms: int = retry.get("timeout_ms", -1)
        self.retry_max_delay_ms: int = retry.get("max_delay_ms", 60_000)
        self.configure(plan)

    @abstractmethod
    def configure(self, plan: dict[str, Any]) -> None:
        """Take the database's part of the plan (`CdcSourceConnector.task_plan`)."""

    def partitions(self) -> list[RecordPartition]:
        return [partition(self.prefix, name) for name in self.tables]

    # -- riding out an outage of the database ---------------------------------------------------
    def lost_connection(self, exc: BaseException) -> bool:
        """True if `exc` says the database could not be reached or the connection was lost
        (worth trying again), not that something is wrong with the request."""
        if isinstance(exc, RetriableException):
            return True
        if isinstance(exc, ConnectException):
            return False
        if isinstance(exc, (ConnectionError, TimeoutError, EOFError)):
            return True
        return self.db.is_transient(exc)

    def unreachable(self, exc: BaseException, what: str) -> RetriableException:
        """`exc` (a lost connection) as the error a retry note shows: what failed and where."""
        from sluice.connectors._sql.db import error_text

        if isinstance(exc, RetriableException):
            return exc
        return RetriableException(f"{what}: {self.db.describe()} unreachable: {error_text(exc)}")

    def _backoff(self) -> Backoff:
        return Backoff(_FIRST_DELAY_S, 2.0, max(self.retry_max_delay_ms / 1000, _FIRST_DELAY_S))

    def _timeout_s(self) -> float | None:
        return None if self.retry_timeout_ms < 0 else self.retry_timeout_ms / 1000

    def _give_up(self, what: str) -> Callable[[BaseException, int, float], NoReturn]:
        def give_up(exc: BaseException, retries: int, spent_s: float) -> NoReturn:
            raise ConnectException(
                f"{self.unreachable(exc, what).message} (gave up after {retries} retries in "
                f"{spent_s:.0f} s, errors.retry.timeout={self.retry_timeout_ms})",
                suggestion="check that the database runs and is reachable; raise "
                "errors.retry.timeout (-1: forever) to ride out longer outages",
            ) from None

        return give_up

    def _warn(self, what: str) -> Callable[[BaseException, int, float], None]:
        def warn(exc: BaseException, number: int, wait_s: float) -> None:
            if number == 1 or number % 20 == 0:
                log.warning(
                    "%s (retry %d, next in %.1f s)", self.unreachable(exc, what), number, wait_s
                )

        return warn

    def riding_out(self, work: Callable[[], T], what: str) -> T:
        """`work()`, tried again while the database is unreachable (module docstring)."""

        def attempt() -> T:
            try:
                return work()
            except Exception as exc:
                if self.lost_connection(exc):
                    raise self.unreachable(exc, what) from None
                raise

        return retry(
            attempt,
            backoff=self._backoff(),
            timeout_s=self._timeout_s(),
            give_up=self._give_up(what),
            on_retry=self._warn(what),
        )

    def resuming(
        self,
        open_at: Callable[[Any], Iterable[tuple[Any, list[ConnectRecord]]]],
        start: Any,
        what: str,
    ) -> Iterator[ConnectRecord]:
        """The records of a log range read by `open_at(position)`, which yields each whole
        transaction's records with the position after it: when the connection is lost the
        read opens again at the position after the last transaction delivered (the executor's
        side of riding out an outage)."""
        position, report = start, LoopReport()
        waits, began, retries = self._backoff().waits(), None, 0
        timeout = self._timeout_s()
        try:
            while True:
                try:
                    for after, records in open_at(position):
                        yield from records
                        position = after
                        if began is not None:  # it reads again
                            report.settled()
                            waits, began, retries = self._backoff().waits(), None, 0
                    return
                except Exception as exc:
                    if not self.lost_connection(exc):
                        raise
                    began = time.monotonic() if began is None else began
                    wait, spent = next(waits), time.monotonic() - began
                    if timeout is not None and spent + wait > timeout:
                        self._give_up(what)(exc, retries, spent)
                    retries += 1
                    self._warn(what)(exc, retries, wait)
                    report.retrying(self.unreachable(exc, what), wait)
                    time.sleep(wait)
        finally:
            report.settled()

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        return self.riding_out(
            lambda: SnapshotTask.latest(self, partition, start, limit),
            f"planning the next range of table {partition['table']}",
        )

    def split(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset, parts: int
    ) -> list[RecordOffset]:
        try:
            return SnapshotTask.split(self, partition, start, end, parts)
        except Exception as exc:
            if self.lost_connection(exc):
                return []  # one reader reads the chunk; the read rides the outage out
            raise

    def chunk(
        self, table: Any, query: tuple[str, tuple], end: RecordOffset
    ) -> tuple[pa.StructArray | list[dict], set[str]]:
        return self.riding_out(
            lambda: SnapshotTask.chunk(self, table, query, end),
            f"reading a snapshot chunk of table {table.name}",
        )

    def source(self, table: CdcTable, **known: Any) -> dict[str, Any]:
        """A `source` block of one of `table`'s events (`known`: `ts_ms`, `lsn`, `gtid`, …)."""
        return source_block(self.connector_name, self.prefix, table.space, table.short, **known)

    def change_records(
        self, table: CdcTable, op: str, before: Any, after: Any, at: tuple[dict, datetime, int]
    ) -> Iterator[ConnectRecord]:
        """The records of one row change (`at`: its source block, commit time and the event's
        `ts_ms`). An update that changes the primary key is a delete of the old key and a
        create of the new one, as Debezium emits it."""
        source, ts, now = at

        def record(op: str, b: Any, a: Any) -> ConnectRecord:
            return ConnectRecord(
                value={"before": b, "after": a, "source": source, "op": op, "ts_ms": now},
                key=key_text(a if a is not None else b, table.pk),
                topic=table.topic,
                timestamp=ts,
            )

        if (
            op == "u"
            and before is not None
            and after is not None
            and any(before.get(k) != after.get(k) for k in table.pk)
        ):
            yield record("d", before, None)
            yield record("c", None, after)
        else:
            yield record(op, before, after)
