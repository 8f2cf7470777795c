"""Create-time validation and REST manners on the shared worker: every bad key in the error body
(`code`, `key`, `suggestion`, `errors`) on both faces, unknown keys warned with "did you mean",
Kafka's names accepted, offsets partitions matched or refused, Kafka Connect's `/v1` behaviours
(`GET /`, repeated `expand`, `restart?onlyFailed=`, unknown routes and malformed JSON in the /v1
error shape), RocketMQ Connect's `GET /connectors/{name}/delete`, and the tolerated-record log
lines (time, level, logger; the task id the status shows; no record data unless asked)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _source(tmp: Path, topic: str, text: str = "a\nb\n", **extra: str) -> dict[str, str]:
    src = tmp / f"{_uid()}-in.txt"
    src.write_text(text)
    return {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": topic,
        **extra,
    }


def _log(worker: WorkerProcess) -> str:
    return worker.log.read_text(errors="replace")


def test_every_bad_key_reaches_both_faces(worker: WorkerProcess, scratch: Path) -> None:
    config = _source(
        scratch,
        "manners",
        **{"pipeline.fused": "flase", "key.converter": "NoSuchConverter", "tasks.max": "x"},
    )
    v1 = worker.request("POST", "/v1/connectors", json={"name": "bad1", "config": config})
    assert v1.status_code == 400, v1.text
    body = v1.json()
    assert body["error_code"] == 400
    # each error names the key as typed (`tasks.max`, Kafka's name of max.tasks)
    assert [e["key"] for e in body["errors"]] == ["tasks.max", "pipeline.fused", "key.converter"]
    assert body["key"] == "tasks.max" and body["code"] == "connect.config"
    assert "pipeline.fused: expected a boolean (true/false), got 'flase'" in body["message"]
    rocket = worker.request("POST", "/connectors/bad1", content=json.dumps(config))
    assert rocket.status_code == 400
    assert rocket.json()["errorCode"] == 400
    assert rocket.json()["errors"] == body["errors"]
    # nothing was stored: an unknown converter is a 400 at create, not a FAILED connector later
    assert worker.get("/v1/connectors/bad1").status_code == 404
    conflict = {**_source(scratch, "manners"), "tasks.max": "2", "max.tasks": "3"}
    clash = worker.request("POST", "/v1/connectors", json={"name": "bad2", "config": conflict})
    assert clash.status_code == 400
    assert clash.json()["suggestion"] == "set only max.tasks"

    # plugins validate (REST) counts every error and shows the warnings per key
    result = worker.request(
        "PUT",
        "/v1/connector-plugins/FileSourceConnector/config/validate",
        json={**config, "filname": "x"},
    ).json()
    assert result["error_count"] == 3 and result["warning_count"] == 1
    by_key = {c["value"]["name"]: c["value"] for c in result["configs"]}
    assert by_key["filname"]["warnings"] == [
        "filname: unknown key: no part of this connector reads it (did you mean filename?)"
    ]
    # /plugin/config lists the connector-level keys beside the connector's own
    keys = {k["name"] for k in worker.body("/plugin/config?plugin=FileSinkConnector")}
    assert {"filename", "pipeline.fused", "value.converter", "consume.from.where"} <= keys


def test_unknown_keys_are_created_with_a_warning(worker: WorkerProcess, scratch: Path) -> None:
    name = f"warned-{_uid()}"
    config = _source(
        scratch,
        f"t-{name}",
        **{
            "transforms": "d",
            "transforms.d.type": "RegexRouter",
            "transforms.d.regex": "(.*)",
            "transforms.d.replacement": "$1",
            "transforms.d.replacment": "x",
            "tasks.max": "1",
        },
    )
    created = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
    assert created.status_code == 201, created.text
    [warning] = created.json()["warnings"]
    assert warning == {
        "code": "connect.config.unknown",
        "key": "transforms.d.replacment",
        "message": "unknown key: no part of this connector reads it",
        "suggestion": "did you mean transforms.d.replacement?",
    }
    stored = worker.get(f"/v1/connectors/{name}/config").json()
    assert stored["tasks.max"] == "1" and "max.tasks" not in stored  # shown as posted
    wait_until(
        lambda: f"connector {name}: transforms.d.replacment: unknown key" in _log(worker),
        30,
        "the warning in the worker's log",
    )
    again = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert again.json()["warnings"] == [warning]  # the RocketMQ face carries it too
    # RocketMQ Connect's README lists GET /connectors/{name}/delete
    assert worker.body(f"/connectors/{name}/delete") == f"Connector [{name}] deleted successfully"
    assert worker.get(f"/v1/connectors/{name}").status_code == 404
    missing = worker.get(f"/connectors/{name}/delete")
    assert missing.status_code == 404 and missing.json()["errorCode"] == 404


def test_v1_routes_behave_like_kafka_connect(worker: WorkerProcess, scratch: Path) -> None:
    root = worker.get("/").json()
    assert root["version"] and root["worker_id"] == "e2e-worker"
    for method, path in (("GET", "/v1/nope"), ("GET", "/v1/connectors/x/nope")):
        unknown = worker.request(method, path)
        assert unknown.status_code == 404
        assert unknown.json()["error_code"] == 404
        assert unknown.json()["message"] == f"no route {method} {path}"
    not_allowed = worker.request("DELETE", "/v1/topics")
    assert not_allowed.status_code == 405 and not_allowed.json()["error_code"] == 405
    assert "GET" in not_allowed.headers["allow"]
    assert worker.get("/nope").json()["errorCode"] == 404
    for headers in ({}, {"content-type": "application/json"}):
        malformed = worker.request(
            "POST", "/v1/connectors", content='{"name": "x",\n "config": {,}}', headers=headers
        ).json()
        assert malformed["error_code"] == 400
        assert "malformed JSON at line 2 column 13 (char 26)" in malformed["message"], malformed

    # Kafka's quickstart file connectors by their class names and keys
    uid = _uid()
    topic, dst = f"kafka-names-{uid}", scratch / f"{uid}-out.txt"
    source = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": _source(scratch, topic, "one\ntwo\n")["filename"],
        "topic": topic,
        "tasks.max": "1",
    }
    sink = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "file": str(dst),
        "topics": topic,
    }
    names = (f"ksrc-{uid}", f"ksink-{uid}")
    for name, config in zip(names, (source, sink), strict=True):
        created = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
        assert created.status_code == 201, created.text
        assert "warnings" not in created.json()
    wait_until(lambda: dst.exists() and dst.read_text() == "one\ntwo\n", 120, "the sink file")
    # shown as posted (Kafka's `file`, `topic`, `topics`, `tasks.max`), though run under sluice's
    # names: on both faces, and a PUT of what GET showed changes nothing
    for name, config in zip(names, (source, sink), strict=True):
        shown = worker.get(f"/v1/connectors/{name}/config").json()
        assert {k: v for k, v in shown.items() if k != "name"} == config
        assert worker.get(f"/v1/connectors/{name}").json()["config"] == shown
        assert worker.get(f"/connectors/{name}/config").json()["body"]["config"] == shown
        again = worker.request("PUT", f"/v1/connectors/{name}/config", json=shown)
        assert again.status_code == 200 and again.json()["config"] == shown

    # ?expand=status&expand=info
    both = worker.get("/v1/connectors?expand=status&expand=info").json()
    assert set(both[names[0]]) == {"status", "info"}
    assert both[names[0]]["status"]["connector"]["state"] == "RUNNING"

    # restart?onlyFailed=true leaves a RUNNING connector alone; a plain restart restarts it
    def starts() -> int:
        return _log(worker).count(f"connector {names[0]} started (")

    before = starts()
    only_failed = worker.request(
        "POST", f"/v1/connectors/{names[0]}/restart?onlyFailed=true&includeTasks=true"
    )
    assert only_failed.status_code == 202
    assert only_failed.json()["connector"]["state"] == "RUNNING"
    assert starts() == before
    assert worker.request("POST", f"/v1/connectors/{names[0]}/restart").status_code == 202
    assert starts() == before + 1

    # PATCH offsets: a partition whose values differ only in type is matched to the stored one
    assert worker.request("PUT", f"/v1/connectors/{names[1]}/stop").status_code == 202
    stored = worker.get(f"/v1/connectors/{names[1]}/offsets").json()["offsets"]
    assert stored, "the sink has committed positions"
    entry = stored[0]
    retyped: dict[str, Any] = {  # "4" -> 4, 4 -> "4"
        k: int(v) if isinstance(v, str) and v.isdigit() else str(v) if isinstance(v, int) else v
        for k, v in entry["partition"].items()
    }
    assert retyped != entry["partition"], "a partition with a value of another type"
    patched = worker.request(
        "PATCH",
        f"/v1/connectors/{names[1]}/offsets",
        json={"offsets": [{"partition": retyped, "offset": {"queueOffset": 0}}]},
    )
    assert patched.status_code == 200, patched.text
    after = worker.get(f"/v1/connectors/{names[1]}/offsets").json()["offsets"]
    assert {"partition": entry["partition"], "offset": {"queueOffset": 0}} in after
    assert len(after) == len(stored)  # changed in place, nothing added
    stranger = worker.request(
        "PATCH",
        f"/v1/connectors/{names[1]}/offsets",
        json={"offsets": [{"partition": {"topic": "elsewhere", "queueId": 99}, "offset": None}]},
    )
    assert stranger.status_code == 400
    assert stranger.json()["key"] == "offsets[0].partition"
    assert "is none of the connector's partitions" in stranger.json()["message"]
    negative = worker.request(
        "PATCH",
        f"/v1/connectors/{names[1]}/offsets",
        json={"offsets": [{"partition": entry["partition"], "offset": {"queueOffset": -1}}]},
    )
    assert negative.status_code == 400, negative.text
    assert negative.json()["key"] == "offsets[0].offset"
    assert negative.json()["message"] == (
        "offsets[0].offset: 'queueOffset' must be an integer ≥ 0, got -1"
    )
    for name in names:
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_position_keys_cannot_change_in_place(worker: WorkerProcess, scratch: Path) -> None:
    plugin_dir = worker.plugin_dir
    assert plugin_dir is not None
    (plugin_dir / "positioned_file.py").write_text(
        "from sluice.connectors.file import FileSourceConnector\n\n\n"
        "class PositionedFile(FileSourceConnector):\n"
        '    """A file source whose positions depend on its topic (as a JDBC source\'s on its'
        ' mode)."""\n\n'
        '    position_keys = ("connect.topicname",)\n'
    )
    worker.body("/plugin/reload")
    name = f"positioned-{_uid()}"
    config = {**_source(scratch, f"t-{name}"), "connector.class": "PositionedFile"}
    assert worker.request("PUT", f"/v1/connectors/{name}/config", json=config).status_code == 201
    wait_until(
        lambda: worker.get(f"/v1/connectors/{name}/offsets").json()["offsets"],
        60,
        "a stored position",
    )
    changed = {**config, "connect.topicname": f"other-{name}"}
    refused = worker.request("PUT", f"/v1/connectors/{name}/config", json=changed)
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["key"] == "connect.topicname"
    assert "reset its offsets" in body["suggestion"]
    # the way out: stop, reset the offsets, update
    assert worker.request("PUT", f"/v1/connectors/{name}/stop").status_code == 202
    assert worker.request("DELETE", f"/v1/connectors/{name}/offsets").status_code == 200
    updated = worker.request("PUT", f"/v1/connectors/{name}/config", json=changed)
    assert updated.status_code == 200, updated.text
    assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING sluice\.errors: ")


def test_tolerated_record_log_lines(worker: WorkerProcess, scratch: Path) -> None:
    uid = _uid()
    topic, secret = f"tolerated-{uid}", f"SECRET-{uid}-not-json"
    lines = "".join(f'{{"n": {i}}}\n' for i in range(20)) + f"{secret}\n"
    source = _source(scratch, topic, lines)
    dst = scratch / f"{uid}-out.txt"
    sink = {
        "connector.class": "FileSinkConnector",
        "filename": str(dst),
        "connect.topicnames": topic,
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        "pipeline.fused": "false",  # the SQL decode path, whose message quotes the value
        "errors.tolerance": "all",
        "errors.log.enable": "true",
        "errors.log.include.messages": "false",
        "errors.deadletterqueue.topic.name": f"dlq-{uid}",
    }
    names = (f"tsrc-{uid}", f"tsink-{uid}")
    for name, config in zip(names, (source, sink), strict=True):
        created = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
        assert created.status_code == 201, created.text

    def tolerated() -> list[str]:
        return [line for line in _log(worker).splitlines() if f"task {names[1]}-" in line]

    wait_until(tolerated, 120, "the tolerated record's log line")
    [line] = tolerated()
    assert _LINE.match(line), line  # time, level and logger
    assert f"Error encountered in task {names[1]}-0." in line  # the only task is 0
    assert secret not in _log(worker)  # errors.log.include.messages=false
    assert "record data hidden: errors.log.include.messages=false" in line
    status = worker.get(f"/v1/connectors/{names[1]}/status").json()
    assert [t["id"] for t in status["tasks"]] == [0]
    for name in names:
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_sql_transforms_are_analysed_at_create(worker: WorkerProcess, scratch: Path) -> None:
    name = f"sql-{_uid()}"
    good_query = "SELECT topic, key, upper(value) AS value, timestamp, headers FROM records"
    base = {
        **_source(scratch, f"t-{name}"),
        "transforms": "q",
        "transforms.q.type": "Sql",
    }

    def put(query: str) -> Any:
        return worker.request(
            "PUT", f"/v1/connectors/{name}/config", json={**base, "transforms.q.query": query}
        )

    unknown_column = put(
        "SELECT topic, key, nosuchcolumn AS value, timestamp, headers FROM records"
    )
    assert unknown_column.status_code == 400, unknown_column.text
    assert unknown_column.json()["key"] == "transforms.q"
    assert "invalid SQL" in unknown_column.json()["message"]
    assert worker.get(f"/v1/connectors/{name}").status_code == 404  # not stored
    dropped = put("SELECT value FROM records")
    assert dropped.status_code == 400
    assert dropped.json()["key"] == "transforms.q.query"
    assert "missing: topic, key, timestamp, headers" in dropped.json()["message"]

    assert put(good_query).status_code == 201
    wait_until(lambda: worker.state(name) == "RUNNING", 60, "the connector to run")
    # a bad change is refused and the running config stays
    assert put("SELECT nope FROM records").status_code == 400
    assert worker.get(f"/v1/connectors/{name}/config").json()["transforms.q.query"] == good_query
    wait_until(lambda: worker.state(name) == "RUNNING", 60, "the previous config to run again")
    assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204
