"""The source frame: the Arrow shape of what a source emits, and building it from records.

`topic, key, value, timestamp, headers, partition_hash`: key and value typed by the connector's
schemas; `partition_hash` is a stable hash of the record's source partition, used to keep one
source partition in one queue, in order. (The sink frame and its conversion to records are in
the SDK, `sluice.sdk._arrow`, because `SinkTask.put_batch` uses them.)
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pyarrow as pa

from sluice.sdk import (
    HEADERS_TYPE,
    TIMESTAMP_TYPE,
    ConnectRecord,
    RecordPartition,
    Schema,
    partition_key,
)

RECORD_COLUMNS = ("topic", "key", "value", "timestamp", "headers")


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
    # a range's records share one partition object (the engine sets it): hash each once
    hashes: dict[int, int | None] = {}

    def hashed(partition: RecordPartition | None) -> int | None:
        if partition is None:
            return None
        found = hashes.get(id(partition), -1)
        if found == -1:
            found = hashes[id(partition)] = partition_hash(partition)
        return found

    columns = {
        "topic": [r.topic or r.extensions.get("topic") or default_topic for r in records],
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "timestamp": [r.timestamp for r in records],
        "headers": [list(r.extensions.items()) if r.extensions else None for r in records],
        "partition_hash": [hashed(r.partition) for r in records],
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
