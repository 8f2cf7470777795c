"""The plugin lists of a real worker: Kafka's `connectorsOnly` and RocketMQ's full list."""

from __future__ import annotations

import pytest

from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def test_connectors_only_unless_asked(worker: WorkerProcess) -> None:
    kinds = lambda query: {p["type"] for p in worker.get(f"/v1/connector-plugins{query}").json()}  # noqa: E731
    assert kinds("") == {"source", "sink"}
    assert kinds("?connectorsOnly=false") == {
        "source",
        "sink",
        "transform",
        "converter",
        "predicate",
    }
    listed = {p["className"]: p["type"] for p in worker.body("/plugin/list")}
    assert listed["sluice.converters._avro.AvroConverter"] == "CONVERTER"
    assert {p["type"] for p in worker.body("/plugin/list/connectors")} == {"SOURCE", "SINK"}


def test_a_bad_connectors_only_value_is_a_400_naming_it(worker: WorkerProcess) -> None:
    response = worker.get("/v1/connector-plugins?connectorsOnly=perhaps")
    assert response.status_code == 400
    assert "connectorsOnly" in response.text
