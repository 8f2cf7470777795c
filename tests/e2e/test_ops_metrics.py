"""`GET /metrics` during a known run, read with Prometheus' own text parser.

N good records and M garbage ones go through a source into a topic; a sink that tolerates errors
dead-letters the M; a flaky sink retries. The scrape must say exactly that. Then lag: while a sink
is paused, new records raise its lag by their number; resumed, it drains back to 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

N, M = 20, 2


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:
        return 0
    return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def scrape(worker: WorkerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    response = worker.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_of_a_known_run_and_lag(worker: WorkerProcess, scratch: Path) -> None:
    good, garbage = scratch / "good.txt", scratch / "garbage.txt"
    good.write_text("".join(f"line {i}\n" for i in range(N)))
    garbage.write_text("".join(f"not json {i}\n" for i in range(M)))
    as_json = {"value.converter": "JsonConverter", "value.converter.schemas.enable": "false"}
    source = {"connector.class": "FileSourceConnector", "connect.topicname": "metTopic"}
    _create(worker, "metJson", {**source, "filename": str(good), **as_json})
    wait_until(lambda: _count(worker, "metTopic") == N, what="N JSON strings")
    _create(worker, "metGarbage", {**source, "filename": str(garbage)})
    wait_until(lambda: _count(worker, "metTopic") == N + M, what="the garbage")
    _create(
        worker,
        "metSink",
        {
            "connector.class": "FileSinkConnector",
            "filename": str(scratch / "out.txt"),
            "connect.topicnames": "metTopic",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "metTopic-dlq",
            **as_json,
        },
    )
    _create(
        worker,
        "metFlaky",
        {
            "connector.class": "tests.integration.flaky_sinks.FlakySink",
            "path": str(scratch / "flaky.txt"),
            "failures": "1",
            "max.tasks": "1",
            "connect.topicnames": "metTopic",
            "errors.retry.timeout": "30000",
            "errors.retry.delay.max.ms": "10",
            "read.max.rows": "100000",
        },
    )
    wait_until(lambda: _count(worker, "metTopic-dlq") == M, what="M dead letters")
    wait_until(
        lambda: (
            (scratch / "flaky.txt").exists()
            and len((scratch / "flaky.txt").read_text().splitlines()) == N + M
        ),
        what="the flaky sink's copy",
    )

    def settled() -> bool:
        s = scrape(worker)
        return (
            value(s, "sluice_sink_record_read_total", connector="metSink") == N + M
            and value(s, "sluice_sink_record_read_total", connector="metFlaky") == N + M
            and value(s, "sluice_sink_record_lag_max", connector="metSink") == 0
        )

    try:
        wait_until(settled, 60, "the sinks' totals in /metrics")
    except AssertionError:
        pytest.fail(f"/metrics never settled; last scrape:\n{worker.get('/metrics').text}")
    s = scrape(worker)
    assert value(s, "sluice_source_record_poll_total", connector="metJson") == N
    assert value(s, "sluice_source_record_write_total", connector="metJson") == N
    assert value(s, "sluice_source_record_poll_total", connector="metGarbage") == M
    assert value(s, "sluice_sink_record_send_total", connector="metSink") == N
    for name in ("total_record_errors", "total_records_skipped", "total_record_failures"):
        assert value(s, f"sluice_{name}_total", connector="metSink") == M, name
    assert value(s, "sluice_deadletterqueue_produce_requests_total", connector="metSink") == M
    assert value(s, "sluice_deadletterqueue_produce_failures_total", connector="metSink") == 0
    assert value(s, "sluice_total_retries_total", connector="metSink") == 0
    # the flaky sink fails once per task start; it was created after the topic was full and
    # reads it in one micro-batch (one task): K = 1 retry
    assert value(s, "sluice_offset_commit_completion_total", connector="metFlaky") == 1
    assert value(s, "sluice_total_retries_total", connector="metFlaky") == 1
    assert value(s, "sluice_total_record_failures_total", connector="metFlaky") == 1
    assert value(s, "sluice_total_record_errors_total", connector="metFlaky") == 0
    assert value(s, "sluice_connector_state", connector="metSink", state="RUNNING") == 1
    assert value(s, "sluice_connector_task_count", connector="metSink", state="RUNNING") == 1
    assert value(s, "sluice_connector_count", state="RUNNING") >= 4
    assert value(s, "process_resident_memory_bytes") > 0
    assert value(s, "sluice_jvm_heap_bytes", area="used") > 0
    assert value(s, "sluice_spark_query_input_rows", connector="metSink") >= 0
    lags = {k: v for k, v in s.items() if k[0] == "sluice_sink_record_lag"}
    assert len([k for k in lags if ("connector", "metSink") in k[1]]) == 8  # one per queue

    # lag: rises while the sink is paused, back to 0 after resume
    assert worker.request("PUT", "/v1/connectors/metSink/pause").status_code == 202
    with good.open("a") as f:
        f.writelines(f"more {i}\n" for i in range(5))
    wait_until(lambda: _count(worker, "metTopic") == N + M + 5, what="5 more records")
    s = scrape(worker)
    paused = [
        v
        for k, v in s.items()
        if k[0] == "sluice_sink_record_lag" and ("connector", "metSink") in k[1]
    ]
    assert sum(paused) == 5, paused
    assert value(s, "sluice_sink_record_lag_max", connector="metSink") >= 1
    assert value(s, "sluice_connector_state", connector="metSink", state="PAUSED") == 1
    assert worker.request("PUT", "/v1/connectors/metSink/resume").status_code == 202
    wait_until(
        lambda: value(scrape(worker), "sluice_sink_record_lag_max", connector="metSink") == 0,
        60,
        "the lag back to 0",
    )
    s = scrape(worker)
    assert value(s, "sluice_sink_record_read_total", connector="metSink") == N + M + 5
    assert value(s, "sluice_source_record_poll_total", connector="metJson") == N + 5
    for name in ("metJson", "metGarbage", "metSink", "metFlaky"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204
