"""The SDK tutorial (docs/sdk.md): its connector and its harness test run as printed, without
Spark, against a real HTTP server on loopback; the page must show exactly this code."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from sluice.sdk import Delivery, ReadLimit, RetriableException
from sluice.testing import SourceHarness

DOCS = Path(__file__).resolve().parents[2] / "docs"
spec = importlib.util.spec_from_file_location("http_feed", DOCS / "examples" / "http_feed.py")
http_feed = importlib.util.module_from_spec(spec)
sys.modules["http_feed"] = http_feed  # pickled tasks refer to their class by module name
spec.loader.exec_module(http_feed)


@pytest.fixture
def feed() -> Iterator[SimpleNamespace]:
    """A feed server: `feed.items` is what it serves, `feed.url` where."""
    items: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            after, limit = int(query["after"][0]), int(query["limit"][0])
            body = json.dumps([i for i in items if i["id"] > after][:limit]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(items=items, url=f"http://127.0.0.1:{server.server_port}/feed")
    server.shutdown()
    server.server_close()


def test_feed_source_reads_resumes_and_appends(feed) -> None:
    from http_feed import HttpFeedSource, HttpFeedTask

    feed.items.extend({"id": n, "text": f"item {n}"} for n in range(1, 6))
    config = {"feed.url": feed.url, "connect.topicname": "items"}
    harness = SourceHarness(HttpFeedTask, config, limit=ReadLimit(max_rows=2))
    assert [r.value for r in harness.next_batch()] == [
        '{"id": 1, "text": "item 1"}',
        '{"id": 2, "text": "item 2"}',
    ]
    assert harness.positions == {'{"feed":"' + feed.url + '"}': {"id": 2}}
    harness = harness.restart()  # a new task resumes after item 2: nothing twice
    assert [r.offset for r in harness.drain()] == [{"id": 3}, {"id": 4}, {"id": 5}]
    feed.items.append({"id": 9, "text": "late"})
    assert [r.offset for r in harness.drain()] == [{"id": 9}]
    assert HttpFeedSource.delivery(config) == "exactly-once"  # a ReplayableSourceTask


def test_the_page_shows_the_code_that_runs() -> None:
    page = (DOCS / "sdk.md").read_text()
    assert (DOCS / "examples" / "http_feed.py").read_text() in page
    assert inspect.getsource(test_feed_source_reads_resumes_and_appends) in page


def test_an_unreachable_feed_is_retriable_and_a_bad_config_names_its_key() -> None:
    task = http_feed.HttpFeedTask()
    task.start({"feed.url": "http://127.0.0.1:9/feed", "connect.topicname": "t"})
    with pytest.raises(RetriableException, match=r"feed http://127.0.0.1:9/feed: .*refused"):
        task.latest({"feed": task.url}, None, ReadLimit())
    problems = http_feed.HttpFeedSource().problems({})
    assert [p.key for p in problems] == ["feed.url", "connect.topicname"]
    assert http_feed.HttpFeedSource.delivery({}) is Delivery.EXACTLY_ONCE
