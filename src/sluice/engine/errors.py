"""What happens to a record that fails: `errors.tolerance`, `errors.log.*`, the dead-letter queue.

Keys (RocketMQ Connect's names; Kafka Connect's `…context.headers.enable` is an alias)::

    errors.tolerance=none|all                          none: the first bad record fails the task
    errors.log.enable=false                            log every tolerated record (WARNING)
    errors.log.include.messages=false                  …with its key and value
    errors.deadletterqueue.topic.name=                 where tolerated records go (none: dropped)
    errors.deadletterqueue.write.queue.nums=           queues of a new dead-letter topic
    errors.deadletterqueue.read.queue.nums=            accepted; sluice's topics have one count
    errors.deadletterqueue.context.properties.enable=true   add the `__connect.errors.*` headers

What is tolerated: a record whose key or value does not convert — on the sink side a topic record
the converter cannot decode (stage `KEY_CONVERTER` / `VALUE_CONVERTER`), on the source side a record
that does not match the connector's schema or that the converter cannot encode. A sink task's own
exceptions are not: a `RetriableException` is retried (`errors.retry.*`), anything else fails the
task, as in Kafka Connect.

A dead letter keeps the record's key, value, timestamp and headers — a sink's are the topic bytes
as they were read; a source's are the record rendered as JSON text (it never had topic bytes) — plus
the headers `__connect.errors.topic`, `.partition`, `.offset`, `.connector.name`, `.task.id`,
`.stage`, `.class.name`, `.exception.class.name`, `.exception.message` and
`.exception.stacktrace`. Dead letters are written exactly once per micro-batch, in the same commit
as the good records (a sink: its own writer id, committed before the sink's commit; a source: rows
of the same topic write).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.engine.converters import ERROR_COLUMNS
from sluice.sdk import TIMESTAMP_TYPE

log = logging.getLogger("sluice.errors")

#: Kafka Connect's stage names, as `__connect.errors.stage` shows them.
KEY_CONVERTER = "KEY_CONVERTER"
VALUE_CONVERTER = "VALUE_CONVERTER"
TASK_POLL = "TASK_POLL"
TASK_PUT = "TASK_PUT"

#: The sink frame's error context after transforms (see `sluice.engine.pipeline`): a struct of the
#: record's original topic, queue_id, queue_offset, timestamp and headers.
CONTEXT_COLUMN = "error_context"
HEADER = "__connect.errors."

#: The topic writer's frame (what `TopicWriterPlan.write` takes), as dead letters are written.
TOPIC_FRAME_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("headers", pa.string()),
        pa.field("route", pa.int32()),
    ]
)


#: Tolerated records travel as this struct (`ErrorReporter.letters`) until `ErrorReporter.deliver`
#: writes them; source frames of a tolerant source carry them in this column (null on good rows;
#: on a dead letter's row every other column is null): one frame through staging and Spark.
DEAD_LETTER_COLUMN = "dead_letter"
DEAD_LETTER_TYPE = pa.struct(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("headers", pa.string()),
        pa.field("log", pa.string()),
    ]
)
DEAD_LETTER_DDL = "struct<key:binary,value:binary,timestamp:timestamp,headers:string,log:string>"


@dataclass(frozen=True)
class ErrorPolicy:
    """A connector's `errors.*` settings (the retry ones live in `sluice.engine.retry`), made
    from its config by `sluice.engine.settings.error_policy`."""

    tolerate: bool = False
    log: bool = False
    log_messages: bool = False
    dlq_topic: str = ""
    dlq_queues: int | None = None
    context_headers: bool = True


@dataclass
class DeadLetter:
    """One tolerated record: what the dead-letter topic keeps of it, and why it failed."""

    key: bytes | None
    value: bytes | None
    timestamp: datetime | None
    headers: dict[str, str]
    topic: str  # the record's topic (sink: where it was read; source: where it was going)
    partition: str  # sink: the queue id; source: the source partition as JSON
    offset: str  # sink: the queue offset; source: the source offset as JSON
    stage: str
    class_name: str
    exception_class: str
    message: str
    stacktrace: str = ""

    def error_headers(self, connector: str, task_id: int) -> dict[str, str]:
        return {
            f"{HEADER}topic": self.topic,
            f"{HEADER}partition": self.partition,
            f"{HEADER}offset": self.offset,
            f"{HEADER}connector.name": connector,
            f"{HEADER}task.id": str(task_id),
            f"{HEADER}stage": self.stage,
            f"{HEADER}class.name": self.class_name,
            f"{HEADER}exception.class.name": self.exception_class,
            f"{HEADER}exception.message": self.message,
            f"{HEADER}exception.stacktrace": self.stacktrace or self.message,
        }


@dataclass(frozen=True)
class ErrorReporter:
    """Applies an `ErrorPolicy` in a task: logs tolerated records and turns them into dead-letter
    rows (the topic writer's frame). Picklable; one per connector."""

    policy: ErrorPolicy
    connector: str

    def letters(self, letters: Sequence[DeadLetter], task_id: int) -> pa.StructArray:
        """`letters` as a `DEAD_LETTER_TYPE` array: what the dead-letter topic keeps of each
        (the `__connect.errors.*` headers merged in) and its log line."""
        headers = []
        for letter in letters:
            merged = dict(letter.headers)
            if self.policy.context_headers:
                merged.update(letter.error_headers(self.connector, task_id))
            headers.append(json.dumps(merged, sort_keys=True) if merged else None)
        return pa.StructArray.from_arrays(
            [
                pa.array([x.key for x in letters], pa.binary()),
                pa.array([x.value for x in letters], pa.binary()),
                pa.array([x.timestamp or datetime.now(UTC) for x in letters], TIMESTAMP_TYPE),
                pa.array(headers, pa.string()),
                pa.array([self.describe(x, task_id) for x in letters], pa.string()),
            ],
            fields=list(DEAD_LETTER_TYPE),
        )

    def deliver(self, letters: pa.Array, counters: Any = None) -> pa.RecordBatch | None:
        """Where tolerated records end (once per record): log them (`errors.log.enable`), count
        them in `counters` (if given) and return their dead-letter topic rows (None without a
        dead-letter topic)."""
        if not len(letters):
            return None
        if self.policy.log:
            _ensure_log_format()
            for line in letters.field("log").to_pylist():
                log.warning("%s", line)
        self.count(counters, len(letters))
        if not self.policy.dlq_topic:
            return None
        n = len(letters)
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.policy.dlq_topic, pa.string()), n),
                *(letters.field(name) for name in ("key", "value", "timestamp", "headers")),
                pa.nulls(n, pa.int32()),  # no key routing: spread over the queues
            ],
            schema=TOPIC_FRAME_SCHEMA,
        )

    def describe(self, letter: DeadLetter, task_id: int) -> str:
        """The log line of a tolerated record (Kafka Connect's wording, roughly)."""
        text = (
            f"Error encountered in task {self.connector}-{task_id}. Executing stage "
            f"'{letter.stage}' with class '{letter.class_name}', where the record is "
            f"{{topic='{letter.topic}', partition={letter.partition}, offset={letter.offset}}}: "
            f"{letter.message}. The record is skipped (errors.tolerance=all)"
            + (f" and sent to {self.policy.dlq_topic}" if self.policy.dlq_topic else "")
            + "."
        )
        if self.policy.log_messages:
            text += f" key={_show(letter.key)} value={_show(letter.value)}"
        else:  # a converter's message may quote the record (JSON decode errors do): hide it
            text = _hide_record(text, letter.key, letter.value)
        return text

    def count(self, counters: Any, letters: int, retries: int = 0) -> None:
        """Add a task's tolerated records, and its retries as record failures, to the
        connector's error counters (if any). `total-retries` is counted as the retries happen
        (`sluice.engine.retry.RetryNotes`), wherever they are made."""
        if counters is None or not (letters or retries):
            return
        counters.add(
            self.connector,
            {
                "total-record-failures": letters + retries,
                "total-record-errors": letters,
                "total-records-skipped": letters,
                "total-errors-logged": letters if self.policy.log else 0,
                "deadletterqueue-produce-requests": letters if self.policy.dlq_topic else 0,
            },
        )


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HIDDEN = "<record data hidden: errors.log.include.messages=false>"


def _ensure_log_format() -> None:
    """Spark's Python workers (where tolerated records are logged) configure no logging, so a
    bare warning would print without time, level or logger: give them the worker's format."""
    if logging.getLogger().handlers or log.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    log.addHandler(handler)
    log.propagate = False


def _hide_record(text: str, *records: bytes | None) -> str:
    """`text` without the record's key or value text (or the first 200 characters of it, which
    is what the JSON converter quotes)."""
    for data in records:
        if not data:
            continue
        shown = data.decode("utf-8", "replace")
        for part in dict.fromkeys((shown, shown[:200], repr(shown)[1:-1][:200])):
            if len(part) >= 4:
                text = text.replace(part, _HIDDEN)
            else:  # too short to replace everywhere: only where a message ends with it
                text = text.replace(f": {part}. The record", f": {_HIDDEN}. The record")
    return text


def _show(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        return repr(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


# -- sink side -------------------------------------------------------------------------------------
_SIDE = re.compile(r"@-?\d+: (key|value) ")


def split_errors(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """A decoded sink batch as (good records without the error columns, bad records or None)."""
    names = batch.schema.names
    if "error" not in names:
        return batch, None
    keep = [n for n in names if n not in ERROR_COLUMNS and n != CONTEXT_COLUMN]
    error = batch.column("error")
    if error.null_count == len(error):
        return batch.select(keep), None
    bad = pc.is_valid(error)
    return batch.filter(pc.invert(bad)).select(keep), batch.filter(bad)


def sink_dead_letters(bad: pa.RecordBatch, classes: Mapping[str, str]) -> list[DeadLetter]:
    """Dead letters of a sink batch's bad records (rows with `error` set). `classes` maps "key" /
    "value" to the converter that failed on that side."""
    if CONTEXT_COLUMN in bad.schema.names:
        context = bad.column(CONTEXT_COLUMN)
        column = {name: context.field(name) for name in _CONTEXT_FIELDS}
    else:
        column = {name: bad.column(name) for name in _CONTEXT_FIELDS}
    rows = zip(
        bad.column("error").to_pylist(),
        bad.column("raw_key").to_pylist(),
        bad.column("raw_value").to_pylist(),
        *(column[name].to_pylist() for name in _CONTEXT_FIELDS),
        strict=True,
    )
    letters = []
    for error, key, value, topic, queue, offset, timestamp, headers in rows:
        side = _SIDE.search(error)
        stage = VALUE_CONVERTER if side is None or side.group(1) == "value" else KEY_CONVERTER
        letters.append(
            DeadLetter(
                key=key,
                value=value,
                timestamp=timestamp,
                headers=json.loads(headers) if headers else {},
                topic=topic or "",
                partition=str(queue),
                offset=str(offset),
                stage=stage,
                class_name=classes["key" if stage == KEY_CONVERTER else "value"],
                exception_class="sluice.converters.RecordError",
                message=error,
            )
        )
    return letters


_CONTEXT_FIELDS = ("topic", "queue_id", "queue_offset", "timestamp", "headers")


# -- source side -----------------------------------------------------------------------------------
def render(value: Any) -> bytes | None:
    """A source record's key or value as the JSON text a dead letter keeps (it has no bytes)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return json.dumps(value, default=_json_default, ensure_ascii=False).encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)  # datetimes, decimals, times: their ISO / exact text


def record_letter(
    record: Any, topic: str | None, exc: Exception, task_class: str, stage: str = TASK_POLL
) -> DeadLetter:
    """The dead letter of a source record (a `ConnectRecord`) that failed at `stage`."""
    return DeadLetter(
        key=render(record.key),
        value=render(record.value),
        timestamp=record.timestamp,
        headers={str(k): str(v) for k, v in (record.extensions or {}).items()},
        topic=record.topic or topic or "",
        partition=json.dumps(record.partition, sort_keys=True, default=str),
        offset=json.dumps(record.offset, sort_keys=True, default=str),
        stage=stage,
        class_name=task_class,
        exception_class=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=str(exc),
    )


def row_letter(row: Mapping[str, Any], exc: Exception, stage: str, class_name: str) -> DeadLetter:
    """The dead letter of a source-frame row (a dict) the converter could not encode. A frame
    row has no source offset: `partition`/`offset` say "unknown"."""
    headers = row.get("headers") or {}
    if isinstance(headers, list):  # a map column as a list of pairs
        headers = dict(headers)
    return DeadLetter(
        key=render(row.get("key")),
        value=render(row.get("value")),
        timestamp=row.get("timestamp"),
        headers={str(k): str(v) for k, v in headers.items()},
        topic=row.get("topic") or "",
        partition="unknown",
        offset="unknown",
        stage=stage,
        class_name=class_name,
        exception_class=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=str(exc),
    )


def required_nulls(batch: pa.RecordBatch) -> list[tuple[str, pa.Array]]:
    """`(field path, row mask)` for every non-optional field inside the `key` and `value`
    columns that is null in a row where its parent is not: Arrow does not check this, and Spark
    would crash on it (a null in a NOT NULL field). Lists and maps are not looked into."""
    found: list[tuple[str, pa.Array]] = []
    for name in ("key", "value"):
        if name in batch.schema.names:
            _struct_nulls(batch.column(name), name, found)
    return found


def _struct_nulls(array: pa.Array, path: str, found: list[tuple[str, pa.Array]]) -> None:
    if not pa.types.is_struct(array.type) or len(array) == 0:
        return
    present = pc.is_valid(array)
    for field, child in zip(array.type, array.flatten(), strict=True):
        where = f"{path}.{field.name}"
        if not field.nullable and child.null_count:
            found.append((where, pc.and_(present, pc.is_null(child))))
        _struct_nulls(child, where, found)


def _as_read(value: Any) -> bytes | None:
    """A sink record's key or value as the topic held it: text as its UTF-8 bytes (a sink
    record's text is the topic's bytes decoded, never JSON to quote), the rest as `render`."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return render(value)


def task_letter(request: Any, class_name: str) -> DeadLetter:
    """The dead letter of a record a sink task gave up on (a `sluice.sdk.DeadLetterRequest`):
    its queue position, the task's message, and the task's extra headers beside its own."""
    record = request.record
    partition = record.partition or {}
    offset = (record.offset or {}).get("queueOffset")
    return DeadLetter(
        key=_as_read(record.key),
        value=_as_read(record.value),
        timestamp=record.timestamp,
        headers={**(record.extensions or {}), **request.headers},
        topic=record.topic or partition.get("topic") or "",
        partition=str(partition.get("queueId", "unknown")),
        # a record's offset is the position after it; the dead letter names the record itself
        offset=str(offset - 1) if isinstance(offset, int) else "unknown",
        stage=TASK_PUT,
        class_name=class_name,
        exception_class=request.exception_class or "sluice.sdk.ConnectException",
        message=request.message,
    )
