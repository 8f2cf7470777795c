"""Reading a topic's records for people without its writer's converters (a CDC topic, named by
its table): Avro decoded with the registry (each record with the schema version it was written
with), Kafka Connect's JSON with its schema envelope decoded, text shown as text, and base64 only
for bytes nothing decodes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from sluice.bus.base import STORED_SCHEMA
from sluice.bus.embedded import EmbeddedLog
from sluice.connectors.cdc._envelope import envelope_schema, source_block
from sluice.converters import converter_from_config
from sluice.converters._schemas import canonical
from sluice.runtime.topic_records import read_records
from sluice.sdk import FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry

TOPIC = "shop.public.orders"


def _columns(extra: bool) -> list[tuple[str, Schema]]:
    columns = [
        ("id", Schema.of(FieldType.INT32, optional=False)),
        ("price", Schema.decimal(10, 2)),
        ("at", Schema.timestamp()),
        ("blob", Schema.of(FieldType.BYTES)),
    ]
    return [*columns, ("qty", Schema.of(FieldType.INT32))] if extra else columns


def _encoded(converter: str, schema: Schema, values: list, registry: object) -> list[bytes]:
    conv = converter_from_config({"value.converter": converter}, "value", registry)
    registry.register(f"{TOPIC}-value", canonical(schema))  # as a source does at start
    return conv.encoder(schema).arrow(pa.array(values, schema.to_arrow())).to_pylist()


def test_records_are_decoded_by_what_their_bytes_are(tmp_path: Path) -> None:
    registry = SqliteSchemaRegistry(str(tmp_path / "schemas.sqlite"))
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    source = source_block("postgresql", "shop", "shop", "orders", schema="public", lsn=7)
    row = {"id": 1, "price": Decimal("9.99"), "at": at, "blob": b"\xff\x00"}
    old = envelope_schema(TOPIC, _columns(False))
    new = envelope_schema(TOPIC, _columns(True))
    events = [
        ("avro", old, {"before": None, "after": row, "source": source, "op": "c", "ts_ms": 1}),
        (
            "avro",
            new,
            {"before": row | {"qty": None}, "after": None, "source": source, "op": "d", "ts_ms": 2},
        ),
    ]
    values = [_encoded("AvroConverter", s, [v], registry)[0] for _, s, v in events]
    values += _encoded("JsonConverter", old, [events[0][2]], registry)
    values += [b"plain text", b"\x00\x00\x00\x99\x99 not avro", b"\xff\xfe"]
    log = EmbeddedLog(tmp_path / "bus")
    try:
        log.create_topic(TOPIC, queues=1)
        n = len(values)
        log.append(
            TOPIC,
            0,
            pa.record_batch(
                [
                    pa.array([b'{"id":1}'] * n, pa.binary()),
                    pa.array(values, pa.binary()),
                    pa.array([at] * n, STORED_SCHEMA.field("timestamp").type),
                    pa.array([None] * n, pa.string()),
                ],
                schema=STORED_SCHEMA,
            ),
        )
        shown = read_records(
            log, TOPIC, queue=0, offset=0, limit=20, writer_config=None, registry=registry
        )
    finally:
        log.close()
    records = shown["records"]
    assert [r["key"] for r in records] == ['{"id":1}'] * n  # text keys as text
    created, deleted, in_json, text, fake, binary = (r["value"] for r in records)
    assert created["op"] == "c" and created["before"] is None
    assert created["after"] == {
        "id": 1,
        "price": "9.99",
        "at": at.isoformat(),
        "blob": "base64:/wA=",
    }
    assert created["source"]["lsn"] == 7 and created["source"]["table"] == "orders"
    # the second record was written with the second version: its `qty` is there
    assert deleted["op"] == "d" and deleted["before"]["qty"] is None and deleted["after"] is None
    assert in_json["op"] == "c" and in_json["after"]["id"] == 1
    assert in_json["after"]["blob"] == "base64:/wA="  # bytes decoded, not the JSON's base64
    assert text == "plain text"
    assert fake.startswith("base64:") and binary == "base64://4="
    assert json.dumps(shown)  # all of it JSON-able
