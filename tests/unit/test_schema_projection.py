"""Records decoded with the schema they were written with, projected onto the reader's schema.

Avro messages name their writer schema by id; JSON envelopes carry their schema. A sink reading a
topic whose schema gained, lost or widened fields gets every record in its own (newest) schema:
an added optional field is null in older records, a removed field is dropped, a widened number
keeps its value. Versions that cannot be resolved say so instead of blaming the data.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice.converters import canonical, converter_from_config
from sluice.engine.converters import plan_decoders
from sluice.sdk import FieldType, Schema
from sluice.store.schemas import SqliteSchemaRegistry

I32 = Schema.of(FieldType.INT32, optional=False)
I64 = Schema.of(FieldType.INT64, optional=False)
V1 = Schema.struct(("id", I64), ("qty", I32), ("gone", Schema.string()), optional=False)
# qty widened, `gone` removed, `updated` added (optional), `note` added (optional)
V2 = Schema.struct(
    ("id", I64),
    ("qty", I64),
    ("updated", Schema.timestamp()),
    ("note", Schema.string()),
    optional=False,
)
ROWS_V1 = [{"id": 1, "qty": 5, "gone": "x"}, {"id": 2, "qty": -7, "gone": None}]
ROWS_V2 = [{"id": 3, "qty": 2**40, "updated": None, "note": "new"}]


@pytest.fixture
def registry(tmp_path) -> SqliteSchemaRegistry:
    return SqliteSchemaRegistry(str(tmp_path / "schemas.sqlite"))


def _encoded(name: str, registry, schema: Schema, rows: list, **options: str) -> pa.Array:
    config = {"value.converter": name, **{f"value.converter.{k}": v for k, v in options.items()}}
    encoder = converter_from_config(config, "value", registry).encoder(schema)
    return encoder.arrow(pa.array(rows, schema.to_arrow()))


@pytest.mark.parametrize(
    ("name", "options"), [("AvroConverter", {}), ("JsonConverter", {"schemas.enable": "true"})]
)
def test_old_and_new_records_decode_in_the_newest_schema(name, options, registry) -> None:
    registry.register("orders-value", canonical(V1))
    old = _encoded(name, registry, V1, ROWS_V1, **options)
    registry.register("orders-value", canonical(V2))
    new = _encoded(name, registry, V2, ROWS_V2, **options)
    config = {"value.converter": name, **{f"value.converter.{k}": v for k, v in options.items()}}
    decoder = plan_decoders(config, ["orders"], registry).value
    assert decoder.schema == V2
    both = pa.concat_arrays([old, new])  # one batch holding both versions, as a replay reads
    decoded = decoder.arrow(both)
    assert decoded.errors is None or decoded.errors.null_count == len(both)
    assert decoded.values.to_pylist() == [
        {"id": 1, "qty": 5, "updated": None, "note": None},
        {"id": 2, "qty": -7, "updated": None, "note": None},
        {"id": 3, "qty": 2**40, "updated": None, "note": "new"},
    ]


def test_an_avro_version_the_reader_cannot_resolve_is_named_not_blamed_on_data(registry) -> None:
    # What a registry without compatibility checks let through: a required field, no default.
    registry.register("orders-value", canonical(V1))
    old = _encoded("AvroConverter", registry, V1, ROWS_V1[:1])
    bad = Schema.struct(("id", I64), ("updated", Schema.timestamp(optional=False)), optional=False)
    registry.register("orders-value", canonical(bad))
    decoder = plan_decoders({"value.converter": "AvroConverter"}, ["orders"], registry).value
    reason = decoder.arrow(old).errors.to_pylist()[0]
    first = registry.schema_id(canonical(V1))
    assert reason.startswith(
        f"value was written with schema id {first}, which the sink's schema (id "
    )
    assert "updated" in reason and "not compatible (see schema.compatibility)" in reason


def test_a_fused_sink_plans_the_newest_version_at_each_batch(registry) -> None:
    """What `SinkRunner.codecs` relies on: planning again sees a version registered since."""
    config = {"value.converter": "AvroConverter"}
    registry.register("orders-value", canonical(V1))
    assert plan_decoders(config, ["orders"], registry).value.schema == V1
    registry.register("orders-value", canonical(V2))
    assert plan_decoders(config, ["orders"], registry).value.schema == V2


def test_sinks_see_a_new_version_at_their_next_batch(registry) -> None:
    """A fused sink decodes with it (`SinkRunner.codecs`); a JVM-path sink, whose Spark types
    are fixed, fails with the marker the runtime restarts it for (`check_versions`)."""
    from sluice.connectors.jdbc import JdbcSinkConnector
    from sluice.engine.sink import NEW_VERSION, SinkPlan, SinkRunner, check_versions
    from sluice.runtime.herder.restarts import is_transient

    config = {"value.converter": "AvroConverter"}
    registry.register("orders-value", canonical(V1))
    plan = SinkPlan(
        "s",
        "run",
        JdbcSinkConnector,
        config,
        ({},),
        codecs=plan_decoders(config, ["orders"], registry),
        topics=("orders",),
        registry=registry,
    )
    check_versions(plan)  # nothing new
    assert SinkRunner(plan).codecs().value.schema == V1
    registry.register("orders-value", canonical(V2))
    assert SinkRunner(plan).codecs().value.schema == V2
    with pytest.raises(Exception, match=f"sink s: topic orders value schema {NEW_VERSION}") as e:
        check_versions(plan)
    assert is_transient(str(e.value))


def test_older_flat_avro_versions_decode_vectorised_and_match_fastavro(registry) -> None:
    """A replay after an evolution: version-1 records are decoded column by column with their
    writer schema and projected (not one at a time); nulls, bad bytes and unknown ids in the same
    batch still get the per-record path's values and reasons."""
    registry.register("orders-value", canonical(V1))
    old = _encoded("AvroConverter", registry, V1, ROWS_V1)
    registry.register("orders-value", canonical(V2))
    new = _encoded("AvroConverter", registry, V2, ROWS_V2)
    truncated = old[0].as_py()[:6]
    unknown = b"\x00\x00\x00\x03\xe7" + old[0].as_py()[5:]
    raws = pa.array(
        [*old.to_pylist(), None, truncated, *new.to_pylist(), unknown, old[0].as_py()],
        pa.binary(),
    )
    decoder = plan_decoders({"value.converter": "AvroConverter"}, ["orders"], registry).value
    decoded = decoder.arrow(raws)
    first = registry.schema_id(canonical(V1))
    assert decoder._flat_writers[first] is not None  # the vectorised way was taken
    reasons = decoded.errors.to_pylist()
    assert [reasons[i] for i in (0, 1, 2, 4, 6)] == [None] * 5
    assert reasons[3].startswith(f"value is not valid Avro for schema id {first}")
    assert reasons[5] == "value names Avro schema id 999, which the registry lacks"
    projected = [{"id": 1, "qty": 5, "updated": None, "note": None}]
    assert decoded.values.to_pylist() == [
        *projected,
        {"id": 2, "qty": -7, "updated": None, "note": None},
        None,
        None,
        {"id": 3, "qty": 2**40, "updated": None, "note": "new"},
        None,
        *projected,
    ]
    # the same records through fastavro, one at a time, read the same
    one_by_one = plan_decoders({"value.converter": "AvroConverter"}, ["orders"], registry).value
    values, _ = one_by_one._per_record(raws.to_pylist())
    assert [v for i, v in enumerate(values) if i not in (2, 3, 5)] == [
        r for i, r in enumerate(decoded.values.to_pylist()) if i not in (2, 3, 5)
    ]


def test_promotions_of_older_versions_match_avro(registry) -> None:
    """int64 → float64 rounds as Avro does; bytes → string reads UTF-8, and names a record whose
    bytes are not UTF-8 instead of failing the batch."""
    old = Schema.struct(("n", I64), ("b", Schema.bytes_()), optional=False)
    new = Schema.struct(
        ("n", Schema.of(FieldType.FLOAT64, optional=False)), ("b", Schema.string()), optional=False
    )
    registry.register("t-value", canonical(old))
    rows = [{"n": 2**53 + 1, "b": b"caf\xc3\xa9"}, {"n": -3, "b": None}]
    good = _encoded("AvroConverter", registry, old, rows)
    bad = _encoded("AvroConverter", registry, old, [{"n": 1, "b": b"\xff"}])
    registry.register("t-value", canonical(new))
    decoder = plan_decoders({"value.converter": "AvroConverter"}, ["t"], registry).value
    decoded = decoder.arrow(good)
    assert decoded.errors is None or decoded.errors.null_count == 2
    assert decoded.values.to_pylist() == [{"n": float(2**53), "b": "café"}, {"n": -3.0, "b": None}]
    mixed = decoder.arrow(pa.concat_arrays([good, bad]))
    assert mixed.values.to_pylist()[:2] == decoded.values.to_pylist()
    assert mixed.errors.to_pylist()[:2] == [None, None]
    assert mixed.errors.to_pylist()[2] is not None  # that record only, named by its reason
