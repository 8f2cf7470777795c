"""Fused pipelines: records stay in Python/Arrow, Spark carries only commit receipts.

When nothing between a source and the topic (or the topic and a sink) needs the JVM — no transforms,
converters that are trivial on Arrow — the reading task hands its batches straight to the consumer
(the topic writer, or the sink task) and outputs one *receipt* row. The receipt committer, a Spark
stream writer, passes the receipts of a micro-batch, in partition order, to the consumer's `commit`
with Spark's batch id. Spark still owns offsets, checkpoints, retries and commit order, so the
delivery guarantees are those of the unfused query; what is saved is two JVM↔Python crossings per
record (measured in bench/README.md).
"""

from __future__ import annotations

import itertools
import json
import pickle
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from sluice.engine.converters import SinkCodecs, SourceCodecs, decode_batch, encode_batch

RECEIPT_DDL = "partition int, receipt binary"
_RECEIPT_SCHEMA = pa.schema([pa.field("partition", pa.int32()), pa.field("receipt", pa.binary())])
_INT31 = 0x7FFFFFFF


class BatchConsumer(Protocol):
    """Consumes a task's record batches on an executor, commits them on the driver. Picklable."""

    def write(self, batches: Iterator[pa.RecordBatch], partition_id: int) -> Any: ...

    def commit(self, receipts: list[Any], batch_id: int) -> None: ...

    def abort(self, receipts: list[Any], batch_id: int) -> None: ...


def receipt_row(partition_id: int, receipt: Any) -> pa.RecordBatch:
    """The one row a fused task outputs."""
    return pa.RecordBatch.from_arrays(
        [pa.array([partition_id], pa.int32()), pa.array([pickle.dumps(receipt)], pa.binary())],
        schema=_RECEIPT_SCHEMA,
    )


@dataclass
class _Receipts(WriterCommitMessage):
    rows: list[tuple[int, Any]]


def receipt_committer(name: str, consumer: BatchConsumer) -> type[DataSource]:
    """A DataSource class whose stream writer commits receipts through `consumer`."""
    return type(
        f"SluiceCommitter_{abs(hash(name))}",
        (_CommitterSource,),
        {"consumer": consumer, "format": name, "__module__": __name__},
    )


class _CommitterSource(DataSource):
    consumer: BatchConsumer
    format: str

    @classmethod
    def name(cls) -> str:
        return cls.format

    def streamWriter(self, schema: Any, overwrite: bool) -> _Committer:
        return _Committer(self.consumer)


class _Committer(DataSourceStreamArrowWriter):
    def __init__(self, consumer: BatchConsumer) -> None:
        self.consumer = consumer

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Receipts:
        rows = []
        for batch in iterator:
            for pid, blob in zip(
                batch.column("partition").to_pylist(),
                batch.column("receipt").to_pylist(),
                strict=True,
            ):
                rows.append((pid, pickle.loads(blob)))
        return _Receipts(rows)

    def _ordered(self, messages: list[WriterCommitMessage | None]) -> list[Any]:
        rows = [row for m in messages if isinstance(m, _Receipts) for row in m.rows]
        return [receipt for _, receipt in sorted(rows, key=lambda row: row[0])]

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.consumer.commit(self._ordered(messages), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.consumer.abort(self._ordered(messages), batchId)


# -- source frame → topic frame, in Arrow ----------------------------------------------------------
def _headers_json(headers: pa.Array) -> pa.Array:
    if headers.null_count == len(headers):
        return pa.nulls(len(headers), pa.string())
    return pa.array(
        [None if h is None else json.dumps(dict(h), sort_keys=True) for h in headers.to_pylist()],
        pa.string(),
    )


def route(key: pa.Array, partition_hash: pa.Array) -> pa.Array:
    """Same routing as the JVM path: crc32 of the key bytes, else the source partition's hash.
    The checksums are taken by `map` over the keys, without a Python step per key."""
    if key.null_count == len(key):
        return partition_hash
    present = key.drop_null() if key.null_count else key
    crcs = np.fromiter(map(zlib.crc32, present.to_pylist()), np.int64, len(present))
    keyed = pa.array((crcs & _INT31).astype(np.int32))
    if not key.null_count:
        return keyed
    return pc.replace_with_mask(partition_hash.cast(pa.int32()), key.is_valid(), keyed)


def to_topic_frame(batch: pa.RecordBatch, codecs: SourceCodecs) -> pa.RecordBatch:
    """A source-frame batch as the topic writer expects it (what the JVM plan would produce)."""
    encoded = encode_batch(batch.select(["topic", "key", "value"]), codecs)
    return topic_frame_of(batch, encoded.column("key"), encoded.column("value"))


def topic_frame_of(
    batch: pa.RecordBatch, key_bytes: pa.Array, value_bytes: pa.Array
) -> pa.RecordBatch:
    """The topic frame of a source-frame batch whose key and value are already encoded."""
    return pa.RecordBatch.from_arrays(
        [
            batch.column("topic"),
            key_bytes,
            value_bytes,
            batch.column("timestamp"),
            _headers_json(batch.column("headers")),
            route(key_bytes, batch.column("partition_hash")),
        ],
        names=["topic", "key", "value", "timestamp", "headers", "route"],
    )


def from_topic_frames(batch: pa.RecordBatch, codecs: SinkCodecs) -> Iterator[pa.RecordBatch]:
    """A topic-reader batch with key and value decoded (the sink frame), plus the error columns
    when a converter can fail (see `sluice.engine.converters.decode_batch`). Topics whose schemas
    differ are decoded apart: one batch per run of records of one topic, in order."""
    if not codecs.mixed or not batch.num_rows:
        yield decode_batch(batch, codecs)
        return
    topics = batch.column("topic")
    codes = np.asarray(pc.dictionary_encode(topics).indices)
    bounds = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist(), batch.num_rows]
    for lo, hi in itertools.pairwise(bounds):
        yield decode_batch(batch.slice(lo, hi - lo), codecs.of(topics[lo].as_py()))
