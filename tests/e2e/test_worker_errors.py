"""errors.tolerance=all through a real worker: configured over REST, dead letters in their topic,
one log line per skipped record in the worker's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text


def _count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:
        return 0
    return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def test_dead_letters_through_the_rest_api(worker: WorkerProcess, scratch: Path) -> None:
    good, garbage, out = scratch / "good.txt", scratch / "garbage.txt", scratch / "out.txt"
    good.write_text("".join(f"line {i}\n" for i in range(20)))
    garbage.write_text("not json 1\nnot json 2\n")
    json_text = {"value.converter": "JsonConverter", "value.converter.schemas.enable": "false"}
    # JSON strings (and the topic's schema, STRING) from one source, raw garbage from another
    _create(
        worker,
        "errJson",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(good),
            "connect.topicname": "errTopic",
            **json_text,
        },
    )
    wait_until(lambda: _count(worker, "errTopic") == 20, what="20 JSON strings")
    _create(
        worker,
        "errGarbage",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(garbage),
            "connect.topicname": "errTopic",
        },
    )
    wait_until(lambda: _count(worker, "errTopic") == 22, what="the garbage")
    _create(
        worker,
        "errSink",
        {
            "connector.class": "FileSinkConnector",
            "filename": str(out),
            "connect.topicnames": "errTopic",
            "errors.tolerance": "all",
            "errors.log.enable": "true",
            "errors.deadletterqueue.topic.name": "errTopic-dlq",
            **json_text,
        },
    )
    wait_until(
        lambda: (
            _count(worker, "errTopic-dlq") == 2
            and out.exists()
            and len(out.read_text().splitlines()) == 20
        ),
        what="20 lines in the sink file and 2 dead letters",
    )
    assert sorted(out.read_text().splitlines()) == sorted(f"line {i}" for i in range(20))
    assert worker.state("errSink") == "RUNNING"
    wait_until(
        lambda: worker.log.read_text().count("Error encountered in task errSink-") >= 2,
        what="a log line per skipped record",
    )
    log = worker.log.read_text()
    assert "stage 'VALUE_CONVERTER' with class 'JsonConverter'" in log
    assert "sent to errTopic-dlq" in log


def test_a_bad_error_setting_is_a_400_naming_the_key(worker: WorkerProcess, scratch: Path) -> None:
    response = worker.request(
        "POST",
        "/connectors/errBad",
        content=json.dumps(
            {
                "connector.class": "FileSinkConnector",
                "filename": str(scratch / "x.txt"),
                "connect.topicnames": "t",
                "errors.deadletterqueue.topic.name": "t-dlq",
            }
        ),
    )
    assert response.status_code == 400
    assert "errors.deadletterqueue.topic.name" in response.text
    assert "needs errors.tolerance=all" in response.text


def test_a_source_dead_letter_names_the_task_that_read_it(worker: WorkerProcess) -> None:
    """Two source tasks on the JVM path (JSON, a converter that refuses some keys), each range
    cut over two Spark partitions: every dead letter and its log line name the task that read
    the record (0 or 1, as the status shows), not the Spark partition that wrote it (0 to 3)."""
    _create(
        worker,
        "errTasks",
        {
            "connector.class": "tests.integration.bad_sources.BadRecordSource",
            "count": "50",  # per task: task 1 writes ids 50-99
            "tasks": "2",
            "max.tasks": "4",
            "split": "true",
            "connect.topicname": "errTasks",
            "key.converter": "tests.integration.bad_sources.PickyConverter",
            "value.converter": "JsonConverter",
            "errors.tolerance": "all",
            "errors.log.enable": "true",
            "errors.deadletterqueue.topic.name": "errTasks-dlq",
        },
    )
    # per task: 10 records off the schema, 2 keys the converter refuses (multiples of 25)
    wait_until(
        lambda: _count(worker, "errTasks") == 76 and _count(worker, "errTasks-dlq") == 24,
        what="76 records and 24 dead letters",
    )
    status = worker.get("/v1/connectors/errTasks/status").json()
    assert sorted(t["id"] for t in status["tasks"]) == [0, 1], status
    letters = worker.get("/v1/topics/errTasks-dlq/records?limit=100").json()["records"]
    named = {}
    for letter in letters:
        headers = letter["headers"]
        record = int(json.loads(letter["key"]))
        named[record] = (headers["__connect.errors.stage"], headers["__connect.errors.task.id"])
    assert named == {
        i: ("KEY_CONVERTER" if i % 25 == 0 else "TASK_POLL", str(i // 50))
        for i in range(100)
        if i % 25 == 0 or i % 10 in (3, 7)
    }
    log = worker.log.read_text()
    for i in (0, 25, 50, 75):
        line = f"Error encountered in task errTasks-{i // 50}. Executing stage 'KEY_CONVERTER'"
        assert any(line in x and f"key {i} is a multiple of 25" in x for x in log.splitlines())
