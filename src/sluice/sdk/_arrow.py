"""The Arrow types of record columns, and the sink frame ↔ `ConnectRecord`s (what
`SinkTask.put_batch` does by default, and back for Arrow-first sinks given records).

The **sink frame** a sink receives: `topic, queue_id, queue_offset, key, value, timestamp,
headers`, where `headers` is JSON object text (null when a record has none): Spark hands nested
types such as maps to Python about a hundred times slower than strings. The source frame a source
emits is the engine's business (`sluice.engine.frames`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from sluice.sdk._record import ConnectRecord

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


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


def batch_from_records(records: list[ConnectRecord]) -> pa.RecordBatch:
    """Records → sink-frame batch: the inverse of `records_from_batch`, for a sink whose
    `put_batch` is the real path and whose `put` is handed records (a test harness)."""
    queue_ids, offsets = [], []
    for r in records:
        queue_ids.append(int(r.partition["queueId"]) if r.partition else None)
        offsets.append(int(r.offset["queueOffset"]) - 1 if r.offset else None)
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array([r.topic for r in records], pa.string()),
            "queue_id": pa.array(queue_ids, pa.int32()),
            "queue_offset": pa.array(offsets, pa.int64()),
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "timestamp": pa.array([r.timestamp for r in records], TIMESTAMP_TYPE),
            "headers": pa.array(
                [json.dumps(r.extensions) if r.extensions else None for r in records], pa.string()
            ),
        }
    )
