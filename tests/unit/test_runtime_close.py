"""`Runtime.close` quiets Spark's batch-interrupt loggers before it stops the connectors, and a
JVM that is already gone (the quieting fails) does not keep it from stopping them and Spark."""

from __future__ import annotations

from typing import Any, cast

import pytest
from py4j.protocol import Py4JNetworkError

from sluice.runtime.assembly import Runtime


class _DeadSpark:
    """A session whose JVM has exited: every call into it fails the way py4j fails then."""

    stopped = False

    @property
    def sparkContext(self) -> Any:  # pyspark's name
        raise Py4JNetworkError("Answer from Java side is empty")

    def stop(self) -> None:
        self.stopped = True


class _Herder:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_dead_jvm_does_not_stop_the_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    spark, herder = _DeadSpark(), _Herder()
    runtime = Runtime(
        config=cast(Any, None),
        spark=cast(Any, spark),
        plugins=cast(Any, None),
        herder=cast(Any, herder),
    )
    runtime.close()
    assert herder.closed and spark.stopped
    assert "Spark's batch-interrupt loggers not quieted: Py4JNetworkError" in caplog.text
    assert "Answer from Java side is empty" in caplog.text
