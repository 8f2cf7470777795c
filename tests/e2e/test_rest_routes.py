"""The REST routes no other test reaches, on the shared worker, with a running file pipeline:
every `/v1` GET of an existing connector (its body checked), a task restart, `/allocated/tasks`
and the RocketMQ Connect bulk routes `/connectors/{pause,resume,stop}/all`.

The bulk routes act on every connector of the worker, so the test that uses them runs on a worker
of its own (`bulk_worker`): on the shared one it would pause, resume and delete the connectors of
whatever test ran before it, and depend on them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

LINES = "".join(f"line {i:03d} ünïcode\n" for i in range(100))


def _same(a: Path, b: Path) -> bool:
    return b.exists() and a.read_bytes() == b.read_bytes()


def _pipeline(worker: WorkerProcess, tmp: Path) -> tuple[str, str, str, Path, Path]:
    """A running file source → topic → file sink pair through `POST /v1/connectors`."""
    uid = uuid.uuid4().hex[:8]
    source, sink, topic = f"routes-src-{uid}", f"routes-sink-{uid}", f"routes-topic-{uid}"
    src, dst = tmp / f"{uid}-in.txt", tmp / f"{uid}-out.txt"
    src.write_text(LINES, encoding="utf-8")
    configs = {
        source: {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": topic,
        },
        sink: {
            "connector.class": "FileSinkConnector",
            "filename": str(dst),
            "connect.topicnames": topic,
        },
    }
    for name, config in configs.items():
        created = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
        assert created.status_code == 201, created.text
    wait_until(lambda: _same(src, dst), 180, "the sink file to equal the source file")
    return source, sink, topic, src, dst


def _starts(worker: WorkerProcess, name: str) -> int:
    """How often the worker has started connector `name` (its log says so on each start)."""
    return worker.log.read_text(errors="replace").count(f"connector {name} started (")


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def test_v1_gets_of_an_existing_connector(worker: WorkerProcess, scratch: Path) -> None:
    source, sink, topic, src, dst = _pipeline(worker, scratch)
    source_config = worker.get(f"/v1/connectors/{source}/config").json()
    assert source_config == {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": topic,
    }

    listed = worker.get("/v1/connectors")
    assert listed.status_code == 200 and {source, sink} <= set(listed.json())
    info = worker.get(f"/v1/connectors/{source}").json()
    assert info == {
        "name": source,
        "config": source_config,
        "tasks": [{"connector": source, "task": 0}],
        "type": "source",
    }
    expanded = worker.get("/v1/connectors", params={"expand": "info"}).json()
    assert expanded[source] == {"info": info}
    statuses = worker.get("/v1/connectors", params={"expand": "status"}).json()
    status = worker.get(f"/v1/connectors/{sink}/status").json()
    assert statuses[sink] == {"status": status}
    assert status == {
        "name": sink,
        "connector": {"state": "RUNNING", "trace": None, "workerId": "e2e-worker"},
        "tasks": [{"id": 0, "state": "RUNNING", "trace": None, "workerId": "e2e-worker"}],
        "type": "sink",
        "delivery": "exactly-once",  # the file sink's StagedAppend
    }
    # the RocketMQ face shows the same status, delivery included
    assert worker.body(f"/connectors/{source}/status")["delivery"] == "exactly-once"
    assert worker.get(f"/v1/connectors/{sink}/tasks/0/status").json() == status["tasks"][0]
    tasks = worker.get(f"/v1/connectors/{sink}/tasks").json()
    assert [t["id"] for t in tasks] == [{"connector": sink, "task": 0}]
    assert tasks[0]["config"]["filename"] == str(dst)

    # the source's committed position is the end of the file
    def source_offsets() -> Any:
        return worker.get(f"/v1/connectors/{source}/offsets").json()

    wait_until(
        lambda: (
            source_offsets()["offsets"]
            == [{"partition": {"filename": str(src)}, "offset": {"position": src.stat().st_size}}]
        ),
        60,
        "the source's position to reach the end of the file",
    )
    sink_offsets = worker.get(f"/v1/connectors/{sink}/offsets").json()["offsets"]
    assert sink_offsets and all(o["partition"]["topic"] == topic for o in sink_offsets)

    # topics: the 100 records over the topic's queues, one topic described alone
    described = worker.get(f"/v1/topics/{topic}").json()
    assert described["name"] == topic
    assert sum(q["max_offset"] - q["min_offset"] for q in described["queues"]) == 100
    assert described in worker.get("/v1/topics").json()

    plugins = worker.get("/v1/connector-plugins").json()
    file_source = [p for p in plugins if "FileSourceConnector" in p["aliases"]]
    assert [(p["class"], p["type"], p["delivery"]) for p in file_source] == [
        ("sluice.connectors.file.source.FileSourceConnector", "source", "exactly-once")
    ]
    # what the console's class picker shows beside the short name
    assert file_source[0]["summary"] == (
        "Streams the lines of one file into a topic, following appends."
    )
    # delivery follows the task's base class (poll-only: at-least-once) or a sink's config
    rocketmq_face = {p["className"]: p["delivery"] for p in worker.body("/plugin/list")}
    assert rocketmq_face["sluice.connectors.redis.source.RedisListSourceConnector"] == (
        "at-least-once"
    )
    assert rocketmq_face["sluice.connectors.jdbc.sink.JdbcSinkConnector"] == "at-least-once"
    assert rocketmq_face["sluice.connectors.file.sink.FileSinkConnector"] == "exactly-once"
    assert {p["type"] for p in plugins} == {"source", "sink"}
    everything = {
        p["type"] for p in worker.get("/v1/connector-plugins?connectorsOnly=false").json()
    }
    assert {"source", "sink", "transform", "converter", "predicate"} <= everything, everything

    for name in (sink, source):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


@pytest.fixture(scope="module")
def bulk_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    process = WorkerProcess(tmp_path_factory.mktemp("bulk-worker")).start()
    yield process
    code = process.terminate()
    assert code == 0, f"worker exit code {code}:\n{process.log.read_text()[-3000:]}"


def test_task_restart_and_the_bulk_routes(bulk_worker: WorkerProcess, scratch: Path) -> None:
    worker = bulk_worker
    source, sink, _, src, dst = _pipeline(worker, scratch)

    tasks = worker.body("/allocated/tasks")
    assert set(tasks) == {
        "pendingTasks",
        "runningTasks",
        "stoppingTasks",
        "stoppedTasks",
        "errorTasks",
    }
    running = {(t["connector"], t["task"]): t for t in tasks["runningTasks"]}
    assert running[(sink, 0)] == {
        "connector": sink,
        "task": 0,
        "id": 0,
        "state": "RUNNING",
        "trace": None,
        "workerId": "e2e-worker",
    }
    assert (source, 0) in running

    # restart one task: the connector's query starts again from its checkpoint (a new start in
    # the log), then goes on delivering, nothing lost or repeated
    starts = _starts(worker, sink)
    restarted = worker.request("POST", f"/v1/connectors/{sink}/tasks/0/restart")
    assert restarted.status_code == 202, restarted.text
    assert restarted.json()["name"] == sink
    assert restarted.json()["connector"]["state"] in ("RESTARTING", "RUNNING")
    wait_until(lambda: _starts(worker, sink) == starts + 1, 120, "the sink to start again")
    wait_until(lambda: worker.state(sink) == "RUNNING", 120, "the restarted sink to run")
    _append(src, "after the task restart\n")
    wait_until(lambda: _same(src, dst), 120, "the restarted sink to deliver the new line")
    missing = worker.request("POST", f"/v1/connectors/{sink}/tasks/3/restart")
    assert missing.status_code == 404, missing.text

    # pause/all: every connector of the worker pauses; new lines stop at the source
    names = worker.get("/v1/connectors").json()
    assert sorted(names) == sorted([source, sink])  # the worker's own: nothing of other tests
    assert worker.body("/connectors/pause/all") == f"{len(names)} connectors are paused"
    for name in names:
        wait_until(lambda n=name: worker.state(n) == "PAUSED", 60, f"{name} to be PAUSED")
    stopped = {(t["connector"], t["task"]) for t in worker.body("/allocated/tasks")["stoppedTasks"]}
    assert {(source, 0), (sink, 0)} <= stopped
    size = dst.stat().st_size
    _append(src, "while paused\n")

    # resume/all: they run again and the line written while paused arrives
    assert worker.body("/connectors/resume/all") == f"{len(names)} connectors are resumed"
    wait_until(lambda: _same(src, dst), 120, "the resumed pipeline to deliver")
    assert dst.stat().st_size > size
    for name in names:
        wait_until(lambda n=name: worker.state(n) == "RUNNING", 60, f"{name} to be RUNNING")

    # stop/all deletes every connector, as RocketMQ Connect does; then there is nothing to stop
    assert worker.body("/connectors/stop/all") == f"{len(names)} connectors are deleted"
    assert worker.get("/v1/connectors").json() == []
    assert worker.get(f"/v1/connectors/{sink}").status_code == 404
    assert worker.body("/connectors/stop/all") == (
        "No connector needs to be deleted, please add connector first"
    )
    assert worker.body("/allocated/tasks")["runningTasks"] == []
