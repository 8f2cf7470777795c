"""Every error the REST API gives: its HTTP status and a message naming the problem."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def _rocketmq_error(worker: WorkerProcess, method: str, path: str, status: int, **kw) -> str:
    response = worker.request(method, path, **kw)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["errorCode"] == status
    return body["message"]


def _v1_error(worker: WorkerProcess, method: str, path: str, status: int, **kw) -> str:
    response = worker.request(method, path, **kw)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == status
    return body["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/connectors/ghost/status",
        "/connectors/ghost/config",
        "/connectors/ghost/tasks",
        "/connectors/ghost/tasks/0/status",
        "/connectors/ghost/pause",
        "/connectors/ghost/resume",
        "/connectors/ghost/stop",
    ],
)
def test_unknown_connector_is_404_on_the_rocketmq_face(worker: WorkerProcess, path: str) -> None:
    assert _rocketmq_error(worker, "GET", path, 404) == "connector 'ghost' not found"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/connectors/ghost"),
        ("GET", "/v1/connectors/ghost/status"),
        ("DELETE", "/v1/connectors/ghost"),
        ("PUT", "/v1/connectors/ghost/pause"),
        ("PUT", "/v1/connectors/ghost/stop"),
        ("POST", "/v1/connectors/ghost/restart"),
        ("GET", "/v1/connectors/ghost/offsets"),
        ("DELETE", "/v1/connectors/ghost/offsets"),
    ],
)
def test_unknown_connector_is_404_on_v1(worker: WorkerProcess, method: str, path: str) -> None:
    assert _v1_error(worker, method, path, 404) == "connector 'ghost' not found"


def test_create_errors_name_the_problem(worker: WorkerProcess, tmp_path: Path) -> None:
    post = lambda body: _rocketmq_error(  # noqa: E731
        worker, "POST", "/connectors/broken", 400, content=body
    )
    assert "malformed JSON" in post("{not json")
    assert post("[1, 2]") == "request body must be a JSON object, got list"
    assert post("") == "request body is required (a JSON object)"
    assert post(json.dumps({"filename": "x"})) == "connector.class: required key is missing"
    unknown = post(json.dumps({"connector.class": "NoSuchConnector"}))
    assert unknown.startswith("connector.class: unknown connector class 'NoSuchConnector'")
    assert "FileSourceConnector" in unknown  # the message lists what exists
    assert post(json.dumps({"connector.class": "no.such.module.Thing"})).startswith(
        "connector.class: cannot load 'no.such.module.Thing'"
    )
    sink = post(json.dumps({"connector.class": "FileSinkConnector", "filename": "x"}))
    assert sink.startswith("connect.topicnames: required key is missing")
    # Connector.validate: the file source needs a filename
    invalid = post(json.dumps({"connector.class": "FileSourceConnector", "connect.topicname": "t"}))
    assert invalid.startswith("filename: required key is missing")
    # every bad key, not only the first
    assert post(json.dumps({"connector.class": "FileSourceConnector", "max.tasks": "zero"})) == (
        "max.tasks: expected an integer, got 'zero'; filename: required key is missing; "
        "connect.topicname: required key is missing"
    )
    nested = post(json.dumps({"connector.class": "FileSourceConnector", "filename": {"a": 1}}))
    assert nested.startswith("filename: value of type dict is not supported")

    by_get = "/connectors/broken?config=" + urllib.parse.quote("{oops")
    assert "query param 'config' is malformed JSON" in _rocketmq_error(worker, "GET", by_get, 400)
    assert _rocketmq_error(worker, "GET", "/connectors/broken", 400) == (
        "query param 'config' is required (a JSON object)"
    )
    assert worker.get("/connectors/broken/status").status_code == 404  # nothing was created


def test_a_400_names_what_was_typed(worker: WorkerProcess, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("")
    base = {"connector.class": "FileSourceConnector", "filename": str(src)}

    def refused(config: dict[str, str]) -> dict:
        body = {"name": "typed", "config": config}
        response = worker.request("POST", "/v1/connectors", json=body)
        assert response.status_code == 400, response.text
        return response.json()

    router = "org.apache.kafka.connect.transforms.RegexRouter"
    body = refused(
        {**base, "connect.topicname": "t", "transforms": "r", "transforms.r.type": router + "r"}
    )
    assert body["key"] == "transforms.r.type"
    assert body["message"] == (
        f"transforms.r.type: unknown transform class '{router}r'; did you mean {router}?"
    )
    body = refused({"connector.class": "FileStreamSourceConnecter"})
    assert body["message"] == (
        "connector.class: unknown connector class 'FileStreamSourceConnecter'; did you mean "
        "org.apache.kafka.connect.file.FileStreamSourceConnector?"
    )
    body = refused({**base, "connect.topicname": "t", "tasks.max": "many"})
    assert (body["key"], body["message"]) == (
        "tasks.max",
        "tasks.max: expected an integer, got 'many'",
    )
    body = refused({**base, "connect.topicnmae": "t"})
    assert body["message"] == (
        "connect.topicname: required key is missing; connect.topicnmae is set, and looks like "
        "a typo of connect.topicname"
    )
    assert body["suggestion"] == "rename connect.topicnmae to connect.topicname"
    assert worker.get("/v1/connectors/typed").status_code == 404  # nothing was created


def test_v1_errors(worker: WorkerProcess, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": "v1errors",
    }
    created = worker.request("POST", "/v1/connectors", json={"name": "v1e", "config": config})
    assert created.status_code == 201, created.text
    try:
        again = _v1_error(
            worker, "POST", "/v1/connectors", 409, json={"name": "v1e", "config": config}
        )
        assert again == "connector 'v1e' already exists"
        assert _v1_error(worker, "POST", "/v1/connectors", 400, content="{bad").startswith(
            "invalid request:"
        )
        missing = _v1_error(worker, "POST", "/v1/connectors", 400, json={"config": config})
        assert "name" in missing
        assert (
            _v1_error(
                worker, "PUT", "/v1/connectors/v1e/config", 400, json={**config, "max.tasks": "0"}
            )
            == "max.tasks: must be at least 1, got 0"
        )
        assert _v1_error(worker, "GET", "/v1/connectors/v1e/tasks/7/status", 404) == (
            "connector 'v1e' has no task 7 (it has 1)"
        )
        assert _v1_error(worker, "GET", "/v1/connectors?expand=everything", 400) == (
            "invalid request: query param 'expand': Input should be 'status' or 'info'"
        )
        running = _v1_error(worker, "DELETE", "/v1/connectors/v1e/offsets", 409)
        assert running.startswith("connector 'v1e' must be STOPPED before its offsets can be reset")
        assert worker.request("PUT", "/v1/connectors/v1e/stop").status_code == 202
        bad_entry = _v1_error(
            worker,
            "PATCH",
            "/v1/connectors/v1e/offsets",
            400,
            json={"offsets": [{"offset": {"position": 0}}]},
        )
        assert bad_entry == "invalid request: offsets[0].partition: Field required"
        no_offset = _v1_error(
            worker,
            "PATCH",
            "/v1/connectors/v1e/offsets",
            400,
            json={"offsets": [{"partition": {"filename": "x"}}]},
        )
        assert no_offset == "invalid request: offsets[0].offset: Field required"
        # An offset the file source could not resume from is refused, not stored to fail the
        # task at its next read (it was an OSError in the status).
        for position in ("abc", -7, True, None):
            bad_offset = _v1_error(
                worker,
                "PATCH",
                "/v1/connectors/v1e/offsets",
                400,
                json={
                    "offsets": [
                        {"partition": {"filename": str(src)}, "offset": {"position": position}}
                    ]
                },
            )
            assert bad_offset == (
                f"offsets[0].offset: 'position' must be an integer ≥ 0, got {position!r}"
            )
        assert _v1_error(worker, "GET", "/v1/topics/no-such-topic", 404) == (
            "topic 'no-such-topic' not found"
        )
        unknown = _v1_error(
            worker, "PUT", "/v1/connector-plugins/Nope/config/validate", 404, json={}
        )
        assert unknown.startswith("connector.class: unknown connector class 'Nope'")
    finally:
        worker.request("DELETE", "/v1/connectors/v1e")


def test_validate_reports_errors_per_key(worker: WorkerProcess) -> None:
    result = worker.request(
        "PUT", "/v1/connector-plugins/FileSinkConnector/config/validate", json={"filename": "/x"}
    ).json()
    assert result["error_count"] == 1
    by_key = {c["value"]["name"]: c for c in result["configs"]}
    [error] = by_key["connect.topicnames"]["value"]["errors"]
    assert error.startswith("connect.topicnames: required key is missing")
    assert by_key["filename"]["value"] == {
        "name": "filename",
        "value": "/x",
        "errors": [],
        "warnings": [],
    }
    ok = worker.request(
        "PUT",
        "/v1/connector-plugins/org.apache.rocketmq.connect.file.FileSinkConnector/config/validate",
        json={"filename": "/x", "connect.topicnames": "t"},
    ).json()
    assert ok["error_count"] == 0

    rocket = worker.body(
        "/plugin/config/validate?config="
        + urllib.parse.quote(json.dumps({"connector.class": "FileSinkConnector"}))
    )
    # both required keys are missing, each named once, as on the /v1 face
    assert rocket["error_count"] == 2, rocket
    rocket_errors = {
        c["value"]["name"]: c["value"]["errors"] for c in rocket["configs"] if c["value"]["errors"]
    }
    assert sorted(rocket_errors) == ["connect.topicnames", "filename"], rocket_errors
    assert rocket_errors["filename"][0].startswith("filename: required key is missing")
    assert _rocketmq_error(worker, "GET", "/plugin/config/validate?config=%7B%7D", 400) == (
        "connector.class: required key is missing"
    )
    keys = {k["name"] for k in worker.body("/plugin/config?plugin=FileSourceConnector")}
    assert {"filename", "connect.topicname", "max.tasks"} <= keys
    assert _rocketmq_error(worker, "GET", "/plugin/config", 400).startswith(
        "query param 'plugin' is required"
    )


def test_a_connector_that_fails_to_start_is_failed_not_fatal(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    """A start that fails on the connector's own error is FAILED with the error as its trace;
    one that met a server away (a refused connection) is RESTARTING with it (retried for
    `restart.retriable.timeout.ms`, sluice.runtime.herder.restarts). Neither hurts the worker."""
    plugin_dir = worker.plugin_dir
    assert plugin_dir is not None
    (plugin_dir / "broken_start.py").write_text(
        "from sluice.connectors.file import FileSourceConnector\n\n\n"
        "class BrokenStart(FileSourceConnector):\n"
        '    """Fails in start on a setting its system refuses."""\n\n'
        "    def start(self, config):\n"
        "        raise ValueError('table orders has no column id')\n\n\n"
        "class AwayStart(FileSourceConnector):\n"
        '    """Fails in start, as a connector that cannot reach its system does."""\n\n'
        "    def start(self, config):\n"
        "        raise ConnectionRefusedError('database at 10.0.0.1:5432 refused the connection')\n"
    )
    worker.body("/plugin/reload")
    (tmp_path / "f").write_text("")
    for name, cls, state, first in (
        ("brokenStart", "BrokenStart", "FAILED", "ValueError: table orders has no column id"),
        (
            "awayStart",
            "AwayStart",
            "RESTARTING",
            "ConnectionRefusedError: database at 10.0.0.1:5432 refused the connection",
        ),
    ):
        config = {"connector.class": cls, "filename": str(tmp_path / "f"), "connect.topicname": "t"}
        response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
        assert response.status_code == 200, response.text
        wait_until(lambda n=name, s=state: worker.state(n) == s, what=f"{name} {state}")
        trace = worker.get(f"/v1/connectors/{name}/status").json()["connector"]["trace"]
        assert trace.splitlines()[0] == first
        assert worker.get("/getClusterInfo").status_code == 200  # the worker is fine
        worker.body(f"/connectors/{name}/stop")


def test_sink_reader_and_replicator_keys_are_checked_at_create(worker: WorkerProcess) -> None:
    post = lambda config: _rocketmq_error(  # noqa: E731
        worker, "POST", "/connectors/badreader", 400, content=json.dumps(config)
    )
    sink = {"connector.class": "FileSinkConnector", "filename": "x", "connect.topicnames": "t"}
    assert post({**sink, "consume.from.where": "NOW"}).startswith(
        "consume.from.where: must be one of CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_LAST_OFFSET"
    )
    assert post({**sink, "task.group.id": "two words"}).startswith(
        "task.group.id: 'two words' does not match"
    )
    regex = {
        "connector.class": "KafkaSourceConnector",
        "source.bootstrap.servers": "127.0.0.1:1",
        "source.topics.regex": "([",
    }
    assert post(regex).startswith("source.topics.regex: invalid regular expression")
    assert worker.get("/connectors/badreader/status").status_code == 404


def test_hostile_names_and_topics_are_400s_naming_the_problem(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    """Names that would be folders of the store (`.`, `..`), control characters, a name longer
    than a file name may be, topic names no bus takes, and an int past 64 bits: each a 400
    naming the key, none a 500, nothing created."""
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    config = {"connector.class": "FileSourceConnector", "filename": str(src)}
    config["connect.topicname"] = "hostile"
    for name in (".", "..", "nul\x00byte", "bell\x07", "x" * 250):
        response = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
        assert response.status_code == 400, (name[:20], response.text)
        assert "name" in response.json()["message"]
        encoded = urllib.parse.quote(name, safe="").replace(".", "%2E")
        put = worker.request("PUT", f"/v1/connectors/{encoded}/config", json=config)
        assert put.status_code == 400, (name[:20], put.text)
        created = worker.request("POST", f"/connectors/{encoded}", content=json.dumps(config))
        assert created.status_code == 400, (name[:20], created.text)

    def refused(name: str, conf: dict[str, str]) -> str:
        body = {"name": name, "config": conf}
        return _v1_error(worker, "POST", "/v1/connectors", 400, json=body)

    bad_topic = refused("hostile-topic", {**config, "connect.topicname": "t\x00x"})
    assert bad_topic.startswith("connect.topicname: 't\\x00x' is not a valid topic name")
    sink = {"connector.class": "FileSinkConnector", "filename": str(tmp_path / "out.txt")}
    bad_topics = refused("hostile-sink", {**sink, "topics": "ok,has space"})
    # named as typed: Kafka's `topics` and `tasks.max`, not sluice's names they are renamed to
    assert bad_topics.startswith("topics: 'has space' is not a valid topic name")
    huge = refused("hostile-int", {**config, "tasks.max": "9" * 20})
    assert huge == f"tasks.max: expected a 64-bit integer, got {'9' * 20}"
    # The longest name allowed, in four-byte characters, is far past a file name's 255 bytes.
    longest = "😀" * 249
    created = worker.request("POST", "/v1/connectors", json={"name": longest, "config": config})
    assert created.status_code == 201, created.text
    try:
        wait_until(
            lambda: (
                worker.request(
                    "GET", f"/v1/connectors/{urllib.parse.quote(longest)}/status"
                ).json()["connector"]["state"]
                == "RUNNING"
            ),
            timeout=60,
        )
    finally:
        assert worker.request("DELETE", f"/v1/connectors/{urllib.parse.quote(longest)}").is_success
    # A body past rest.request.max.bytes (4 MiB by default) is a 413, declared or chunked; it
    # was stored and handed to every task (a 50 MB config was accepted).
    big = json.dumps({"name": "big", "config": {**config, "x": "a" * (5 << 20)}}).encode()
    for content in (big, iter([big[: 1 << 20], big[1 << 20 :]])):
        too_large = worker.request("POST", "/v1/connectors", content=content)
        assert too_large.status_code == 413, too_large.text
        assert too_large.json()["key"] == "rest.request.max.bytes"
        assert "larger than rest.request.max.bytes (4,194,304)" in too_large.json()["message"]
    small = json.dumps(config).encode()
    chunked = worker.request("POST", "/connectors/chunked", content=iter([small[:9], small[9:]]))
    assert chunked.status_code == 200, chunked.text  # a chunked body within the limit is read
    assert worker.request("DELETE", "/v1/connectors/chunked").status_code == 204
    # Kafka Connect's paths typed without /v1 point there
    kafka_path = worker.request("POST", "/connectors", json={"name": "k", "config": config})
    assert kafka_path.status_code == 404
    assert kafka_path.json()["suggestion"] == (
        "Kafka Connect's routes are under /v1 here: POST /v1/connectors"
    )
    listed = worker.request("GET", "/v1/connectors").json()
    refused_names = (".", "..", "hostile-topic", "hostile-sink", "hostile-int", "big")
    assert not any(n in listed for n in refused_names)


def _body_routes(worker: WorkerProcess) -> list[tuple[str, str, str]]:
    """(method, template, where) of every route that reads a JSON document, from the worker's
    own OpenAPI document: `body`, or `query` for the RocketMQ face's `?config=`."""
    routes = []
    for template, operations in worker.get("/openapi.json").json()["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                routes.append((method.upper(), template, "body"))
            if any("content" in p for p in operation.get("parameters", [])):
                routes.append((method.upper(), template, "query"))
    return routes


def test_deeply_nested_json_is_a_400_on_every_route_that_reads_json(
    worker: WorkerProcess,
) -> None:
    """A JSON document nested deeper than Python's parser recurses was a 500 on the RocketMQ
    face's three JSON inputs; every route that reads JSON answers 400, in its face's shape."""
    routes = _body_routes(worker)
    assert len(routes) >= 9, routes
    deep_body = '{"connector.class": ' + "[" * 100_000 + "]" * 100_000 + "}"
    deep_query = '{"connector.class": ' + "[" * 2_000 + "]" * 2_000 + "}"  # fits a URL
    for method, template, where in routes:
        path = template.replace("{name}", "deep").replace("{class_name}", "FileSourceConnector")
        if where == "body":
            answer = worker.request(method, path, content=deep_body)
        else:
            answer = worker.request(method, path, params={"config": deep_query})
        assert answer.status_code == 400, (method, template, where, answer.text[:300])
        key = "error_code" if path.startswith("/v1") else "errorCode"
        assert answer.json()[key] == 400
    assert worker.get("/connectors/deep/status").status_code == 404  # nothing was created


def test_a_control_character_in_a_key_is_refused(worker: WorkerProcess, tmp_path: Path) -> None:
    """A newline in a config key forged a line of the worker's log (the unknown-key warning
    quoted it); such a key is a 400 naming it escaped, and nothing is logged or stored."""
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    forged = "2099-01-01 00:00:00,000 WARNING sluice.worker: forged line"
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": "controlKeys",
        f"x\n{forged}": "1",
    }
    message = _v1_error(
        worker, "POST", "/v1/connectors", 400, json={"name": "controlKey", "config": config}
    )
    assert message.startswith("x\\n2099-01-01") and "control characters" in message, message
    rocket = worker.request("POST", "/connectors/controlKey", content=json.dumps(config))
    assert rocket.status_code == 400 and rocket.json()["key"] == f"x\\n{forged}", rocket.text
    validated = worker.request(
        "PUT", "/v1/connector-plugins/FileSourceConnector/config/validate", json=config
    )
    assert validated.status_code == 400, validated.text
    assert worker.get("/v1/connectors/controlKey").status_code == 404
    lines = worker.log.read_text(errors="replace").splitlines()
    assert not any(line.startswith("2099-01-01") for line in lines)


def test_a_plugin_lookup_imports_no_module(worker: WorkerProcess) -> None:
    """`GET /plugin/config?plugin=module.X` imported any installed module (a read!): `this`
    prints the Zen of Python when imported. Only registered plugins are looked up."""
    zen = "Beautiful is better than ugly."
    assert zen not in worker.log.read_text(errors="replace")
    answer = worker.get("/plugin/config?plugin=this.Zen")
    assert zen not in worker.log.read_text(errors="replace")
    assert answer.status_code == 404, answer.text
    assert "'this.Zen' is not a registered connector" in answer.json()["message"], answer.text
    # registered plugins by any of their names
    assert worker.body(
        "/plugin/config?plugin=org.apache.kafka.connect.file.FileStreamSinkConnector"
    )
