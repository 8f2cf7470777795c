"""`GET /metrics` during a known run, read with Prometheus' own text parser; then the run's
dead-letter topic read through `GET /v1/topics/{name}/records` and `sluice topics peek`.

N good records and M garbage ones go through a source into a topic; a sink that tolerates errors
dead-letters the M; a flaky sink retries once (K=1). The scrape must say exactly that. Then lag:
while a sink is paused, new records raise its lag by their number; resumed, it drains back to 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.sdk import partition_key
from tests.conftest import wait_until, whole_lines
from tests.e2e.worker_process import REPO, WorkerProcess

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


@dataclass
class Run:
    worker: WorkerProcess
    good: Path


@pytest.fixture(scope="module")
def run(worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The known run, shared by this module's tests (one set of queries to start)."""
    scratch = tmp_path_factory.mktemp("metrics")
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
            # the query listener's progress event comes after the commit
            and ("sluice_spark_query_input_rows", (("connector", "metSink"),)) in s
        )

    try:
        wait_until(settled, 60, "the sinks' totals in /metrics")
        yield Run(worker, good)
    finally:
        for name in ("metJson", "metGarbage", "metSink", "metFlaky"):
            worker.request("DELETE", f"/v1/connectors/{name}")


def test_metrics_of_a_known_run_and_lag(run: Run) -> None:
    worker, good = run.worker, run.good
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
    assert value(s, "sluice_spark_query_input_rows", connector="metSink") > 0
    assert value(s, "sluice_put_batch_max_time_ms", connector="metSink") > 0
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

    # source lag: the file's bytes after the committed position, 0 once all is read; while the
    # source is paused, exactly the bytes appended (probed in the background every second)
    wait_until(lambda: source_lag(worker, "metJson", good) == 0, 60, "the file read to its end")
    assert worker.request("PUT", "/v1/connectors/metJson/pause").status_code == 202
    late = b"late 0\nlate 1\n"
    with good.open("ab") as f:
        f.write(late)
    wait_until(lambda: source_lag(worker, "metJson", good) == len(late), 60, "the lag of a pause")
    assert worker.request("PUT", "/v1/connectors/metJson/resume").status_code == 202
    wait_until(lambda: source_lag(worker, "metJson", good) == 0, 60, "the lag back to 0")

    # the lag is probed in the background, the totals come with the next snapshot: either may
    # show the batch first (seen in CI), so wait for the total, then check it is exact
    def counted() -> bool:
        s = scrape(worker)
        return value(s, "sluice_source_record_poll_total", connector="metJson") >= N + 5 + 2

    wait_until(counted, 60, "the late lines counted")
    s = scrape(worker)
    assert value(s, "sluice_source_record_poll_total", connector="metJson") == N + 5 + 2
    assert not [k for k in s if k[0] == "sluice_source_lag_records"]  # files count bytes


def source_lag(worker: WorkerProcess, connector: str, path: Path) -> float | None:
    """The `sluice_source_lag_bytes` of `connector`'s file (None: not probed yet)."""
    partition = partition_key({"filename": str(path)})
    return scrape(worker).get(
        ("sluice_source_lag_bytes", (("connector", connector), ("partition", partition)))
    )


def test_dead_letters_read_through_rest_and_cli_then_the_topic_deleted(run: Run) -> None:
    worker = run.worker
    body = worker.get("/v1/topics/metTopic-dlq/records?limit=10").json()
    assert len(body["records"]) == M
    for record in body["records"]:
        assert record["value"].startswith("not json"), record
        headers = record["headers"]
        assert headers["__connect.errors.topic"] == "metTopic"
        assert headers["__connect.errors.connector.name"] == "metSink"
        assert headers["__connect.errors.stage"] == "VALUE_CONVERTER"
        assert "JsonConverter" in headers["__connect.errors.class.name"]
        assert record["position"]["offset"] == {"queueOffset": record["offset"]}
        assert record["position"]["partition"]["topic"] == "metTopic-dlq"
        assert record["timestamp"]
    # metTopic decoded with its writer's converter: once metGarbage (StringConverter) is gone,
    # metJson's JSON strings; the garbage it cannot decode is shown as it is
    assert worker.request("DELETE", "/v1/connectors/metGarbage").status_code == 204
    every = worker.get("/v1/topics/metTopic/records?limit=1000").json()
    assert every["converter"] == "StringConverter / JsonConverter", every["converter"]
    values = [r["value"] for r in every["records"]]
    assert "line 0" in values and '"line 0"' not in values and "not json 0" in values, values
    assert len(values) == _count(worker, "metTopic")
    queue0 = worker.get("/v1/topics/metTopic/records?queue=0&offset=0&limit=1000").json()
    # a queue the topic does not have: 404 naming the key and the queues it has (schemathesis
    # found the 400 it was: a schema-valid request refused)
    missing = worker.get("/v1/topics/metTopic/records?queue=3030")
    assert missing.status_code == 404, missing.text
    assert "queue: topic 'metTopic' has queues 0..7, not 3030" in missing.json()["message"]
    assert {r["queue"] for r in queue0["records"]} <= {0}
    assert queue0["next"] == {"0": len(queue0["records"])}
    for query, key in (("limit=0", "limit"), ("offset=-1", "offset")):
        r = worker.get(f"/v1/topics/metTopic/records?{query}")
        assert r.status_code == 400 and key in r.json()["message"].split(":")[1], r.text
    assert worker.get("/v1/topics/noSuchTopic/records").status_code == 404
    # a name no topic can have is a missing topic too, not a 500 (found by schemathesis)
    assert worker.get("/v1/topics/%C3%80%C2%AE/records").status_code == 404
    assert worker.request("DELETE", "/v1/topics/%C2%A1u%C3%B4").status_code == 404

    cli = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "--url", worker.url, "topics", "peek",
         "metTopic-dlq", "--limit", "5"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "__connect.errors.stage: VALUE_CONVERTER" in cli.stdout, cli.stdout
    assert cli.stdout.count("value: not json") == M

    # a topic in use cannot be deleted; unused, it goes
    r = worker.request("DELETE", "/v1/topics/metTopic-dlq")
    assert r.status_code == 409 and "metSink" in r.json()["message"], r.text
    assert worker.request("DELETE", "/v1/connectors/metSink").status_code == 204
    assert worker.request("DELETE", "/v1/topics/metTopic-dlq").status_code == 204
    assert worker.get("/v1/topics/metTopic-dlq").status_code == 404
    assert worker.request("DELETE", "/v1/topics/metTopic-dlq").status_code == 404


def test_a_deleted_topic_takes_the_positions_on_it_along(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    """Positions outlive a connector, so a sink deleted before its topic kept those on it. They
    go with the topic: the sink re-created on a topic re-created under that name gets the new
    topic's first records (it skipped as many as it had read of the old one before)."""
    src = tmp_path / "in.txt"
    src.write_text("a\nb\nc\n")
    source = {"connector.class": "FileSourceConnector", "filename": str(src)}
    source["connect.topicname"] = "delTopic"
    sink = {"connector.class": "FileSinkConnector", "connect.topicnames": "delTopic"}
    _create(worker, "delSource", source)
    _create(worker, "delSink", {**sink, "filename": str(tmp_path / "out1.txt")})
    wait_until(lambda: _lines(tmp_path / "out1.txt") == ["a", "b", "c"], what="the first copy")
    for name in ("delSource", "delSink"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204
    assert worker.request("DELETE", "/v1/topics/delTopic").status_code == 204
    with src.open("a") as f:
        f.write("d\ne\n")
    _create(worker, "delSource", source)  # resumes after c: d, e are the new topic's first records
    _create(worker, "delSink", {**sink, "filename": str(tmp_path / "out2.txt")})
    wait_until(lambda: _lines(tmp_path / "out2.txt") == ["d", "e"], 60, "the re-created topic")
    for name in ("delSource", "delSink"):
        worker.request("DELETE", f"/v1/connectors/{name}")


def _lines(path: Path) -> list[str]:
    return whole_lines(path)
