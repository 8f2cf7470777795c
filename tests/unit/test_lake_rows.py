"""The lake sinks' pure parts: rows from the sink frame, partition folders, table types, and the
Parquet sink's commit protocol (a replay writes nothing twice; a commit cut short is finished)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.connectors.lake._config import PARQUET_CONFIG, ROW_KEYS, RowSettings
from sluice.connectors.lake._rows import lake_types, to_rows
from sluice.connectors.lake.files import ParquetSinkConnector, ParquetSinkTask, _escape
from sluice.sdk import BatchId, ConfigDef, ConfigException, ConnectException, SinkTaskContext

TS = pa.timestamp("us", tz="UTC")


def _frame(values: list, value_type: pa.DataType | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.record_batch(
        {
            "topic": pa.array(["t"] * n),
            "queue_id": pa.array([3] * n, pa.int32()),
            "queue_offset": pa.array(range(10, 10 + n), pa.int64()),
            "key": pa.array([None] * n, pa.string()),
            "value": pa.array(values, value_type or pa.string()),
            "timestamp": pa.array([1_790_000_000_000_000] * n, TS),
            "headers": pa.array([None] * n, pa.string()),
        }
    )


def _settings(**config: str) -> RowSettings:
    return RowSettings.of(ConfigDef(*ROW_KEYS).parse({"connect.topicnames": "t", **config}))


def test_json_objects_become_columns_and_a_bad_value_is_named() -> None:
    rows = to_rows(_frame(['{"a": 1, "s": "ü"}', None, '{"a": 2, "b": true}']), _settings())
    assert rows.column_names[:3] == ["a", "s", "b"] and rows["a"].to_pylist() == [1, None, 2]
    assert rows["_queue_offset"].to_pylist() == [10, 11, 12]
    with pytest.raises(ConnectException, match=r"queue=3, offset=11.*not JSON"):
        to_rows(_frame(['{"a": 1}', "{oops"]), _settings())
    with pytest.raises(ConnectException, match=r"offset=10.*JSON list, not an object"):
        to_rows(_frame(["[1]"]), _settings())
    raw = to_rows(_frame(["[1]"]), _settings(**{"value.format": "raw"}))
    assert raw["value"].to_pylist() == ["[1]"]


def test_struct_values_and_a_field_named_like_a_metadata_column() -> None:
    struct = pa.struct([("id", pa.int64()), ("_key", pa.string())])
    with pytest.raises(ConnectException, match="'_key', which is also a metadata column"):
        to_rows(_frame([{"id": 1, "_key": "x"}], struct), _settings())
    rows = to_rows(
        _frame([{"id": 1, "_key": "x"}, None], struct), _settings(**{"record.metadata": "false"})
    )
    assert rows.to_pylist() == [{"id": 1, "_key": "x"}, {"id": None, "_key": None}]


def test_partitions_name_their_key() -> None:
    with pytest.raises(ConfigException, match="'nope' is not in record") as info:
        to_rows(_frame(['{"a": 1}']), _settings(**{"partition.fields": "nope"}))
    assert info.value.key == "partition.fields"
    with pytest.raises(ConfigException) as info:
        to_rows(
            _frame(['{"a": 1}']),
            _settings(**{"partition.time.format": "%Y", "partition.time.field": "a"}),
        )
    assert info.value.key == "partition.time.field" and "not a timestamp" in str(info.value)
    timed = to_rows(_frame(['{"a": 1}']), _settings(**{"partition.time.format": "%Y-%m-%d %H"}))
    assert timed["dt"].to_pylist() == ["2026-09-21 14"]
    for bad in ("daily", "%Y/%m"):
        with pytest.raises(ConfigException) as info:
            _settings(**{"partition.time.format": bad})
        assert info.value.key == "partition.time.format"


def test_partition_values_are_escaped_as_spark_escapes_them() -> None:
    assert _escape("日本/東京") == "日本%2F東京"
    assert _escape("a=b:c") == "a%3Db%3Ac"
    assert _escape(None) == "__HIVE_DEFAULT_PARTITION__"


def test_table_types_have_no_null_or_unsigned_columns() -> None:
    table = pa.table({"n": pa.nulls(2), "u": pa.array([1, 2], pa.uint32())})
    assert lake_types(table).schema == pa.schema([("n", pa.string()), ("u", pa.int64())])


def _stage(path: Path, batch: BatchId, task: int, ids: list[int]) -> dict:
    t = ParquetSinkTask()
    t.context = SinkTaskContext(connector_name="c", task_id=task, batch_id=batch)
    t.start({"connect.topicnames": "t", "path": str(path), "partition.fields": "r"})
    values = [json.dumps({"id": i, "r": "ab"[i % 2]}) for i in ids]
    t.put_batch(_frame(values))
    return t.flush(batch)


def _ids(path: Path) -> list[int]:
    return sorted(i for f in path.rglob("*.parquet") for i in pq.read_table(f)["id"].to_pylist())


def test_a_replayed_batch_writes_nothing_twice_and_a_cut_commit_is_finished(
    tmp_path: Path,
) -> None:
    path = tmp_path / "table"
    sink = ParquetSinkConnector()
    config = {"connect.topicnames": "t", "path": str(path)}
    sink.validate(config)
    sink.start(config)
    first = BatchId("run", 0)
    sink.commit(first, [_stage(path, first, 0, [0, 1]), None, _stage(path, first, 2, [2, 3])])
    assert _ids(path) == [0, 1, 2, 3]
    sink.commit(first, [_stage(path, first, 0, [0, 1])])  # Spark replays batch 0
    assert _ids(path) == [0, 1, 2, 3]

    # batch 1's commit dies after its first rename: the state says pending
    second = BatchId("run", 1)
    messages = [_stage(path, second, 0, [4, 5]), _stage(path, second, 1, [6, 7])]
    moves = [(src, str(path / rel)) for m in messages for src, rel in m["moves"]]
    staging = os.path.join(tmp_path, ".table.sluice")
    with open(os.path.join(staging, "state.json"), "w") as f:
        json.dump({"run": "run", "batch": 1, "pending": moves}, f)
    os.makedirs(os.path.dirname(moves[0][1]), exist_ok=True)
    os.replace(*moves[0])
    sink.abort(second, messages)  # Spark's abort must not drop files the state still needs
    # the replay stages the batch again; the commit finishes the recorded moves instead
    sink.commit(second, [_stage(path, second, 0, [4, 5]), _stage(path, second, 1, [6, 7])])
    assert _ids(path) == list(range(8))
    assert sorted(p.name for p in path.iterdir()) == ["r=a", "r=b"]
    assert not [e for e in os.listdir(staging) if e not in ("state.json", "lock")]
    assert PARQUET_CONFIG.parse(config)["format"] == "parquet"
