"""The JVM path's topic writer names, in each dead letter of a record a converter refused, the
source task that read it (`TASK_COLUMN`), and the writer's own guess only where the column is
null (a transform dropped it) or missing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from sluice.engine.errors import ErrorPolicy, ErrorReporter
from sluice.engine.source_errors import TASK_COLUMN, TASK_TYPE, route_dead_letters

REPORTER = ErrorReporter(ErrorPolicy(tolerate=True, dlq_topic="dlq"), "src")


def _frame(tasks: list[int | None] | None) -> pa.RecordBatch:
    """Four refused records (keys 0-3) of a tolerant source frame, with `tasks` if given."""
    n = 4
    columns = {
        "topic": pa.array(["t"] * n),
        "key": pa.nulls(n, pa.binary()),
        "value": pa.nulls(n, pa.binary()),
        "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * n, pa.timestamp("us", "UTC")),
        "headers": pa.nulls(n, pa.string()),
        "route": pa.nulls(n, pa.int32()),
        "error": pa.array([f"refused {i}" for i in range(n)]),
        "error_stage": pa.array(["KEY_CONVERTER"] * n),
        "error_class": pa.array(["Picky"] * n),
        "letter_key": pa.array([str(i).encode() for i in range(n)]),
        "letter_value": pa.array([b"{}"] * n),
    }
    if tasks is not None:
        columns[TASK_COLUMN] = pa.array(tasks, TASK_TYPE)
    return pa.RecordBatch.from_pydict(columns)


def _named(frame: pa.RecordBatch, fallback: int) -> dict[str, str]:
    """The task each dead letter names, by its key."""
    out = list(route_dead_letters(frame, REPORTER, None, fallback))
    assert out[0].num_rows == 0  # no good rows
    rows = [r for batch in out[1:] for r in batch.to_pylist()]
    return {r["key"].decode(): json.loads(r["headers"])["__connect.errors.task.id"] for r in rows}


def test_each_letter_names_the_task_of_its_row_and_the_guess_where_it_is_null() -> None:
    assert _named(_frame([1, 0, None, 1]), fallback=7) == {"0": "1", "1": "0", "2": "7", "3": "1"}


def test_without_the_column_every_letter_names_the_guess() -> None:
    assert _named(_frame(None), fallback=3) == {str(i): "3" for i in range(4)}
