"""The fast path of a JDBC source read: a page of rows as one text block parsed by Arrow.

Each dialect that has one (`Dialect.page`) returns a `Page`; a dialect without one reads every
page through the driver. Used by `JdbcSourceTask._read_pages`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: The text a fast-path page aims at (see `JdbcSourceTask._read_pages`).
PAGE_BYTES = 8 << 20


class Page(ABC):
    """Reads pages of one table (or query) as Arrow, without a Python object per value."""

    #: the text a page aims at, and that of the last page read
    budget = PAGE_BYTES
    page_bytes = 0
    #: the last `fetch` returned None because the page was too large for one value: try fewer rows
    too_big = False
    #: `fetch` reads the page's order out of its `tail`, which must then end with `ORDER BY …`
    #: (a caller that needs no order, such as a CDC chunk, adds one only for such a page)
    needs_order = False

    @abstractmethod
    def fetch(
        self, conn: Any, tail: str, params: list[Any]
    ) -> tuple[pa.StructArray, dict[str, Any]] | None:
        """The page `SELECT … {tail}` (`tail` ends with `ORDER BY … LIMIT n`) as the value
        column and the last row (by column name), or None: read it through the driver."""


def time_micros(micros: pa.Array) -> pa.Array | None:
    """Microseconds of the day → sluice's Time; None if a value is not a time of day (a MySQL
    TIME may be negative or over 24 h: the driver's path then names it)."""
    low, high = pc.min(micros).as_py(), pc.max(micros).as_py()
    if (low is not None and low < 0) or (high is not None and high >= 86_400_000_000):
        return None
    return micros.cast(pa.time64("us"))


def unhex(array: pa.Array, prefix: int = 0) -> pa.Array:
    """Hex text (after `prefix` characters, e.g. PostgreSQL's `\\x`) → bytes."""
    values = array.to_pylist()
    return pa.array([None if v is None else bytes.fromhex(v[prefix:]) for v in values], pa.binary())
