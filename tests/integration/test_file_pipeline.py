"""File → topic → file on real local Spark: byte-identical, follows appends, several tasks."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.sdk import ConfigException
from tests.conftest import wait_until, whole_lines

pytestmark = pytest.mark.spark


def _source(path: Path, topic: str = "lines", **extra: str) -> dict[str, str]:
    return {
        "connector.class": "FileSourceConnector",
        "filename": str(path),
        "connect.topicname": topic,
        **extra,
    }


def _sink(path: Path, topics: str = "lines", **extra: str) -> dict[str, str]:
    return {
        "connector.class": "FileSinkConnector",
        "filename": str(path),
        "connect.topicnames": topics,
        **extra,
    }


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _no_failure(runner) -> None:
    for running in runner.running.values():
        assert running.query.exception() is None, running.query.exception()


def _wait_identical(runner, src: Path, dst: Path, timeout: float = 180) -> None:
    def done() -> bool:
        _no_failure(runner)
        return _size(dst) >= _size(src)

    wait_until(done, timeout, f"{dst} to reach {_size(src)} bytes")
    assert dst.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("fused", ["true", "false"])
def test_100k_lines_arrive_byte_identical(runner, tmp_path: Path, fused: str) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    with open(src, "w", encoding="utf-8", newline="") as f:
        for i in range(100_000):
            # empty lines, CRLF, 4-byte emoji and a long line all have to survive unchanged
            line = "" if i % 997 == 0 else f"{i}\tline é 🚀 {'x' * (i % 50)}"
            f.write(line + ("\r\n" if i % 1000 == 1 else "\n"))
        f.write("y" * 200_000 + "\n")
    runner.start("src", _source(src, **{"read.max.rows": "30000", "pipeline.fused": fused}))
    runner.start("dst", _sink(dst, **{"pipeline.fused": fused, "max.tasks": "2"}))
    _wait_identical(runner, src, dst)
    # positions mirror what the source committed. While it runs, Spark commits a batch's end
    # when it plans the next one, so the store may lag by a batch; a stopped source's are
    # synced from its checkpoint: exactly the byte offset after the last line.
    runner.stop("src")
    key = json.dumps({"filename": str(src)}, sort_keys=True, separators=(",", ":"))
    assert runner.positions.load("src") == {key: {"position": _size(src)}}


def _pipeline_in_step(runner, tmp_path: Path, text: str) -> tuple[Path, Path]:
    """Start file source + file sink over `text` and wait until the sink caught up."""
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text(text)
    runner.start("src", _source(src))
    runner.start("dst", _sink(dst))
    _wait_identical(runner, src, dst)
    return src, dst


def test_lines_appended_while_running_reach_the_sink(runner, tmp_path: Path) -> None:
    src, dst = _pipeline_in_step(runner, tmp_path, "".join(f"first {i}\n" for i in range(1000)))
    with open(src, "a") as f:
        f.write("".join(f"second {i}\n" for i in range(500)))
        f.write("half a line")  # no newline yet: must wait
        f.flush()
    wait_until(lambda: b"second 499\n" in dst.read_bytes(), 60, "appended lines")
    assert b"half a line" not in dst.read_bytes()
    with open(src, "a") as f:
        f.write(" completed\n")
    _wait_identical(runner, src, dst)


def _files_on_two_queues(tmp_path: Path) -> list[Path]:
    """Three input files whose records do not all go to one queue of the topic's 8: a keyless
    record goes to its source partition's hash modulo the queues (`sluice.bus.spark`), and a
    file's partition is its path, under a random folder (1 run in 64 had one queue only)."""
    from sluice.engine.frames import partition_hash

    names = (tmp_path / f"in{i}.txt" for i in itertools.count())
    files = [next(names) for _ in range(3)]
    while len({partition_hash({"filename": str(f)}) % 8 for f in files}) < 2:
        files = [*files[1:], next(names)]
    return files


def test_several_sources_and_a_sink_with_three_tasks(runner, tmp_path: Path) -> None:
    files = _files_on_two_queues(tmp_path)
    for i, path in enumerate(files):
        path.write_text("".join(f"file{i} line {n}\n" for n in range(5000)))
    for i, path in enumerate(files):
        runner.start(f"src{i}", _source(path, topic="shared", **{"max.tasks": "2"}))
    # The sink starts once the topic holds everything, so its first micro-batch spans several
    # queues (a sink that ran alongside could see one source's queue per batch, and one task).
    wait_until(lambda: runner.bus.count("shared") == 15000, 180, "15000 records in the topic")
    out = tmp_path / "out.jsonl"
    runner.start(
        "dst",
        {
            "connector.class": "sluice.testing.JsonLinesSink",
            "path": str(out),
            "connect.topicnames": "shared",
            "max.tasks": "3",
        },
    )

    def rows() -> list[dict]:
        _no_failure(runner)
        return [json.loads(line) for line in whole_lines(out)]

    wait_until(lambda: len(rows()) >= 15000, 180, "15000 records in the sink")
    got = rows()
    assert len(got) == 15000
    for i in range(3):
        mine = [r["value"] for r in got if r["value"].startswith(f"file{i} ")]
        assert mine == [f"file{i} line {n}" for n in range(5000)]  # one file stays in order
    queues = {r["partition"]["queueId"] for r in got}
    tasks = {r["task"] for r in got}
    assert len(queues) >= 2 and len(tasks) >= 2  # spread over queues and sink tasks


def test_restarted_sink_does_not_duplicate(runner, tmp_path: Path) -> None:
    src, dst = _pipeline_in_step(runner, tmp_path, "".join(f"row {i}\n" for i in range(2000)))
    runner.stop("dst")
    with open(src, "a") as f:
        f.write("".join(f"later {i}\n" for i in range(100)))
    runner.start("dst", _sink(dst))
    _wait_identical(runner, src, dst)


def test_poll_only_source_acknowledges_after_commit(runner, tmp_path: Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    for i in range(20):
        (queue / f"{i:03d}.msg").write_text(f"message {i}")
    dst = tmp_path / "out.txt"
    runner.start(
        "poll",
        {
            "connector.class": "sluice.testing.DirectoryQueueSource",
            "queue.dir": str(queue),
            "connect.topicname": "msgs",
        },
    )
    runner.start("dst", _sink(dst, "msgs"))
    wait_until(
        lambda: _no_failure(runner) or (_size(dst) and dst.read_text().count("\n") == 20),
        120,
        "20 messages",
    )
    assert sorted(dst.read_text().splitlines()) == sorted(f"message {i}" for i in range(20))
    # acknowledged (deleted) only after their micro-batch committed; commit lags one batch
    (queue / "999.msg").write_text("one more")
    wait_until(lambda: not any(p.name < "999" for p in queue.glob("*.msg")), 60, "acks")


def test_non_utf8_line_fails_the_source_naming_line_and_offset(runner, tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes(b"good 1\ngood 2\nbad \xff\xfe line\ngood 4\n")
    runner.start("src", _source(src, **{"read.max.rows": "2"}))
    runner.start("dst", _sink(dst))
    query = runner.running["src"].query
    wait_until(lambda: query.exception() is not None, 120, "the source to fail")
    cause, trace = runner.running["src"].failure()
    assert cause == (
        f"ConnectException: file {str(src)!r}: line 3 (byte offset 14) is not valid UTF-8 "
        "(convert the file to UTF-8; the line was not delivered)"
    )
    assert cause.split(": ", 1)[1] in trace
    # the lines before it were delivered, nothing after it was skipped over
    wait_until(lambda: _size(dst) == 14, 60, "the two good lines")
    assert dst.read_bytes() == b"good 1\ngood 2\n"


def test_bad_configs_name_the_key(runner, tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match=r"filename: required key is missing"):
        runner.start("a", {"connector.class": "FileSourceConnector", "connect.topicname": "t"})
    with pytest.raises(ConfigException, match=r"filename: file '.*nope.txt' does not exist"):
        runner.start("b", _source(tmp_path / "nope.txt"))
    with pytest.raises(ConfigException, match=r"filename: .* is a directory"):
        runner.start("c", _source(tmp_path))
    (tmp_path / "x.txt").write_text("x\n")
    with pytest.raises(ConfigException, match=r"max.tasks: expected an integer, got 'many'"):
        runner.start("d", _source(tmp_path / "x.txt", **{"max.tasks": "many"}))
    with pytest.raises(ConfigException, match=r"read.max.rows: must be at least 1"):
        runner.start("e", _source(tmp_path / "x.txt", **{"read.max.rows": "0"}))
    with pytest.raises(ConfigException, match=r"filename: value of type dict is not supported"):
        runner.start(
            "f",
            {
                "connector.class": "FileSourceConnector",
                "filename": {"a": 1},
                "connect.topicname": "t",
            },
        )
    with pytest.raises(ConfigException, match=r"connector.class: unknown connector class 'Nope'"):
        runner.start("g", {"connector.class": "Nope"})
    with pytest.raises(ConfigException, match=r"connect.topicnames: required key is missing"):
        runner.start("h", {"connector.class": "FileSinkConnector", "filename": str(tmp_path / "o")})
    with pytest.raises(ConfigException, match=r"filename: directory .* does not exist"):
        runner.start("i", _sink(tmp_path / "no" / "dir" / "o.txt"))
    assert runner.running == {}


# Run in a process of its own by test_unreadable_file_is_named: the connector's check and the
# task's first read of a file it may not read, each error's text printed as JSON.
_UNREADABLE_CHILD = """
import errno, json, sys
from sluice.connectors.file import FileSourceConnector
from sluice.connectors.file.source import FileSourceTask
from sluice.sdk import ConnectException, ReadLimit

path = sys.argv[1]
seen = {}
try:
    open(path, "rb").close()
    seen["open"] = "readable"
except OSError as exc:
    seen["open"] = errno.errorcode[exc.errno]
try:
    FileSourceConnector().validate({"filename": path, "connect.topicname": "t"})
except ConnectException as exc:
    seen["validate"] = str(exc)
task = FileSourceTask()
task.start({"filename": path, "connect.topicname": "t"})
try:
    task.latest({"filename": path}, None, ReadLimit())
except ConnectException as exc:
    seen["latest"] = str(exc)
print(json.dumps(seen))
"""


def _without_root_file_powers() -> list[str]:
    """A command prefix that runs a program without what lets root read any file.

    As root, `setpriv` drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the inheritable and
    bounding sets, so the program it starts has them in no set: file modes apply to it as to
    anyone. As another user nothing is needed."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to run the source without root's powers")
    drop = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}"]


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    """A file the source may not read: EACCES for real, also when the suite runs as root."""
    path = tmp_path / "secret.txt"
    path.write_text("x\n")
    path.chmod(0)
    done = subprocess.run(
        [*_without_root_file_powers(), sys.executable, "-c", _UNREADABLE_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # the precondition: this process really is refused the file, so what follows tests EACCES
    assert seen["open"] == "EACCES", seen
    assert seen["validate"] == f"filename: file {str(path)!r} is not readable (permission denied)"
    assert seen["latest"] == f"cannot read file {str(path)!r}: Permission denied"
