"""The Arrow shape of records, and conversions between it and `ConnectRecord`s.

Two frames cross the Python/JVM boundary:

* the **source frame** a source emits: `topic, key, value, timestamp, headers, partition_hash`
  (key and value typed by the connector's schemas; `partition_hash` is a stable hash of the
  record's source partition, used to keep one source partition in one queue, in order);
* the **sink frame** a sink receives: `topic, queue_id, queue_offset, key, value, timestamp,
  headers`, where `headers` is JSON object text (null when a record has none): Spark hands nested
  types such as maps to Python about a hundred times slower than strings.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow as pa

from sluice.sdk._record import ConnectRecord, RecordPartition, partition_key
from sluice.sdk._schema import Schema

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def partition_hash(partition: RecordPartition | None) -> int | None:
    """A stable non-negative 31-bit hash of a source partition (same in every process)."""
    if partition is None:
        return None
    return zlib.crc32(partition_key(partition).encode()) & 0x7FFFFFFF


def source_frame_schema(key_schema: Schema, value_schema: Schema) -> pa.Schema:
    """The Arrow schema of what a source emits."""
    return pa.schema(
        [
            pa.field("topic", pa.string()),
            pa.field("key", key_schema.to_arrow()),
            pa.field("value", value_schema.to_arrow()),
            pa.field("timestamp", TIMESTAMP_TYPE),
            pa.field("headers", HEADERS_TYPE),
            pa.field("partition_hash", pa.int32()),
        ]
    )


def source_frame_ddl(key_schema: Schema, value_schema: Schema) -> str:
    """The Spark DDL of `source_frame_schema`."""
    return (
        f"topic string, key {key_schema.to_spark_ddl()}, value {value_schema.to_spark_ddl()}, "
        "timestamp timestamp, headers map<string,string>, partition_hash int"
    )


def records_to_batch(
    records: Sequence[ConnectRecord], frame: pa.Schema, default_topic: str | None
) -> pa.RecordBatch:
    """Build a source-frame batch from records (the per-record API's slow path)."""
    columns = {
        "topic": [r.topic or r.extensions.get("topic") or default_topic for r in records],
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "timestamp": [r.timestamp for r in records],
        "headers": [list(r.extensions.items()) if r.extensions else None for r in records],
        "partition_hash": [partition_hash(r.partition) for r in records],
    }
    arrays = []
    for f in frame:
        try:
            arrays.append(pa.array(columns[f.name], type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            bad = _first_bad(columns[f.name], f.type)
            raise ValueError(
                f"record {bad} of the batch: field {f.name!r} does not match type {f.type}: {exc}"
            ) from exc
    return pa.RecordBatch.from_arrays(arrays, schema=frame)


def _first_bad(values: list, type_: pa.DataType) -> int:
    for i, v in enumerate(values):
        try:
            pa.array([v], type=type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return i
    return -1


def _headers(raw: object) -> dict[str, str]:
    if not raw:
        return {}
    if isinstance(raw, str):
        return {str(k): str(v) for k, v in json.loads(raw).items()}
    return dict(raw)  # a map column as a list of pairs


def records_from_batch(batch: pa.RecordBatch) -> list[ConnectRecord]:
    """Sink-frame batch → records (topic queue position as partition/offset)."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    n = batch.num_rows
    out = []
    for i in range(n):
        topic = cols["topic"][i] if "topic" in cols else None
        headers = cols["headers"][i] if "headers" in cols else None
        ts = cols["timestamp"][i] if "timestamp" in cols else None
        if isinstance(ts, datetime) and ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        partition = None
        offset = None
        if "queue_id" in cols:
            partition = {"topic": topic, "queueId": str(cols["queue_id"][i])}
            offset = {"queueOffset": cols["queue_offset"][i] + 1}
        out.append(
            ConnectRecord(
                value=cols["value"][i] if "value" in cols else None,
                key=cols["key"][i] if "key" in cols else None,
                partition=partition,
                offset=offset,
                timestamp=ts,
                extensions=_headers(headers),
                topic=topic,
            )
        )
    return out
