"""File source ranges and the file sink's idempotent commit, without Spark."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.connectors.file import FileSinkConnector, FileSinkTask, FileSourceTask
from sluice.sdk import BatchId, ConnectException, ReadLimit, SinkTaskContext


def _task(path: Path) -> FileSourceTask:
    task = FileSourceTask()
    task.start({"filename": str(path), "connect.topicname": "t"})
    return task


def _read_all(task: FileSourceTask, limit: ReadLimit) -> tuple[bytes, int]:
    part = task.partitions()[0]
    start, out, batches = None, [], 0
    while True:
        end = task.latest(part, start, limit)
        if end == start:
            return b"".join(out), batches
        for batch in task.read(part, start, end):
            out.extend(v.encode() + b"\n" for v in batch.column("value").to_pylist())
        batches += 1
        start = end


@pytest.mark.parametrize(
    "limit", [ReadLimit(), ReadLimit(max_rows=7), ReadLimit(max_bytes=50), ReadLimit(max_bytes=1)]
)
def test_ranges_cover_the_file_exactly(tmp_path: Path, limit: ReadLimit) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(f"line {i} {'z' * (i % 13)}\n".encode() for i in range(100)) + b"\n")
    data, batches = _read_all(_task(path), limit)
    assert data == path.read_bytes()
    if limit.max_rows == 7:
        assert batches == 15  # 101 lines, 7 per batch


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb\npartial")
    task = _task(path)
    part = task.partitions()[0]
    assert task.latest(part, None, ReadLimit()) == {"position": 4}
    assert task.latest(part, {"position": 4}, ReadLimit()) == {"position": 4}
    path.write_bytes(b"a\nb\npartial done\n")
    assert task.latest(part, {"position": 4}, ReadLimit()) == {"position": 17}


def test_truncated_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"short\n")
    task = _task(path)
    with pytest.raises(ConnectException, match=r"shorter than the committed position 100"):
        task.latest(task.partitions()[0], {"position": 100}, ReadLimit())


def _sink_task(path: Path, batch: BatchId, task_id: int = 0) -> FileSinkTask:
    task = FileSinkTask()
    task.context = SinkTaskContext(task_id=task_id, batch_id=batch)
    task.start({"filename": str(path), "connect.topicnames": "t"})
    return task


def _write(path: Path, batch: BatchId, values: list, task_id: int = 0) -> object:
    task = _sink_task(path, batch, task_id)
    task.put_batch(pa.RecordBatch.from_arrays([pa.array(values, pa.string())], ["value"]))
    return task.flush(batch)


def test_sink_commit_is_idempotent_per_batch_and_run(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    connector = FileSinkConnector()
    connector.start({"filename": str(path), "connect.topicnames": "t"})
    b0 = BatchId("run1", 0)
    connector.commit(b0, [_write(path, b0, ["a", None]), _write(path, b0, ["b"], 1)])
    assert path.read_bytes() == b"a\n\nb\n"  # task order, null as an empty line
    connector.commit(b0, [_write(path, b0, ["a", None])])  # replay of batch 0: ignored
    assert path.read_bytes() == b"a\n\nb\n"
    b1 = BatchId("run1", 1)
    connector.commit(b1, [_write(path, b1, ["c"])])
    fresh = BatchId("run2", 0)  # a reset run starts numbering again and must be written
    connector.commit(fresh, [_write(path, fresh, ["d"])])
    assert path.read_bytes() == b"a\n\nb\nc\nd\n"
    assert not list((tmp_path / ".out.txt.sluice").glob("*.part"))


def test_sink_commit_rolls_back_a_half_done_append(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    connector = FileSinkConnector()
    connector.start({"filename": str(path), "connect.topicnames": "t"})
    b0 = BatchId("r", 0)
    connector.commit(b0, [_write(path, b0, ["one"])])
    b1 = BatchId("r", 1)
    message = _write(path, b1, ["two", "three"])
    # simulate a crash in the middle of batch 1's append: state says pending, half the bytes are in
    import json

    state = tmp_path / ".out.txt.sluice" / "state.json"
    state.write_text(json.dumps({"run": "r", "batch": 1, "length": 4, "pending": True}))
    with open(path, "ab") as f:
        f.write(b"tw")
    connector.commit(b1, [message])  # Spark replays the commit of batch 1
    assert path.read_bytes() == b"one\ntwo\nthree\n"


def _commit_values(path: Path, number: int, values: pa.Array) -> None:
    """One micro-batch of `values` through a file sink task and its connector's commit."""
    connector = FileSinkConnector()
    connector.start({"filename": str(path), "connect.topicnames": "t"})
    batch = BatchId("r", number)
    task = _sink_task(path, batch)
    task.put_batch(pa.RecordBatch.from_arrays([values], ["value"]))
    connector.commit(batch, [task.flush(batch)])


def test_sink_writes_bytes_values_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    _commit_values(path, 0, pa.array([b"\xff\x00", b""], pa.binary()))
    assert path.read_bytes() == b"\xff\x00\n\n"


def test_sink_writes_structs_and_maps_as_json_lines(tmp_path: Path) -> None:
    import datetime
    import decimal
    import json

    path = tmp_path / "out.jsonl"
    when = datetime.datetime(2026, 11, 27, 10, 30, 5, 123000, tzinfo=datetime.UTC)
    struct = pa.array(
        [
            {"line": "alpha", "ts": when, "n": 3, "ok": True, "raw": b"\x00\xff", "d": None},
            None,
        ],
        pa.struct(
            [
                ("line", pa.string()),
                ("ts", pa.timestamp("us", tz="UTC")),
                ("n", pa.int64()),
                ("ok", pa.bool_()),
                ("raw", pa.binary()),
                ("d", pa.decimal128(10, 2)),
            ]
        ),
    )
    _commit_values(path, 0, struct)
    _commit_values(path, 1, pa.array([[("k", 1), ("é", 2)]], pa.map_(pa.string(), pa.int32())))
    _commit_values(path, 2, pa.array([True, False]))
    first, empty, mapped, yes, no = path.read_text("utf-8").split("\n")[:5]
    assert json.loads(first) == {
        "line": "alpha",
        "ts": "2026-11-27T10:30:05.123000+00:00",
        "n": 3,
        "ok": True,
        "raw": "AP8=",
        "d": None,
    }
    assert empty == ""  # a null value: an empty line
    assert mapped == '{"k":1,"é":2}'  # a map is a JSON object, not a list of pairs
    assert (yes, no) == ("true", "false")
    # the record-by-record path (`put`) writes the same text
    from sluice.connectors.file._lines import line_bytes

    assert line_bytes({"ts": when, "d": decimal.Decimal("1.50")}) == (
        b'{"ts":"2026-11-27T10:30:05.123000+00:00","d":"1.50"}\n'
    )
    assert line_bytes(when) == b"2026-11-27T10:30:05.123000+00:00\n"


def test_sink_config_errors_name_the_key(tmp_path: Path) -> None:
    from sluice.sdk import ConfigException

    with pytest.raises(ConfigException, match=r"connect.topicnames: required key is missing"):
        FileSinkConnector().validate({"filename": str(tmp_path / "o")})
    with pytest.raises(ConfigException, match=r"filename: .* is a directory"):
        FileSinkConnector().validate({"filename": str(tmp_path), "connect.topicnames": "t"})


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
            max_size=40,
        )
    ),
    tail=st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=10
    ),
    max_rows=st.one_of(st.none(), st.integers(1, 20)),
    max_bytes=st.one_of(st.none(), st.integers(1, 200)),
    parts=st.integers(1, 4),
)
def test_any_file_reads_back_exactly_under_any_limit(
    tmp_path_factory, lines, tail, max_rows, max_bytes, parts
) -> None:
    path = tmp_path_factory.mktemp("prop") / "in.txt"
    body = "".join(f"{line}\n" for line in lines).encode("utf-8")
    path.write_bytes(body + tail.encode("utf-8"))  # an unfinished last line is never read
    task = _task(path)
    part = task.partitions()[0]
    limit = ReadLimit(max_rows=max_rows, max_bytes=max_bytes)
    start, out = None, []
    for _ in range(len(lines) + 2):
        end = task.latest(part, start, limit)
        if end == start:
            break
        cuts = task.split(part, start, end, parts)
        bounds = [start, *cuts, end]
        pairs = list(itertools.pairwise(bounds))
        assert all(a is None or a["position"] < b["position"] for a, b in pairs)
        for lo, hi in pairs:
            for batch in task.read(part, lo, hi):
                out.extend(v.encode("utf-8") + b"\n" for v in batch.column("value").to_pylist())
        start = end
    assert b"".join(out) == body


def test_offset_storage_reader_sees_committed_positions(tmp_path: Path) -> None:
    from sluice.engine.positions import StoreOffsetReader
    from sluice.sdk import partition_key
    from sluice.store import SqlitePositionStore

    store = SqlitePositionStore(tmp_path / "p.sqlite")
    store.save("c", {partition_key({"filename": "/a"}): {"position": 42}})
    reader = StoreOffsetReader(store, "c")
    assert reader.offset({"filename": "/a"}) == {"position": 42}
    assert reader.offsets([{"filename": "/b"}, {"filename": "/a"}]) == [None, {"position": 42}]
    store.replace("c", {})
    assert StoreOffsetReader(store, "c").offset({"filename": "/a"}) is None
