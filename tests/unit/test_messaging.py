"""The pieces the message-system connectors share (sluice.connectors._messaging)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice.connectors._messaging import Row, patiently, rows_of_records, source_batch
from sluice.sdk import ConnectException, ConnectRecord, RetriableException


def test_source_batch_takes_microseconds_or_datetimes() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    micros = int(when.timestamp() * 1_000_000)
    for stamps in ([micros, None], [when, None]):
        batch = source_batch("t", [b"k", None], [b"v", b"w"], stamps, [[("h", "ü")], None])
        assert batch.column("timestamp").to_pylist() == [when, None]
        assert batch.column("topic").to_pylist() == ["t", "t"]
        assert batch.column("headers").to_pylist() == [[("h", "ü")], None]


def test_rows_name_their_record() -> None:
    record = ConnectRecord(
        value="ü",
        key={"id": 1},
        partition={"queueId": "3"},
        offset={"queueOffset": 18},
        topic="orders",
    )
    (row,) = rows_of_records([record])
    assert row == Row("orders", 3, 17, b'{"id":1}', "ü".encode(), {})
    assert row.where == "{topic='orders', queue=3, offset=17}"
    with pytest.raises(ConnectException, match="record of topic 'x' has no queue position"):
        rows_of_records([ConnectRecord(value=b"v", topic="x")])


def test_patiently_retries_a_retriable_read_and_forgets_after_each_failure() -> None:
    calls, forgotten = [], []

    def fetch() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RetriableException("away")
        return "page"

    assert patiently(fetch, after_failure=lambda: forgotten.append(1)) == "page"
    assert (len(calls), len(forgotten)) == (2, 1)

    def broken() -> str:
        raise ConnectException("bad")

    with pytest.raises(ConnectException, match="bad"):  # not retriable: at once
        patiently(broken, after_failure=lambda: forgotten.append(1))
    assert len(forgotten) == 1
