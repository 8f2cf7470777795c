"""Producing Arrow rows with confluent-kafka, shared by the Kafka bus (`sluice.bus.kafka`) and the
Kafka connectors (`sluice.connectors.kafka`).

librdkafka batches messages itself; what costs in Python is the call per message. `produce_rows`
keeps it to one C call per message and no Python object beyond the key, value and headers
librdkafka copies: `Producer.produce` is driven by `map` with positional arguments (topic, value,
key, partition, on_delivery, callback, timestamp, headers), in runs for which the producer's
local queue has room. `Producer.produce_batch` would be cheaper, but it takes neither
timestamps nor headers (confluent-kafka 2.x).

confluent-kafka is imported by the caller (it is an optional dependency of sluice's users, not
of this module).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "PER_BATCH_PRODUCER",
    "RUN",
    "arrow_headers",
    "arrow_millis",
    "next_consume_wait",
    "produce_rows",
]

#: Records per `produce` run (the local queue is given room for one run first).
RUN = 5_000

#: librdkafka options of a transactional producer made for one micro-batch (the bus's parts, the
#: Kafka sink's tasks), below the user's. With sparse connections librdkafka drops the bootstrap
#: connection once it learns the brokers and connects to the transaction coordinator only when
#: a timer asks: `init_transactions` took 54 ms, and 500 ms in a third of the tries, on every
#: micro-batch. Connecting to every broker at once it takes 2-4 ms (bench/README.md,
#: `bus_pipeline.py`); the price is a connection to each broker of the cluster per producer.
PER_BATCH_PRODUCER = {"enable.sparse.connections": False}


#: The shortest and longest timeout of a `Consumer.consume` that reads a range of offsets.
CONSUME_WAIT_S = (0.005, 0.2)


def next_consume_wait(waited: float | None, got: bool) -> float:
    """The timeout of the next `Consumer.consume` of a range (``waited``: the last one's, None
    for the first; ``got``: whether it returned messages). ``consume`` returns when it has as
    many messages as asked or its timeout passed, and a range that ends with a transaction
    marker (offsets without a message) never has them: one long timeout made every such read
    wait it out. Short while messages come, doubling while none do."""
    if got or waited is None:
        return CONSUME_WAIT_S[0]
    return min(waited * 2, CONSUME_WAIT_S[1])


def arrow_millis(timestamps: pa.Array | pa.ChunkedArray) -> list[int]:
    """A timestamp column as Kafka timestamps (ms since the epoch; 0 where null: librdkafka then
    stamps the record with the time it is produced)."""
    return pc.divide(timestamps.cast(pa.int64()), 1000).fill_null(0).to_pylist()


def arrow_headers(text: pa.Array | pa.ChunkedArray) -> list[Any] | None:
    """A column of JSON-object texts as Kafka headers (``[(name, bytes)]`` per row, None where
    null), or None when every row is null (the common case: no per-row work)."""
    if text.null_count == len(text):
        return None
    return [
        None
        if t is None
        else [(k, None if v is None else str(v).encode()) for k, v in json.loads(t).items()]
        for t in text.to_pylist()
    ]


def produce_rows(
    producer: Any,
    topic: str,
    partition: int,
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    millis: Sequence[int] | None = None,
    headers: Sequence[Any] | None = None,
    queue_limit: int = 100_000,
) -> None:
    """Queue the records (``values[i]``, ``keys[i]``, ``millis[i]``, ``headers[i]``; a None
    column means none for every record) for ``topic``/``partition`` in order, keeping at most
    ``queue_limit`` messages in the producer's local queue (set its
    ``queue.buffering.max.messages`` at least that high). Delivery errors reach the producer's
    ``on_delivery``; a full queue is waited out (librdkafka's `BufferError` never escapes)."""
    n = len(values)
    produce, repeat = producer.produce, itertools.repeat
    run = max(1, min(RUN, queue_limit // 2))
    start = 0
    while start < n:
        stop = min(start + run, n)
        while len(producer) > queue_limit - run:
            producer.poll(0.01)  # the local queue is full: let deliveries drain it
        stamps = iter(repeat(0, stop - start) if millis is None else millis[start:stop])
        try:
            for _ in map(
                produce,
                repeat(topic),
                values[start:stop],
                repeat(None) if keys is None else keys[start:stop],
                repeat(partition),
                repeat(None),
                repeat(None),
                stamps,
                repeat(None) if headers is None else headers[start:stop],
            ):
                pass
        except BufferError:
            # every iterator gave up the record that did not fit: go on from it
            start = stop - stamps.__length_hint__() - 1
            producer.poll(0.05)
            continue
        start = stop
    producer.poll(0)
