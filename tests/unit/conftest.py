"""Unit tests run without Spark: pure logic, a few seconds for the whole folder.

A test that needs a SparkSession belongs in tests/integration. This guard keeps it that way: the
`spark` and `runner` fixtures fail here, and so does any attempt to build a session or a context
(`SparkSession.builder.getOrCreate`, `SparkContext(...)`), even when an earlier test folder of the
same pytest run has already started one (then the builder would quietly reuse it).
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

MOVE = "unit tests must not start Spark: move this test to tests/integration"


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    pytest.fail(MOVE, pytrace=False)


@pytest.fixture
def spark() -> NoReturn:
    _refuse()


@pytest.fixture
def runner() -> NoReturn:
    _refuse()


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", _refuse)
    monkeypatch.setattr(SparkContext, "__init__", _refuse)
    monkeypatch.setattr(SparkContext, "getOrCreate", classmethod(_refuse))
