"""The guard of tests/unit/conftest.py: a unit test that starts Spark fails, naming the fix."""

from __future__ import annotations

import pytest


def test_building_a_session_fails_the_test() -> None:
    from pyspark.sql import SparkSession

    with pytest.raises(pytest.fail.Exception, match="move this test to tests/integration"):
        SparkSession.builder.master("local[1]").getOrCreate()


def test_building_a_context_fails_the_test() -> None:
    from pyspark import SparkContext

    with pytest.raises(pytest.fail.Exception, match="move this test to tests/integration"):
        SparkContext("local[1]", "unit")
    with pytest.raises(pytest.fail.Exception, match="move this test to tests/integration"):
        SparkContext.getOrCreate()
