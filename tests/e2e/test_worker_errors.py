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
