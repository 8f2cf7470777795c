"""The `sluice` CLI against a real worker process (the session fixture `worker`).

Commands run in-process through `sluice.cli.main` (the console script's function), so their exit
code, stdout and stderr are checked exactly; two run as `python -m sluice.cli` subprocesses to
cover the real entry point. Every test uses its own connector names, topics and files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.cli import main
from tests.conftest import wait_until


@dataclass
class Run:
    """One CLI invocation: its exit code and what it printed."""

    code: int
    out: str
    err: str


class Cli:
    """Runs `sluice --url <worker> …` in-process and captures its output."""

    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = url
        self.capsys = capsys

    def __call__(self, *args: str) -> Run:
        self.capsys.readouterr()  # drop anything printed before
        code = main(["--url", self.url, *args])
        out, err = self.capsys.readouterr()
        return Run(code, out, err)

    def ok(self, *args: str) -> str:
        """Run a command that must succeed; its stdout."""
        run = self(*args)
        assert run.code == 0, f"sluice {' '.join(args)} -> {run.code}: {run.err}"
        assert run.err == ""
        return run.out

    def json(self, *args: str) -> Any:
        """Run a command with `--json`; its parsed stdout."""
        return json.loads(self.ok(*args, "--json"))

    def state(self, name: str) -> str:
        return self.json("connectors", "status", name)["connector"]["state"]

    def fails(self, code: int, *args: str) -> str:
        """Run a command that must fail with `code`; its one-line error message."""
        run = self(*args)
        assert run.code == code, f"sluice {' '.join(args)} -> {run.code}: {run.out}{run.err}"
        assert run.err.startswith("error: ") and run.err.count("\n") == 1, run.err
        assert "Traceback" not in run.err
        return run.err


@pytest.fixture
def cli(worker: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    # Wide tables, so assertions on a row do not depend on where Rich wraps it.
    monkeypatch.setenv("COLUMNS", "200")
    return Cli(worker.url, capsys)


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _lines(start: int, count: int) -> str:
    return "".join(f"line {i:05d} ünïcode\n" for i in range(start, start + count))


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def test_file_pipeline_driven_by_the_cli(cli: Cli, worker: Any) -> None:
    uid = _uid()
    src, dst = Path(worker.tmp) / f"cli-{uid}-in.txt", Path(worker.tmp) / f"cli-{uid}-out.txt"
    source, sink, topic = f"cli-src-{uid}", f"cli-sink-{uid}", f"cli-topic-{uid}"
    src.write_text(_lines(0, 200), encoding="utf-8")

    # the source from -c entries, the sink from a properties file
    out = cli.ok(
        "connectors",
        "create",
        source,
        "-c",
        "connector.class=FileSourceConnector",
        "-c",
        f"filename={src}",
        "-c",
        f"connect.topicname={topic}",
    )
    assert out.startswith(f"Created connector '{source}'")
    props = Path(worker.tmp) / f"cli-{uid}-sink.properties"
    props.write_text(
        f"# the sink\nconnector.class=FileSinkConnector\nfilename={dst}\n"
        f"connect.topicnames={topic}\n"
    )
    assert cli.ok("connectors", "create", sink, "--config-file", str(props)).startswith(
        f"Created connector '{sink}'"
    )
    wait_until(lambda: _read(dst) == src.read_bytes(), 180, "the sink file to match the source")

    # list: a table, and the same through --json
    table = cli.ok("connectors", "list")
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert rows[source][1:3] == ["source", "RUNNING"]
    assert rows[sink][1:3] == ["sink", "RUNNING"]
    listed = cli.json("connectors", "list")
    assert listed[source]["status"]["connector"]["state"] == "RUNNING"
    assert listed[sink]["status"]["type"] == "sink"

    status = cli.ok("connectors", "status", source)
    assert f"Connector {source}" in status and "state RUNNING" in status
    assert cli.json("connectors", "config", sink)["filename"] == str(dst)
    config_rows = [line.split() for line in cli.ok("connectors", "config", sink).splitlines()]
    assert ["connect.topicnames", topic] in config_rows

    # topics: 200 records over the topic's queues
    topics = {t["name"]: t for t in cli.json("topics", "list")}
    queues = topics[topic]["queues"]
    assert sum(q["max_offset"] - q["min_offset"] for q in queues) == 200
    assert topic in cli.ok("topics", "list")

    # the source's position is the end of the file
    offsets = cli.json("connectors", "offsets", "get", source)["offsets"]
    assert offsets == [
        {"partition": {"filename": str(src)}, "offset": {"position": src.stat().st_size}}
    ]
    assert '"position":' in cli.ok("connectors", "offsets", "get", source)

    # pause the sink: new lines reach the topic, not the file; resume: they arrive
    assert "PAUSED" in cli.ok("connectors", "pause", sink)
    assert cli.state(sink) == "PAUSED"
    size_while_paused = len(_read(dst))
    with open(src, "a", encoding="utf-8") as f:
        f.write(_lines(200, 50))

    def topic_count() -> int:
        queues = {t["name"]: t for t in cli.json("topics", "list")}[topic]["queues"]
        return sum(q["max_offset"] - q["min_offset"] for q in queues)

    wait_until(lambda: topic_count() == 250, 120, "the appended lines to reach the topic")
    assert len(_read(dst)) == size_while_paused
    cli.ok("connectors", "resume", sink)
    wait_until(lambda: _read(dst) == src.read_bytes(), 120, "the sink to catch up after resume")
    wait_until(lambda: cli.state(sink) == "RUNNING", 60, "the sink to be RUNNING")

    # offsets can only change while stopped
    err = cli.fails(1, "connectors", "offsets", "reset", sink)
    assert err.startswith("error: 409 ") and "STOPPED" in err
    assert "STOPPED" in cli.ok("connectors", "stop", sink)
    stored = cli.json("connectors", "offsets", "get", sink)
    assert stored["offsets"], "a sink that consumed the topic has positions"
    # setting them to what they are is accepted (inline JSON), then reset forgets them
    assert cli.ok("connectors", "offsets", "set", sink, json.dumps(stored)).strip()
    assert cli.json("connectors", "offsets", "get", sink) == stored
    assert cli.ok("connectors", "offsets", "reset", sink).strip()
    assert cli.json("connectors", "offsets", "get", sink) == {"offsets": []}
    assert "No offsets stored." in cli.ok("connectors", "offsets", "get", sink)

    # started again from no position, the sink replays the whole topic
    cli.ok("connectors", "resume", sink)
    everything = src.read_bytes()
    wait_until(lambda: _read(dst) == everything * 2, 180, "the topic to be replayed")

    for name in (sink, source):
        assert cli.ok("connectors", "delete", name).startswith(f"Deleted connector '{name}'")
    assert source not in cli.json("connectors", "list")


def test_offsets_set_from_a_file_moves_a_source_back(cli: Cli, worker: Any) -> None:
    uid = _uid()
    src, dst = Path(worker.tmp) / f"cli-{uid}-in.txt", Path(worker.tmp) / f"cli-{uid}-out.txt"
    source, topic = f"cli-rewind-{uid}", f"cli-rewind-{uid}"
    src.write_text(_lines(0, 10), encoding="utf-8")
    config = Path(worker.tmp) / f"cli-{uid}.json"
    config.write_text(
        json.dumps(
            {
                "name": source,
                "config": {
                    "connector.class": "FileSourceConnector",
                    "filename": str(src),
                    "connect.topicname": topic,
                },
            }
        )
    )
    cli.ok("connectors", "create", source, "-f", str(config))
    sink = f"cli-rewind-sink-{uid}"
    cli.ok(
        "connectors",
        "create",
        sink,
        "-c",
        "connector.class=FileSinkConnector",
        "-c",
        f"filename={dst}",
        "-c",
        f"connect.topicnames={topic}",
    )
    wait_until(lambda: _read(dst) == src.read_bytes(), 180, "the first copy")

    cli.ok("connectors", "stop", source)
    rewind = Path(worker.tmp) / f"cli-{uid}-offsets.json"
    first_five = len(_lines(0, 5).encode())
    rewind.write_text(
        json.dumps(
            {"offsets": [{"partition": {"filename": str(src)}, "offset": {"position": first_five}}]}
        )
    )
    cli.ok("connectors", "offsets", "set", source, str(rewind))
    assert cli.json("connectors", "offsets", "get", source)["offsets"][0]["offset"] == {
        "position": first_five
    }
    cli.ok("connectors", "resume", source)
    # the last five lines are read again and reach the sink a second time
    expected = src.read_bytes() + _lines(5, 5).encode()
    wait_until(lambda: _read(dst) == expected, 180, "the rewound lines to be re-delivered")
    cli.ok("connectors", "delete", source)
    cli.ok("connectors", "delete", sink)


def test_a_failed_task_shows_its_trace_and_restart_runs_it_again(cli: Cli, worker: Any) -> None:
    uid = _uid()
    src = Path(worker.tmp) / f"cli-{uid}-bad.txt"
    src.write_bytes(b"good line\n\xff\xfe not utf-8\n")
    name = f"cli-failing-{uid}"
    cli.ok(
        "connectors",
        "create",
        name,
        "-c",
        "connector.class=FileSourceConnector",
        "-c",
        f"filename={src}",
        "-c",
        f"connect.topicname=cli-failing-{uid}",
    )

    def failed() -> bool:
        status = cli.json("connectors", "status", name)
        return "FAILED" in [status["connector"]["state"]] + [t["state"] for t in status["tasks"]]

    wait_until(failed, 180, "the connector to fail on invalid UTF-8")
    status = cli.json("connectors", "status", name)
    traces = [status["connector"]["trace"]] + [t["trace"] for t in status["tasks"]]
    trace = next(t for t in traces if t)
    first = trace.strip().splitlines()[0].strip()

    row = next(line for line in cli.ok("connectors", "list").splitlines() if name in line)
    assert "FAILED" in row and first[:40] in row
    shown = cli.ok("connectors", "status", name)
    assert "trace:" in shown and trace.strip().splitlines()[-1].strip() in shown

    # fixed input, `restart`: the connector runs again and its lines reach the topic
    src.write_bytes(b"good line\nnow good too\n")
    topic = f"cli-failing-{uid}"

    def in_topic() -> int:
        topics = {t["name"]: t for t in cli.json("topics", "list")}
        queues = topics[topic]["queues"] if topic in topics else []
        return sum(q["max_offset"] - q["min_offset"] for q in queues)

    out = cli.ok("connectors", "restart", name)
    assert re.fullmatch(
        rf"Requested restart of connector '{name}' \(state now (RESTARTING|RUNNING)\)\.\n", out
    ), out
    wait_until(lambda: cli.state(name) == "RUNNING", 120, "the restarted connector to run")
    wait_until(lambda: in_topic() == 2, 120, "the fixed file's two lines in the topic")
    # one task: the same query starts again from its checkpoint (nothing read twice)
    body = cli.json("connectors", "restart", name, "--task", "0")
    assert body["name"] == name and body["connector"]["state"] in ("RESTARTING", "RUNNING")
    wait_until(lambda: cli.state(name) == "RUNNING", 120, "the restarted task to run")
    with open(src, "ab") as f:
        f.write(b"after the task restart\n")
    wait_until(lambda: in_topic() == 3, 120, "the appended line in the topic, once")
    err = cli.fails(1, "connectors", "restart", name, "--task", "4")
    assert err.startswith("error: 404 ") and "4" in err, err
    cli.ok("connectors", "delete", name)


def test_unknown_connector_is_404_exit_1_one_line(cli: Cli) -> None:
    name = f"cli-missing-{_uid()}"
    for command in ("status", "config", "pause", "resume", "stop", "restart", "delete"):
        err = cli.fails(1, "connectors", command, name)
        assert err.startswith("error: 404 ") and name in err, err
    for command in ("get", "reset"):
        assert cli.fails(1, "connectors", "offsets", command, name).startswith("error: 404 ")
    # --json changes nothing about failures: stdout stays empty
    run = cli("connectors", "status", name, "--json")
    assert (run.code, run.out) == (1, "")


def test_create_conflicts_bad_configs_and_update(cli: Cli, worker: Any) -> None:
    uid = _uid()
    src = Path(worker.tmp) / f"cli-{uid}-in.txt"
    src.write_text("x\n")
    name = f"cli-conflict-{uid}"
    base = ["-c", "connector.class=FileSourceConnector", "-c", f"filename={src}"]
    cli.ok("connectors", "create", name, *base, "-c", f"connect.topicname=t1-{uid}")
    again = [*base, "-c", f"connect.topicname=t1-{uid}"]
    assert cli.fails(1, "connectors", "create", name, *again).startswith("error: 409 ")

    info = cli.json(
        "connectors", "create", name, "--update", *base, "-c", f"connect.topicname=t2-{uid}"
    )
    assert info["config"]["connect.topicname"] == f"t2-{uid}"
    assert cli.json("connectors", "config", name)["connect.topicname"] == f"t2-{uid}"
    out = cli.ok(
        "connectors", "create", name, "--update", *base, "-c", f"connect.topicname=t3-{uid}"
    )
    assert out.startswith(f"Updated connector '{name}'")

    err = cli.fails(1, "connectors", "create", f"cli-noclass-{uid}", "-c", f"filename={src}")
    assert err.startswith("error: 400 ") and "connector.class" in err
    err = cli.fails(
        1,
        "connectors",
        "create",
        f"cli-nosinktopic-{uid}",
        "-c",
        "connector.class=FileSinkConnector",
        "-c",
        f"filename={src}.out",
    )
    assert err.startswith("error: 400 ") and "connect.topicnames" in err
    cli.ok("connectors", "delete", name)


def test_plugins_cluster_and_reload(cli: Cli, worker: Any) -> None:
    plugins = cli.json("plugins", "list")
    classes = {p["class"].rsplit(".", 1)[-1]: p for p in plugins}
    assert classes["FileSourceConnector"]["type"] == "source"
    assert classes["FileSinkConnector"]["type"] == "sink"
    assert {p["type"] for p in cli.json("plugins", "list", "--type", "sink")} == {"sink"}
    table = cli.ok("plugins", "list")
    assert "FileSourceConnector" in table and "FileSinkConnector" in table

    assert cli.ok("plugins", "reload").strip() == "Plugin reload succeeded"
    assert cli.json("plugins", "list") == plugins  # the same plugins after a rescan

    # validation: a missing required key exits 1 and the table names it
    run = cli("plugins", "validate", "FileSourceConnector", "-c", "connect.topicname=t")
    assert run.code == 1 and "filename" in run.out
    assert run.err.startswith("error: ") and "config error" in run.err
    existing = Path(worker.tmp) / f"cli-{_uid()}-valid.txt"
    existing.write_text("x\n")
    valid = cli.ok(
        "plugins",
        "validate",
        "FileSourceConnector",
        "-c",
        f"filename={existing}",
        "-c",
        "connect.topicname=t",
    )
    assert "config is valid" in valid or "0 error" in valid
    # a misspelled optional key is a warning with a "did you mean", not silently valid
    misspelled = cli.ok(
        "plugins",
        "validate",
        "FileSourceConnector",
        "-c",
        f"filename={existing}",
        "-c",
        "connect.topicname=t",
        "-c",
        "max.taks=2",
    )
    assert "config is valid, 1 warning" in misspelled
    assert "did you mean max.tasks?" in misspelled

    assert cli.json("cluster", "info") == ["e2e-worker"]  # standalone: itself alone
    table = cli.ok("cluster", "info")
    assert f"Live workers, as seen by {worker.url}:" in table and "e2e-worker" in table


def test_the_console_entry_point_as_a_subprocess(worker: Any) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sluice.cli", "--url", worker.url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = run("--json", "connectors", "list")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), dict)
    missing = run("connectors", "status", f"cli-nope-{_uid()}")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: 404 ") and missing.stderr.count("\n") == 1

    # piped (not a terminal, no COLUMNS): a long name stays whole on its row, tasks say "task 0:"
    long_name = f"cli-a-connector-with-a-rather-long-name-{_uid()}-" + "x" * 60
    (Path(worker.tmp) / f"{long_name}.txt").write_text("x\n")
    created = run(
        "connectors",
        "create",
        long_name,
        "-c",
        "connector.class=FileSourceConnector",
        "-c",
        f"filename={Path(worker.tmp) / f'{long_name}.txt'}",
        "-c",
        f"connect.topicname=t-{_uid()}",
        "-c",
        "tasks.maxx=1",
    )
    assert created.returncode == 0, created.stderr
    assert "warning: tasks.maxx: unknown key" in created.stderr
    assert "(did you mean tasks.max?)" in created.stderr
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    table = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "--url", worker.url, "connectors", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    [row] = [line for line in table.stdout.splitlines() if long_name in line]
    assert "task 0: " in row
    assert run("connectors", "delete", long_name).returncode == 0
