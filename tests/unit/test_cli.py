"""The `sluice` CLI's own logic: input parsing, table rendering, error lines and exit codes.

No worker is involved: bodies are given as dicts, and "unreachable" is a real closed local port.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sluice.cli import main
from sluice.cli._errors import ServerError, UsageProblem, WorkerUnreachable, one_line
from sluice.cli._inputs import (
    load_config_file,
    merge_config,
    parse_assignments,
    parse_offsets,
    parse_properties,
)
from sluice.cli._render import (
    config_table,
    connectors_table,
    offsets_table,
    plugins_table,
    render_text,
    status_view,
    topics_table,
    validation_view,
    workers_table,
)


def _closed_port() -> int:
    # Bind then close: nothing listens there for the rest of the test (refused, not filtered).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _status(name: str, state: str = "RUNNING", tasks: list[dict] | None = None) -> dict:
    return {
        "name": name,
        "connector": {"state": state, "trace": None, "workerId": "w1"},
        "tasks": tasks if tasks is not None else [{"id": 0, "state": state, "trace": None}],
        "type": "source",
    }


# -- -c key=value and config files --------------------------------------------------------------


def test_assignments_split_at_the_first_equals_and_the_last_one_wins() -> None:
    assert parse_assignments(["a=1", "b=x=y", "c=", " d =v", "a=2"]) == {
        "a": "2",
        "b": "x=y",
        "c": "",
        "d": "v",
    }


@pytest.mark.parametrize("bad", ["novalue", "=v", "  =v"])
def test_assignment_without_key_or_equals_is_a_usage_problem(bad: str) -> None:
    with pytest.raises(UsageProblem, match=r"-c expects key=value") as info:
        parse_assignments([bad])
    assert info.value.exit_code == 2


def test_properties_follow_java_rules() -> None:
    text = (
        "# comment\n"
        "! also a comment\n"
        "\n"
        "connector.class=FileSourceConnector\n"
        "  filename : /tmp/in.txt\n"
        "connect.topicname fileTopic\n"
        "long.value = first \\\n"
        "     second\n"
        "escaped\\=key=a\\tb\\u00e9\n"
        "empty=\n"
        "windows=C:\\\\dir\n"
        "dup=1\n"
        "dup=2\n"
    )
    assert parse_properties(text) == {
        "connector.class": "FileSourceConnector",
        "filename": "/tmp/in.txt",
        "connect.topicname": "fileTopic",
        "long.value": "first second",
        "escaped=key": "a\tbé",
        "empty": "",
        "windows": "C:\\dir",
        "dup": "2",
    }


def test_properties_errors_name_the_file_and_line() -> None:
    with pytest.raises(UsageProblem, match=r"c.properties, line 2: malformed \\u escape"):
        parse_properties("a=1\nb=\\u12x4\n", source="c.properties")
    with pytest.raises(UsageProblem, match=r"line 1: an entry has no key"):
        parse_properties("=value\n", source="c.properties")


def test_config_files_by_suffix_or_content(tmp_path: Path) -> None:
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps({"max.tasks": 2, "flag": True, "filename": "a.txt"}))
    assert load_config_file(str(as_json)) == {"max.tasks": "2", "flag": "true", "filename": "a.txt"}

    post_body = tmp_path / "create.json"
    post_body.write_text(json.dumps({"name": "x", "config": {"filename": "a.txt"}}))
    assert load_config_file(str(post_body)) == {"filename": "a.txt"}

    props = tmp_path / "c.properties"
    props.write_text("filename=a.txt\n")
    assert load_config_file(str(props)) == {"filename": "a.txt"}

    sniffed = tmp_path / "c.txt"
    sniffed.write_text('  {"filename": "b.txt"}')
    assert load_config_file(str(sniffed)) == {"filename": "b.txt"}

    # -c entries are applied over the file's
    assert merge_config(str(props), ["filename=c.txt", "x=1"]) == {"filename": "c.txt", "x": "1"}


def test_config_file_problems_are_usage_problems(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match=r"file not found: .*nope.json"):
        load_config_file(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageProblem, match=r"bad.json is not valid JSON"):
        load_config_file(str(bad))
    nested = tmp_path / "nested.json"
    nested.write_text('{"a": {"b": 1}}')
    with pytest.raises(UsageProblem, match=r"the value of 'a' must be a string, number or bool"):
        load_config_file(str(nested))
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(UsageProblem, match=r"must hold a JSON object"):
        load_config_file(str(listed))
    with pytest.raises(UsageProblem, match=r"is a directory"):
        load_config_file(str(tmp_path))


def test_offsets_inline_file_and_bare_list(tmp_path: Path) -> None:
    doc = {"offsets": [{"partition": {"filename": "a"}, "offset": {"position": 0}}]}
    assert parse_offsets(json.dumps(doc)) == doc
    assert parse_offsets(json.dumps(doc["offsets"])) == doc
    path = tmp_path / "o.json"
    path.write_text(json.dumps({"offsets": [{"partition": {"f": "a"}, "offset": None}]}))
    assert parse_offsets(str(path))["offsets"][0]["offset"] is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"x": 1}', r'must be \{"offsets"'),
        ('{"offsets": [1]}', r"offsets\[0\] must be an object"),
        ('{"offsets": [{"offset": {}}]}', r"offsets\[0\]\.partition must be an object"),
        ('{"offsets": [{"partition": {}}]}', r"offsets\[0\] has no 'offset'"),
        ('{"offsets": [{"partition": {}, "offset": 5}]}', r"offset must be an object or null"),
    ],
)
def test_bad_offsets_documents_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(UsageProblem, match=message):
        parse_offsets(text)


# -- rendering ----------------------------------------------------------------------------------


def test_connectors_table_shows_states_tasks_and_the_first_trace_line() -> None:
    failed_task = {"id": 1, "state": "FAILED", "trace": "ValueError: bad line 7\n  at x\n  at y"}
    expanded = {
        "src": {"status": _status("src")},
        "sink": {
            "status": {
                **_status("sink", "RUNNING", [{"id": 0, "state": "RUNNING"}, failed_task]),
                "type": "sink",
            }
        },
    }
    text = render_text(connectors_table(expanded))
    lines = [line.strip() for line in text.splitlines()]
    header = next(line for line in lines if "NAME" in line)
    assert header.split() == ["NAME", "TYPE", "STATE", "TASKS", "TRACE"]
    sink_row = next(line for line in lines if line.startswith("sink"))
    assert sink_row.split()[:6] == ["sink", "sink", "RUNNING", "task", "0:", "RUNNING"]
    assert "task 1: FAILED" in text
    assert "task 1: ValueError: bad line 7" in text
    assert "at x" not in text  # only the first line in a table
    assert lines.index(sink_row) < next(i for i, ln in enumerate(lines) if ln.startswith("src"))
    assert render_text(connectors_table({})).strip() == "No connectors."
    healthy = render_text(connectors_table({"src": {"status": _status("src")}}))
    assert "TRACE" not in healthy  # the column only appears when something failed
    long_trace = {"id": 0, "state": "FAILED", "trace": "E" * 500}
    text = render_text(connectors_table({"x": {"status": _status("x", tasks=[long_trace])}}))
    assert "E" * 98 + "…" in text.replace("\n", "").replace(" ", "")


def test_status_view_shows_every_trace_in_full() -> None:
    status = _status("src", "FAILED", [{"id": 0, "state": "FAILED", "trace": "Boom\n  at a\n"}])
    status["connector"]["trace"] = "Connector broke\n  at b"
    text = render_text(status_view(status))
    assert "Connector src" in text and "state FAILED" in text and "worker w1" in text
    assert "Connector trace:\nConnector broke\n  at b" in text
    assert "Task 0 trace:\nBoom\n  at a" in text
    assert "No tasks." in render_text(status_view(_status("x", tasks=[])))


def test_values_from_the_worker_are_never_read_as_markup() -> None:
    text = render_text(config_table({"transforms.a.regex": "[bold]x[/bold]", "b": ""}))
    assert "[bold]x[/bold]" in text
    assert text.index("b ") < text.index("transforms.a.regex")  # sorted by key


def test_offsets_plugins_topics_workers_and_validation() -> None:
    offsets = {"offsets": [{"partition": {"filename": "/a"}, "offset": {"position": 42}}]}
    text = render_text(offsets_table(offsets))
    assert '{"filename": "/a"}' in text and '{"position": 42}' in text
    assert render_text(offsets_table({"offsets": []})).strip() == "No offsets stored."

    plugins = [
        {"class": "x.Cast", "type": "transform", "version": "0.1.0", "aliases": []},
        {"class": "x.FileSink", "type": "sink", "version": "0.1.0", "aliases": ["B", "A", "o.a.B"]},
        {"class": "x.FileSource", "type": "source", "version": "0.1.0", "aliases": []},
    ]
    rows = [line.split() for line in render_text(plugins_table(plugins)).splitlines()]
    # connectors first (sources, then sinks), then transforms; dotted aliases are only counted
    order = [
        rows.index(["x.FileSource", "source", "0.1.0"]),
        rows.index(["x.FileSink", "sink", "0.1.0", "A,", "B", "(+1", "more)"]),
        rows.index(["x.Cast", "transform", "0.1.0"]),
    ]
    assert order == sorted(order)

    topics = [
        {
            "name": "t",
            "queues": [
                {"queue_id": 1, "min_offset": 3, "max_offset": 10},
                {"queue_id": 0, "min_offset": 0, "max_offset": 12},
            ],
        },
        {"name": "empty", "queues": []},
    ]
    rows = [line.split() for line in render_text(topics_table(topics)).splitlines()]
    assert ["t", "0", "0", "12", "12"] in rows
    assert ["1", "3", "10", "7"] in rows  # the topic name only on its first queue's row
    assert ["empty", "-", "-", "-", "-"] in rows

    text = render_text(workers_table(["w2", "w1"], url="http://h:1"))
    assert text.index("w1") < text.index("w2") and "http://h:1" in text

    result = {
        "name": "FileSourceConnector",
        "error_count": 1,
        "configs": [
            {
                "definition": {"name": "filename", "type": "STRING", "required": True},
                "value": {"name": "filename", "value": None, "errors": ["filename is required"]},
            },
            {
                "definition": {"name": "max.tasks", "type": "INT", "required": False},
                "value": {"name": "max.tasks", "value": "1", "errors": []},
            },
        ],
    }
    text = render_text(validation_view(result))
    assert "FileSourceConnector: 1 error" in text and "filename is required" in text
    assert "max.tasks" not in text
    assert "max.tasks" in render_text(validation_view(result, show_all=True))
    warned = {
        "name": "FileSinkConnector",
        "error_count": 0,
        "warning_count": 1,
        "configs": [
            {
                "definition": {"name": "filname", "type": "string", "required": False},
                "value": {
                    "name": "filname",
                    "value": "x",
                    "errors": [],
                    "warnings": ["filname: unknown key (did you mean filename?)"],
                },
            }
        ],
    }
    text = render_text(validation_view(warned))
    assert "FileSinkConnector: config is valid, 1 warning" in text
    assert "warning: filname: unknown key (did you mean filename?)" in text


# -- errors and exit codes ----------------------------------------------------------------------


def test_server_errors_carry_the_suggestion() -> None:
    body = {"error_code": 409, "message": "mode: cannot change", "suggestion": "stop, reset"}
    assert ServerError.from_response(httpx.Response(409, json=body)).message == (
        "409 mode: cannot change (stop, reset)"
    )


def test_server_errors_of_both_faces_become_one_line() -> None:
    v1 = httpx.Response(404, json={"error_code": 404, "message": "connector 'x' not found"})
    assert ServerError.from_response(v1).message == "404 connector 'x' not found"
    rocketmq = httpx.Response(409, json={"errorCode": 409, "message": "exists\nreally"})
    error = ServerError.from_response(rocketmq)
    assert (error.message, error.error_code, error.exit_code) == ("409 exists; really", 409, 1)
    html = httpx.Response(502, text="<html>Bad gateway</html>\n<body/>")
    assert ServerError.from_response(html).message == "502 <html>Bad gateway</html>"
    assert ServerError.from_response(httpx.Response(500)).message == "500 Internal Server Error"
    assert one_line("a\n\n  b  \n") == "a; b"
    assert WorkerUnreachable("http://h:1", "connection refused").exit_code == 3


def test_unreachable_worker_exits_3_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    assert main(["--url", url, "connectors", "list"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: cannot reach the worker at {url} (connection refused)\n"
    # the same with --json, and with the URL from the environment
    assert main(["--url", url, "topics", "list", "--json"]) == 3
    assert capsys.readouterr().err.count("\n") == 1


def test_url_from_environment(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("SLUICE_URL", url)
    assert main(["cluster", "info"]) == 3
    assert f"cannot reach the worker at {url} " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["connectors", "lst"], "No such command 'lst'"),
        (["connectors", "status"], "Missing argument"),
        (["connectors", "restart", "x", "--task", "-1"], "Invalid value for '--task'"),
        (["--url", "localhost:8082", "connectors", "list"], "invalid --url 'localhost:8082'"),
        (["connectors", "create", "x"], "no config given"),
        (["connectors", "create", "x", "-c", "novalue"], "-c expects key=value"),
        (["connectors", "offsets", "set", "x", "{oops"], "not valid JSON"),
        (["worker", "-c", "/nonexistent/worker.conf"], "does not exist"),
        (["worker", "/nonexistent/worker.conf"], "does not exist"),
        (["worker"], "no worker config: sluice worker -c FILE (or sluice worker FILE)"),
        (["worker", "-c", "/etc/hostname", "/etc/passwd"], "two worker configs given"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert out == ""


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("worker", "connectors", "plugins", "cluster", "topics"):
        assert command in out
    assert main(["connectors", "offsets", "--help"]) == 0
    assert "reset" in capsys.readouterr().out


def test_client_commands_do_not_import_the_runtime() -> None:
    # A fresh interpreter, so nothing another test imported can hide an eager import.
    code = (
        "import sys, sluice.cli\n"
        "from sluice.cli import main\n"
        "main(['--help'])\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('sluice.runtime', "
        "'sluice.engine', 'sluice.rest', 'pyspark', 'fastapi')))\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_worker_command_returns_run_workers_exit_code(tmp_path: Path) -> None:
    # A broken worker config is reported by run_worker itself (exit 2) before Spark starts;
    # this proves `sluice worker` passes the path through and returns the worker's exit code.
    conf = tmp_path / "worker.conf"
    conf.write_text("httpPort=not-a-number\n")
    for given in (["-c", str(conf)], [str(conf)]):  # as connect-standalone.sh takes it too
        done = subprocess.run(
            [sys.executable, "-m", "sluice.cli", "worker", *given],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert "httpPort" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_worker_that_never_answers_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    # A socket that accepts connections but never replies: a hung worker, for real.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert main(["--url", url, "--timeout", "0.3", "connectors", "pause", "x"]) == 3
    err = capsys.readouterr().err
    assert err == (
        f"error: the worker at {url} did not answer PUT /v1/connectors/x/pause within 0.3s; "
        "it may still complete it (see --timeout)\n"
    )
