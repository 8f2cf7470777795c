"""Benchmark: AvroConverter encode and decode of a flat 8-column record, fastavro per record
against the vectorised (numpy) path, in one process.

The record is the JDBC benchmark's row (`bench/jdbc_copy.py`): id INT64, name STRING, amount
DECIMAL(18,4) optional, qty INT32 optional, price FLOAT64 optional, flag BOOLEAN optional,
created TIMESTAMP optional, note STRING optional. Each timing is the best of `--repeat` runs over
`--rows` rows in one Arrow batch; the script checks that both paths give the same bytes and the
same values. The load average is printed, as the machine is shared.

`--envelope`: the same row as the `after` of a CDC change event (Debezium's envelope: `before`
null, `source` block, `op`, `ts_ms`; `sluice.connectors.cdc._envelope`), the nested shape a CDC
mirror's sink decodes.

Usage: python bench/avro_codec.py [--rows 200000] [--repeat 3] [--envelope]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sluice.converters import Decoded, converter_from_config
from sluice.converters._avro import MAGIC
from sluice.converters._base import string_errors
from sluice.converters._schemas import from_physical, to_physical
from sluice.sdk import FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry

SCHEMA = Schema.struct(
    ("id", Schema.of(FieldType.INT64, optional=False)),
    ("name", Schema.string(optional=False)),
    ("amount", Schema.decimal(18, 4)),
    ("qty", Schema.of(FieldType.INT32)),
    ("price", Schema.of(FieldType.FLOAT64)),
    ("flag", Schema.of(FieldType.BOOLEAN)),
    ("created", Schema.timestamp()),
    ("note", Schema.string()),
)


def rows_table(n: int) -> pa.Array:
    """The same values as the JDBC benchmark's generated table."""
    start = 1_704_067_200_000_000  # 2024-01-01 in µs
    rows = [
        {
            "id": g,
            "name": f"name {g}",
            "amount": Decimal(g) * Decimal("1.5000"),
            "qty": g % 1000,
            "price": g / 7.0,
            "flag": g % 2 == 0,
            "created": start + g * 1_000_000,
            "note": f"note {g:032x}",
        }
        for g in range(1, n + 1)
    ]
    return from_physical(rows, SCHEMA)


def envelopes(after: pa.Array) -> tuple[Schema, pa.Array]:
    """The rows as the `after` of snapshot events of one table (the CDC source's batch)."""
    from sluice.connectors.cdc._envelope import envelope_schema, source_block

    schema = envelope_schema("bench.s.t", [(f.name, f.schema) for f in SCHEMA.fields])
    source = source_block("postgresql", "bench", "s", "t", lsn=123_456)
    rows = [
        {"before": None, "after": a, "source": source, "op": "r", "ts_ms": 1}
        for a in to_physical(after, SCHEMA).to_pylist()
    ]
    return schema, from_physical(rows, schema)


def best(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = work()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--envelope", action="store_true", help="the row in a CDC envelope")
    args = parser.parse_args()
    n = args.rows
    registry = SqliteSchemaRegistry(os.path.join(tempfile.mkdtemp(), "schemas.sqlite"))
    converter = converter_from_config({"value.converter": "AvroConverter"}, "value", registry)
    schema, array = SCHEMA, rows_table(n)
    if args.envelope:
        schema, array = envelopes(array)
    encoder, decoder = converter.encoder(schema), converter.decoder(schema)
    header = MAGIC + encoder.schema_id.to_bytes(4, "big")
    print(f"load average before: {os.getloadavg()}")

    def fastavro_encode() -> pa.Array:
        return encoder._per_record(to_physical(array, schema), header)

    def fastavro_decode() -> Decoded:
        values, reasons = decoder._per_record(topic.to_pylist())
        return Decoded(from_physical(values, schema), string_errors(reasons))

    t_enc_slow, slow = best(args.repeat, fastavro_encode)
    t_enc_fast, topic = best(args.repeat, lambda: encoder.arrow(array))
    assert topic.equals(slow), "the two encodings differ"
    t_dec_slow, slow_values = best(args.repeat, fastavro_decode)
    t_dec_fast, fast_values = best(args.repeat, lambda: decoder.arrow(topic))
    assert fast_values.errors is None and slow_values.errors is None
    assert fast_values.values.equals(slow_values.values), "the two decodings differ"
    assert fast_values.values.equals(array), "the round trip changed values"
    print(f"load average after: {os.getloadavg()}")
    print(f"{n:,} rows, {topic.nbytes / n:.1f} bytes per record (Arrow binary)")
    print("| step | fastavro rows/s | vectorised rows/s | speed-up |")
    print("|---|---:|---:|---:|")
    for step, slow_t, fast_t in (
        ("encode", t_enc_slow, t_enc_fast),
        ("decode", t_dec_slow, t_dec_fast),
    ):
        print(f"| {step} | {n / slow_t:,.0f} | {n / fast_t:,.0f} | {slow_t / fast_t:.1f} |")


if __name__ == "__main__":
    main()
