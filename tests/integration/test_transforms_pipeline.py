"""Transforms in running pipelines: SQL on the source side and the sink side, Python fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.sdk import ConfigException
from tests.conftest import wait_until, whole_lines

pytestmark = pytest.mark.spark


def _lines(runner, path: Path) -> list[str]:
    for r in runner.running.values():
        assert r.failure() is None, r.failure()
    return whole_lines(path)


def test_sql_transform_filters_and_reshapes_on_the_source_side(runner, tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"# comment {i}\nrow {i}\n" for i in range(300)))
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "t",
            "transforms": "s",
            "transforms.s.class": "sql",
            "transforms.s.query": "SELECT topic, key, "
            "concat(upper(value), ' (', length(value), ')') AS value, timestamp, headers, "
            "partition_hash FROM records WHERE value NOT LIKE '#%'",
        },
    )
    runner.start(
        "dst",
        {"connector.class": "FileSinkConnector", "filename": str(dst), "connect.topicnames": "t"},
    )
    wait_until(lambda: len(_lines(runner, dst)) >= 300, 120, "300 transformed lines")
    assert _lines(runner, dst) == [f"ROW {i} ({len(f'row {i}')})" for i in range(300)]


def test_router_then_sql_on_the_sink_side_and_python_fallback(runner, tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"{w}\n" for w in ["abc", "drop me", "hello", "xyz"]))
    runner.start(
        "src",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": "raw-words",
            "transforms": "route,py",
            "transforms.route.class": "org.apache.rocketmq.connect.transforms.RegexRouter",
            "transforms.route.regex": "raw-(.*)",
            "transforms.route.replacement": "clean-$1",
            "transforms.py.class": "tests.integration.python_transforms.ReverseValue",
        },
    )
    runner.start(
        "dst",
        {
            "connector.class": "FileSinkConnector",
            "filename": str(dst),
            "connect.topicnames": "clean-words",
            "transforms": "s",
            "transforms.s.class": "sql",
            "transforms.s.query": "SELECT topic, key, concat(value, '|', headers['reversed'], '|', "
            "topic) AS value, timestamp, headers, queue_id, queue_offset FROM records",
        },
    )
    wait_until(lambda: len(_lines(runner, dst)) >= 3, 120, "3 routed lines")
    assert _lines(runner, dst) == [
        "cba|yes|clean-words",
        "olleh|yes|clean-words",
        "zyx|yes|clean-words",
    ]


def test_transform_config_errors_name_the_key(runner, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    base = {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": "t",
    }
    cases = [
        ({"transforms": "a"}, r"transforms.a.class: required key is missing"),
        (
            {"transforms": "a,a", "transforms.a.class": "sql"},
            r"transforms: names a transform twice",
        ),
        ({"transforms": "a", "transforms.a.class": "NoSuch"}, r"unknown transform class 'NoSuch'"),
        ({"transforms": "a", "transforms.a.class": "sql"}, r"transforms.a.query: required key"),
        (
            {
                "transforms": "a",
                "transforms.a.class": "sql",
                "transforms.a.query": "SELEC nonsense",
            },
            r"transforms.a: invalid SQL",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.class": "sql",
                "transforms.a.query": "SELECT value FROM records",
            },
            r"transforms.a.query: the query must keep the record columns; missing: topic, key",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.class": "sql",
                "transforms.a.query": "SELECT topic, key, nope AS value, timestamp, headers "
                "FROM records",
            },
            r"transforms.a: invalid SQL: .*nope",
        ),
        (
            {"transforms": "a", "transforms.a.class": "RegexRouter", "transforms.a.regex": "x"},
            r"transforms.a.replacement: required key is missing",
        ),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigException, match=message):
            runner.start("src", {**base, **extra})
    assert runner.running == {}
