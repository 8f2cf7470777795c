"""A real worker process driven over HTTP exactly as RocketMQ Connect's README drives its own."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

ANCHOR_TEXT = "Hello \r\nRocketMQ\r\n Connect\n"


def _same(a: Path, b: Path) -> bool:
    return b.exists() and a.read_bytes() == b.read_bytes()


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    # curl -X POST -H "Content-Type: application/json" http://…/connectors/<name> -d '{…}'
    response = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert response.status_code == 200, response.text
    assert response.json() == {"status": 200, "body": config}


def _file_pair(worker: WorkerProcess, tmp: Path, prefix: str) -> tuple[Path, Path, str]:
    src, dst, topic = tmp / f"{prefix}-source.txt", tmp / f"{prefix}-sink.txt", f"{prefix}Topic"
    src.write_text(ANCHOR_TEXT, newline="")
    _create(
        worker,
        f"{prefix}Source",
        {
            "connector.class": "org.apache.rocketmq.connect.file.FileSourceConnector",
            "filename": str(src),
            "connect.topicname": topic,
        },
    )
    _create(
        worker,
        f"{prefix}Sink",
        {
            "connector.class": "org.apache.rocketmq.connect.file.FileSinkConnector",
            "filename": str(dst),
            "connect.topicnames": topic,
        },
    )
    return src, dst, topic


def test_anchor_readme_flow(worker: WorkerProcess, scratch: Path) -> None:
    src, dst, topic = _file_pair(worker, scratch, "readme")
    wait_until(lambda: _same(src, dst), what="the sink file to equal the source file")

    listed = worker.body("/connectors/list")
    for name, kind in (("readmeSource", "source"), ("readmeSink", "sink")):
        assert listed[name]["status"]["connector"]["state"] == "RUNNING"
        assert listed[name]["status"]["type"] == kind
        assert listed[name]["info"]["config"]["connect.topicname" + ("s" if kind == "sink" else "")]
    status = worker.body("/connectors/readmeSink/status")
    assert status["tasks"] == [
        {"id": 0, "state": "RUNNING", "trace": None, "workerId": "e2e-worker"}
    ]
    assert worker.body("/connectors/readmeSink/tasks/0/status")["state"] == "RUNNING"
    assert worker.body("/connectors/readmeSink/tasks")[0]["id"] == {
        "connector": "readmeSink",
        "task": 0,
    }
    assert "readmeSource" in worker.body("/allocated/connectors")
    assert worker.body("/getClusterInfo") == ["e2e-worker"]

    # pause: the sink stops while the source goes on filling the topic
    assert (
        worker.body("/connectors/readmeSink/pause") == "Connector [readmeSink] paused successfully"
    )
    assert worker.body("/connectors/readmeSink/status")["connector"]["state"] == "PAUSED"
    with open(src, "a", encoding="utf-8", newline="") as f:
        f.write("more 1\r\nmore 2 ünïcødé 🚀\n")
    queues = lambda: sum(  # noqa: E731
        q["max_offset"]
        for t in worker.get("/v1/topics").json()
        if t["name"] == topic
        for q in t["queues"]
    )
    wait_until(lambda: queues() == 5, what="the source to put 5 records in the topic")
    assert dst.read_bytes() == ANCHOR_TEXT.encode()  # paused: nothing delivered

    assert worker.body("/connectors/readmeSink/resume") == (
        "Connector [readmeSink] resumed successfully"
    )
    wait_until(lambda: _same(src, dst), what="the resumed sink to catch up")
    assert worker.body("/connectors/readmeSink/status")["connector"]["state"] == "RUNNING"

    # stop = delete, as in RocketMQ Connect
    assert (
        worker.body("/connectors/readmeSink/stop") == "Connector [readmeSink] deleted successfully"
    )
    assert worker.body("/connectors/readmeSource/stop") == (
        "Connector [readmeSource] deleted successfully"
    )
    listed = worker.body("/connectors/list")
    assert "readmeSink" not in listed and "readmeSource" not in listed
    assert worker.get("/connectors/readmeSink/status").status_code == 404


def test_create_by_get_with_urlencoded_config(worker: WorkerProcess, scratch: Path) -> None:
    src, dst = scratch / "get-in.txt", scratch / "get-out.txt"
    src.write_text("a\nb\n")
    for name, config in (
        (
            "getSource",
            {
                "connector.class": "FileSourceConnector",
                "filename": str(src),
                "connect.topicname": "getTopic",
            },
        ),
        (
            "getSink",
            {
                "connector.class": "FileSinkConnector",
                "filename": str(dst),
                "connect.topicnames": "getTopic",
            },
        ),
    ):
        query = urllib.parse.quote(json.dumps(config))
        assert worker.body(f"/connectors/{name}?config={query}") == config
    wait_until(lambda: _same(src, dst), what="the GET-created pipeline to copy the file")
    for name in ("getSource", "getSink"):
        worker.body(f"/connectors/{name}/stop")


def test_update_restarts_from_positions_and_identical_config_is_a_no_op(
    worker: WorkerProcess, scratch: Path
) -> None:
    src, dst, _ = _file_pair(worker, scratch, "upd")
    wait_until(lambda: _same(src, dst), what="the first copy")
    config = worker.get("/v1/connectors/updSink/config").json()

    same = worker.request("PUT", "/v1/connectors/updSink/config", json=config)
    assert same.status_code == 200, same.text
    assert worker.state("updSink") == "RUNNING"

    moved = scratch / "upd-sink-2.txt"
    changed = worker.request(
        "PUT", "/v1/connectors/updSink", json={**config, "filename": str(moved)}
    )
    assert changed.status_code == 200 and changed.json()["config"]["filename"] == str(moved)
    with open(src, "a", encoding="utf-8") as f:
        f.write("after the update\n")
    # the new query starts from the sink's positions: only the new record reaches the new file
    wait_until(
        lambda: moved.exists() and moved.read_text() == "after the update\n",
        what="the updated sink to deliver only the new record",
    )
    assert dst.read_bytes() == ANCHOR_TEXT.encode()
    for name in ("updSource", "updSink"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_offsets_patch_to_the_beginning_replays_the_topic(
    worker: WorkerProcess, scratch: Path
) -> None:
    src, dst, topic = _file_pair(worker, scratch, "ofs")
    wait_until(lambda: _same(src, dst), what="the first copy")

    running = worker.request("PATCH", "/v1/connectors/ofsSink/offsets", json={"offsets": []})
    assert running.status_code == 409 and "must be STOPPED" in running.json()["message"]

    stopped = worker.request("PUT", "/v1/connectors/ofsSink/stop")
    assert stopped.status_code == 202 and stopped.json()["connector"]["state"] == "STOPPED"
    offsets = worker.get("/v1/connectors/ofsSink/offsets").json()["offsets"]
    assert sum(o["offset"]["queueOffset"] for o in offsets) == 3  # three records delivered
    assert {o["partition"]["topic"] for o in offsets} == {topic}

    rewound = [{"partition": o["partition"], "offset": {"queueOffset": 0}} for o in offsets]
    patched = worker.request("PATCH", "/v1/connectors/ofsSink/offsets", json={"offsets": rewound})
    assert patched.status_code == 200, patched.text
    after = worker.get("/v1/connectors/ofsSink/offsets").json()["offsets"]
    assert all(o["offset"] == {"queueOffset": 0} for o in after)

    assert worker.request("PUT", "/v1/connectors/ofsSink/resume").status_code == 202
    twice = ANCHOR_TEXT.encode() * 2
    wait_until(lambda: dst.read_bytes() == twice, what="the topic to be replayed into the sink")
    for name in ("ofsSource", "ofsSink"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_a_failed_query_shows_failed_with_its_cause_and_others_keep_running(
    worker: WorkerProcess, scratch: Path
) -> None:
    good_src, good_dst, _ = _file_pair(worker, scratch, "healthy")
    bad = scratch / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe not utf-8\n")
    created = worker.request(
        "POST",
        "/v1/connectors",
        json={
            "name": "badSource",
            "config": {
                "connector.class": "FileSourceConnector",
                "filename": str(bad),
                "connect.topicname": "badTopic",
            },
        },
    )
    assert created.status_code == 201, created.text
    wait_until(lambda: worker.state("badSource") == "FAILED", what="the bad source to fail")
    status = worker.get("/v1/connectors/badSource/status").json()
    trace = status["connector"]["trace"]
    assert trace.splitlines()[0].startswith("ConnectException: file ")
    assert "line 2" in trace.splitlines()[0] and "UTF-8" in trace.splitlines()[0]
    assert status["tasks"][0]["state"] == "FAILED"

    with open(good_src, "a", encoding="utf-8") as f:
        f.write("still flowing\n")
    wait_until(lambda: _same(good_src, good_dst), what="the healthy pipeline to keep running")
    assert worker.state("healthySink") == "RUNNING"

    # fix the input, restart: the connector runs again
    bad.write_bytes(b"fine\nnow fine too\n")
    restarted = worker.request("POST", "/v1/connectors/badSource/restart")
    assert restarted.status_code == 202
    wait_until(lambda: worker.state("badSource") == "RUNNING", what="the restarted source")
    for name in ("badSource", "healthySource", "healthySink"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


PLUGIN = '''
from sluice.connectors.file import FileSinkConnector
from sluice.connectors.file.sink import FileSinkTask


class ShoutingTask(FileSinkTask):
    """Runs in Spark's Python workers: they must import this module from the plugin folder."""

    def put_batch(self, batch):
        import pyarrow as pa
        import pyarrow.compute as pc

        index = batch.schema.get_field_index("value")
        upper = pc.utf8_upper(batch.column(index).cast(pa.string()))
        kind = batch.schema.field(index).type
        super().put_batch(batch.set_column(index, "value", upper.cast(kind)))


class ShoutingSink(FileSinkConnector):
    """A file sink that writes values in upper case."""

    task_class = ShoutingTask
'''


def test_plugin_reload_picks_up_a_new_module(worker: WorkerProcess, scratch: Path) -> None:
    assert worker.plugin_dir is not None
    classes = lambda: {p["class"] for p in worker.get("/v1/connector-plugins").json()}  # noqa: E731
    assert "shouting.ShoutingSink" not in classes()
    (worker.plugin_dir / "shouting.py").write_text(PLUGIN)
    assert worker.body("/plugin/reload") == "Plugin reload succeeded"
    assert "shouting.ShoutingSink" in classes()
    listed = {p["className"]: p for p in worker.body("/plugin/list/connectors")}
    assert listed["shouting.ShoutingSink"]["type"] == "SINK"

    src, dst = scratch / "plug-in.txt", scratch / "plug-out.txt"
    src.write_text("quiet words\n")
    _create(
        worker,
        "plugSource",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "plugTopic",
        },
    )
    _create(
        worker,
        "plugSink",
        {
            "connector.class": "ShoutingSink",
            "filename": str(dst),
            "connect.topicnames": "plugTopic",
        },
    )
    wait_until(
        lambda: dst.exists() and dst.read_text() == "QUIET WORDS\n", what="the plugin sink to write"
    )
    for name in ("plugSource", "plugSink"):
        worker.body(f"/connectors/{name}/stop")
