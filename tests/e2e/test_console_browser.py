"""The web console in a real browser: Debian's headless Chromium driven by Playwright
(tests/e2e/browser.py).

The test creates a file source from the form: the class picker shows short names grouped into
sources and sinks with a one-line summary; the form asks `name` and `connector.class` once,
shows secrets as password inputs and defaults as typed (`true`); Validate marks a problem far
down the form, scrolls to it and focuses it, then says the fixed config is valid; a missing
required key is shown beside its field. It sees the source in the list, pauses and resumes a
sink from its page, restarts it, reads its dead letters with their `__connect.errors.*`
headers, and resets the offsets of the stopped sink. On the way: the list's throughput and lag
sparklines (from /metrics samples kept in the browser), the sink's page reached and paused by
keyboard only, a new page opening at its top, a long failure line wrapped, the topics page (one
row per topic, its queues on expand), the cluster page, and Delete from a connector's page.
A worker with `rest.auth=basic`: a reader sees the list and is refused a pause, an admin
pauses; a browser without credentials is challenged for them. A worker with
`rest.auth=token`: the console asks for a token, refuses a wrong one, shows the list once
logged in by keyboard, and forgets the token on "Log out". The cluster page of a multi-worker
cluster is tested in test_distributed.
Screenshots go to $SLUICE_ARTIFACTS (default tests/artifacts/console/).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import wait_until
from tests.e2e.browser import ARTIFACTS, chromium, new_page, screenshot
from tests.e2e.secured import ADMIN, READER
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def page(browser) -> object:
    return new_page(browser)


def _count(worker: WorkerProcess, topic: str) -> int:
    response = worker.get(f"/v1/topics/{topic}")
    if response.status_code == 404:
        return 0
    return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def _run_id(worker: WorkerProcess, name: str) -> str | None:
    """The id of the connector's current query start: a restart changes it."""
    return worker.get(f"/v1/connectors/{name}/progress").json()["run_id"]


def test_console_create_list_pause_resume_dead_letters_reset(
    worker: WorkerProcess, page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    shot = lambda name: screenshot(page, name)  # noqa: E731
    source_file = tmp_path / "in.txt"
    source_file.write_text("alpha\nbeta\ngamma\n")  # plain text: a JSON sink dead-letters it

    # the class picker: short names grouped, each with its summary; the value is the class
    page.goto(worker.url + "/ui/#/new")
    sources = page.locator("#plugin optgroup[label^='Sources'] option")
    file_source = sources.filter(has_text="FileSourceConnector")
    expect(file_source.first).to_have_text(
        "FileSourceConnector — Streams the lines of one file into a topic, following appends."
    )
    expect(file_source.first).to_have_attribute(
        "value", "sluice.connectors.file.source.FileSourceConnector"
    )
    sinks = page.locator("#plugin optgroup[label^='Sinks'] option")
    expect(sinks.filter(has_text="JdbcSinkConnector")).to_have_count(1)
    expect(sources.filter(has_text="JdbcSinkConnector")).to_have_count(0)
    assert not page.locator("#plugin option").filter(has_text="sluice.connectors").count()

    # a secret is a password input
    page.select_option("#plugin", "sluice.connectors.jdbc.sink.JdbcSinkConnector")
    expect(page.locator("[id='f-connection.password']")).to_have_attribute("type", "password")
    shot("0-class-picker-and-password")

    page.select_option("#plugin", "sluice.connectors.file.source.FileSourceConnector")
    page.wait_for_selector("#f-filename")
    expect(page.locator("[id='f-connection.password']")).to_have_count(0)
    # asked once: no second name field, no connector.class field; defaults as typed
    expect(page.locator("#create input[name='name']")).to_have_count(1)
    expect(page.locator("[id='f-connector.class']")).to_have_count(0)
    expect(page.locator("[id='f-pipeline.fused']")).to_have_attribute("placeholder", "true")

    # Validate: a problem far down the form is scrolled to, marked and focused
    page.fill("#f-name", "uiSource")
    page.fill("[id='f-connect.topicname']", "uiTopic")
    page.fill("#f-filename", str(source_file))
    late = page.locator("[id='f-restart.transient.max.attempts']")
    late.fill("many")
    page.evaluate("window.scrollTo(0, 0)")
    assert not late.evaluate("el => el.getBoundingClientRect().top < window.innerHeight")
    page.click("#validate")
    expect(page.locator("[id='e-restart.transient.max.attempts']")).not_to_be_empty()
    expect(late).to_be_focused()
    expect(late).to_have_attribute("aria-invalid", "true")
    expect(late).to_be_in_viewport()
    expect(page.locator("#flash")).to_contain_text("1 problem(s)")
    shot("1-validate-marks-the-field")
    late.fill("")
    page.click("#validate")
    expect(page.locator("#flash")).to_have_text("The config is valid.")
    expect(late).not_to_have_attribute("aria-invalid", "true")

    # a missing required key is shown beside its field
    page.fill("#f-filename", "")
    page.click("#submit")
    expect(page.locator("#e-filename")).to_contain_text("filename")
    expect(page.locator("#f-filename")).to_be_focused()
    shot("1-validation-error")
    page.fill("#f-filename", str(source_file))
    page.click("#submit")
    page.wait_for_url("**/#/connector/uiSource")
    expect(page.locator("h1")).to_contain_text("uiSource")
    wait_until(lambda: _count(worker, "uiTopic") == 3, what="3 records from the form's source")

    # a sink that dead-letters every record (the lines are not JSON)
    sink = {
        "connector.class": "FileSinkConnector",
        "filename": str(tmp_path / "out.txt"),
        "connect.topicnames": "uiTopic",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": "uiTopic-dlq",
    }
    response = worker.request("POST", "/connectors/uiSink", content=json.dumps(sink))
    assert response.status_code == 200, response.text
    wait_until(lambda: _count(worker, "uiTopic-dlq") == 3, what="3 dead letters")

    # the list shows both with their state
    page.goto(worker.url + "/ui/#/")
    rows = page.locator("#connectors tbody tr")
    expect(rows.filter(has_text="uiSource")).to_contain_text("RUNNING")
    expect(rows.filter(has_text="uiSink")).to_contain_text("RUNNING")

    # live figures: throughput and lag sparklines from /metrics samples kept in the browser
    def peak(name: str, kind: str) -> float:
        spark = page.locator(f"td.live[data-connector='{name}'][data-kind='{kind}'] svg")
        return float(spark.get_attribute("data-peak") or 0) if spark.count() else 0.0

    written = [0]

    def shown_or_more() -> bool:
        # A rate is the change between two of the browser's samples: lines the pipeline moved
        # before the page's first sample never show, so more are written until both rates did.
        if peak("uiSource", "rate") > 0 and peak("uiSink", "rate") > 0:
            return True
        with source_file.open("a") as f:  # JSON strings: the sink writes them, no dead letter
            f.writelines(f'"more {written[0] + i}"\n' for i in range(100))
        written[0] += 100
        return False

    wait_until(shown_or_more, 120, "both throughput sparklines", every=3)
    source_lag = page.locator("td.live[data-connector='uiSource'][data-kind='lag']")
    expect(source_lag).to_contain_text("0 B")  # read to the end: no bytes left
    expect(source_lag.locator("svg")).to_have_attribute("aria-label", "lag, now 0 B")
    shot("2-list")

    # the sink's page by keyboard only: Tab to its link, Enter; Tab to Pause, Enter
    def tab_to(text: str) -> None:
        for _ in range(60):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent.trim()") == text:
                return
        raise AssertionError(f"Tab never reached {text!r}")

    tab_to("uiSink")
    page.keyboard.press("Enter")
    page.wait_for_url("**/#/connector/uiSink")
    expect(page.locator("h1")).to_contain_text("RUNNING")
    tab_to("Pause")
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_contain_text("PAUSED")
    assert worker.state("uiSink") == "PAUSED"
    page.click("button:has-text('Resume')")
    expect(page.locator("h1")).to_contain_text("RUNNING")
    run = _run_id(worker, "uiSink")
    assert run
    page.click("button:has-text('Restart')")
    expect(page.locator("#flash")).to_have_text("Restart: done")
    wait_until(lambda: _run_id(worker, "uiSink") not in (None, run), 60, "the sink's restart")
    expect(page.locator("h1")).to_contain_text("RUNNING")
    letters = page.locator("#dead-letters tbody tr")
    expect(letters).to_have_count(3)
    expect(letters.first).to_contain_text("__connect.errors.stage")
    expect(letters.first).to_contain_text("VALUE_CONVERTER")
    expect(page.locator("#dead-letters")).to_contain_text("alpha")
    shot("3-sink-dead-letters")

    # stopped, its offsets can be reset (the button exists only then)
    expect(page.locator("button:has-text('Reset offsets')")).to_have_count(0)
    page.click("button:has-text('Stop')")
    expect(page.locator("h1")).to_contain_text("STOPPED")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Reset offsets')")
    expect(page.locator("#flash")).to_contain_text("Reset offsets: done")
    assert worker.get("/v1/connectors/uiSink/offsets").json() == {"offsets": []}
    shot("4-offsets-reset")

    # a new page opens at its top, not where the last one was scrolled to
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    assert page.evaluate("window.scrollY") > 0
    page.evaluate("location.hash = '#/new'")
    page.wait_for_selector("#plugin")
    assert page.evaluate("window.scrollY") == 0

    # a failure's long first line wraps inside its box instead of running past the edge
    page.goto(worker.url + "/ui/#/connector/uiSink")
    wide = page.evaluate(
        """() => {
        const pre = document.createElement("pre");
        pre.className = "trace";
        pre.textContent = "ConfigException: " + "a-very-long-cause-".repeat(40) + "\\nsecond";
        document.getElementById("main").append(pre);
        return [pre.scrollWidth, pre.clientWidth];
        }"""
    )
    assert wide[0] <= wide[1], f"the trace box scrolls sideways: {wide}"

    # topics: one row per topic with its record count; its queues on expand
    # (at once after the connector's page: its answers, slower, must not replace this page)
    page.goto(worker.url + "/ui/#/topics")
    dlq = page.locator("#topics > tbody > tr[data-topic='uiTopic-dlq']")
    expect(dlq).to_have_count(1)
    expect(dlq.locator("td.records-count")).to_have_text("3")
    queues = worker.get("/v1/topics/uiTopic-dlq").json()["queues"]
    expect(dlq.locator("summary")).to_have_text(f"{len(queues)} queues")
    expect(dlq.locator("table.queue-offsets")).to_be_hidden()
    dlq.locator("summary").click()
    expect(dlq.locator("table.queue-offsets tbody tr")).to_have_count(len(queues))
    shot("5-topics")

    # the cluster's workers and what runs on each
    (worker_id,) = worker.get("/getClusterInfo").json()["body"]
    page.click("header a:has-text('Cluster')")
    workers = page.locator("#workers tbody tr")
    expect(workers).to_have_count(1)
    expect(workers.first).to_contain_text(worker_id)
    expect(workers.first).to_contain_text("uiSource")
    shot("6-cluster")
    _retrying_marker(worker, page, tmp_path, shot)

    # Delete from the connector's page, after a confirm: back to the list, gone from the worker
    page.goto(worker.url + "/ui/#/connector/uiSource")
    expect(page.locator("h1")).to_contain_text("uiSource")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Delete')")
    page.wait_for_url(re.compile(r".*/ui/#/$"))
    expect(page.locator("#connectors")).not_to_contain_text("uiSource")
    assert worker.get("/v1/connectors/uiSource/status").status_code == 404
    for name in ("uiSink", "uiRetrySource", "uiRetry"):
        assert worker.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def _retrying_marker(worker: WorkerProcess, page, tmp_path: Path, shot) -> None:
    """A Redis sink whose server goes away (a proxy in front of the shared Redis, cut once the
    connector is created: its `validate` reaches the server) retries its writes
    (`errors.retry.*`): its task's "retrying" marker and note show in the list and on its page;
    once `errors.retry.timeout` is spent the task is FAILED, the marker gone."""
    from playwright.sync_api import expect

    from tests.e2e.tcp_proxy import TcpProxy
    from tests.servers import ensure

    host, port = ensure("redis").rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))
    raw = {"key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}
    try:
        sink = {
            **raw,
            "connector.class": "RedisSinkConnector",
            "redis.url": f"redis://127.0.0.1:{proxy.port}/0",
            "redis.timeout.ms": "1000",
            "redis.key.format": f"uiRetry-{os.getpid()}",
            "connect.topicnames": "uiRetryTopic",
            "errors.retry.timeout": "12000",
            "errors.retry.delay.max.ms": "1000",
            # once its retries are spent the task stays FAILED (no automatic restart)
            "restart.retriable.timeout.ms": "0",
        }
        worker.post_connector("uiRetry", sink)
    finally:
        proxy.cut()  # nothing written yet: the topic is empty until the source below runs
    lines = tmp_path / "retry.txt"
    lines.write_text("one\ntwo\n")
    source = {"connector.class": "FileSourceConnector", "filename": str(lines)}
    worker.post_connector("uiRetrySource", {**source, "connect.topicname": "uiRetryTopic"})

    def shown(selector: str, text: str) -> bool:
        page.reload()
        return text in page.locator(selector).inner_text()

    page.goto(worker.url + "/ui/#/")
    wait_until(lambda: shown("#connectors", "(retrying)"), 60, "the list's retrying marker")
    row = page.locator("#connectors tbody tr").filter(has_text="uiRetry")
    expect(row.first).to_contain_text("task 0: RUNNING (retrying)")
    expect(row.first.locator("td.failure")).to_contain_text(
        re.compile(r"\((1 retry|\d+ retries)\): RetriableException")
    )
    expect(row.first.locator("td.failure")).to_contain_text(
        f"redis.url=redis://127.0.0.1:{proxy.port}"
    )
    shot("7-list-retrying")
    page.goto(worker.url + "/ui/#/connector/uiRetry")
    task = page.locator("#tasks tbody tr").first
    expect(task.locator(".retrying")).to_have_text(" retrying")
    expect(task.locator("td.note")).to_contain_text("retrying since")
    shot("8-connector-retrying")
    # errors.retry.timeout spent: the task fails, saying how long it retried; no marker left
    wait_until(lambda: shown("#tasks", "FAILED"), 60, "the task to fail after its retries")
    expect(task.locator(".retrying")).to_have_count(0)
    expect(task.locator("td.failure")).to_contain_text("errors.retry.timeout=12000")
    shot("9-connector-retries-spent")


def test_console_basic_auth_reader_is_refused_a_change_admin_makes_it(
    browser, basic_worker
) -> None:
    """`rest.auth=basic` over HTTPS: the browser sends the user's credentials; a read-only user
    sees the list and the connector, and Pause answers the worker's 403 in the console; an
    admin pauses it; a browser without credentials is challenged (its own login prompt)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    worker = basic_worker.worker
    admin = basic_worker.headers
    lines = basic_worker.home / "files" / "console-basic.txt"
    lines.write_text("one\n")
    source = {
        "connector.class": "FileSourceConnector",
        "filename": str(lines),
        "connect.topicname": "basicTopic",
    }
    created = worker.request("PUT", "/v1/connectors/basicSource/config", json=source, headers=admin)
    assert created.status_code == 201, created.text

    def as_user(credentials: tuple[str, str] | None) -> object:
        login = {"username": credentials[0], "password": credentials[1]} if credentials else None
        return new_page(browser, http_credentials=login, ignore_https_errors=True)

    try:
        reader = as_user(READER)
        reader.goto(worker.url + "/ui/#/")
        row = reader.locator("#connectors tbody tr").filter(has_text="basicSource")
        expect(row).to_contain_text("RUNNING")
        reader.goto(worker.url + "/ui/#/connector/basicSource")
        expect(reader.locator("h1")).to_contain_text("RUNNING")
        reader.click("button:has-text('Pause')")
        expect(reader.locator("#flash")).to_contain_text(f"Pause: {READER[0]} is read-only")
        assert (
            worker.get("/v1/connectors/basicSource/status", headers=admin).json()["connector"][
                "state"
            ]
            == "RUNNING"
        )
        screenshot(reader, "10-basic-reader-refused")

        writer = as_user(ADMIN)
        writer.goto(worker.url + "/ui/#/connector/basicSource")
        writer.click("button:has-text('Pause')")
        expect(writer.locator("#flash")).to_have_text("Pause: done")  # allowed, and done
        wait_until(
            lambda: (
                worker.get("/v1/connectors/basicSource/status", headers=admin).json()["connector"][
                    "state"
                ]
                == "PAUSED"
            ),
            60,
            "the admin's pause",
        )
        writer.reload()
        expect(writer.locator("h1")).to_contain_text("PAUSED")
        screenshot(writer, "11-basic-admin-paused")

        # no credentials: the browser is challenged (its own login prompt), nothing is shown
        nobody = as_user(None)
        with (
            nobody.expect_response(lambda r: r.url.startswith(worker.url + "/ui/")) as answer,
            contextlib.suppress(PlaywrightError),  # headless: the prompt is cancelled
        ):
            nobody.goto(worker.url + "/ui/#/")
        assert answer.value.status == 401
        assert answer.value.headers["www-authenticate"].lower().startswith("basic")
    finally:  # the shared worker goes on
        worker.request("DELETE", "/v1/connectors/basicSource", headers=admin)


def test_console_token_login_list_logout(page, token_worker, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    shot = lambda name: screenshot(page, name)  # noqa: E731
    token = token_worker.token
    worker = token_worker.worker
    bearer = {"Authorization": f"Bearer {token}"}
    try:
        (tmp_path / "in.txt").write_text("one\n")
        source = {
            "connector.class": "FileSourceConnector",
            "filename": str(tmp_path / "in.txt"),
            "connect.topicname": "tokenTopic",
        }
        created = worker.request(
            "PUT", "/v1/connectors/tokenSource/config", json=source, headers=bearer
        )
        assert created.status_code == 201, created.text
        assert worker.get("/v1/connectors").status_code == 401  # no token, no data

        page.goto(worker.url + "/ui/#/")
        expect(page.locator("#login")).to_be_visible()
        expect(page.locator("#logout")).to_have_count(0)
        page.fill("#token", "not-the-token")
        page.keyboard.press("Enter")
        expect(page.locator("#token-problem")).to_contain_text("That token was refused.")
        shot("7-token-refused")
        # by keyboard: the field has the focus again; type the token, Enter
        expect(page.locator("#token")).to_be_focused()
        page.keyboard.type(token)
        page.keyboard.press("Enter")
        row = page.locator("#connectors tbody tr").filter(has_text="tokenSource")
        expect(row).to_contain_text("RUNNING")
        expect(page.locator("#worker")).to_contain_text("e2e-worker")  # an API call with it
        assert page.evaluate("sessionStorage.getItem('sluice.token')") == token
        shot("8-token-logged-in")

        page.click("#logout")
        expect(page.locator("#login")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('sluice.token')") is None
        expect(page.locator("#connectors")).to_have_count(0)
        expect(page.locator("#worker")).to_have_text("")
        shot("9-token-logged-out")
        assert worker.request("DELETE", "/v1/connectors/tokenSource", headers=bearer).is_success
    finally:  # the shared worker goes on
        worker.request("DELETE", "/v1/connectors/tokenSource", headers=bearer)


def test_a_page_on_another_site_cannot_change_the_worker(
    worker: WorkerProcess, page, tmp_path: Path
) -> None:
    """Cross-site request forgery, from a real browser: a page of another origin (a server on
    another loopback port, so that Chromium's own Local Network Access rule lets it through, as
    other browsers do) makes the browser POST a config as a form would (`text/plain`, no
    preflight) and load RocketMQ Connect's create-by-GET as an image. The worker answers both
    403 (sluice.rest._cross_site) and nothing is created; the console on the worker's own
    origin still changes things (the tests above)."""
    (tmp_path / "in.txt").write_text("secret\n")
    config = json.dumps(
        {
            "connector.class": "FileSourceConnector",
            "filename": str(tmp_path / "in.txt"),
            "connect.topicname": "csrfTopic",
        }
    )
    html = f"""<html><body><script>
      fetch({json.dumps(worker.url + "/connectors/csrfPost")},
            {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
              body: {json.dumps(config)}}});
    </script><img src={json.dumps(worker.url + "/connectors/csrfGet?config=" + quote(config))}>
    </body></html>""".encode()

    class EvilPage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *_: object) -> None:
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), EvilPage)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with (
            page.expect_response(lambda r: "/connectors/csrfPost" in r.url) as post,
            page.expect_request(lambda r: "/connectors/csrfGet" in r.url) as get,
        ):
            page.goto(f"http://localhost:{evil.server_address[1]}/")
        assert post.value.status == 403  # (an opaque answer: the page may not read its body)
        # the image's answer is JSON, which Chromium's opaque-response blocking hides from the
        # page (no status to read here): it was sent, and the worker created nothing
        get.value.response()  # its outcome, whichever it is
    finally:
        evil.shutdown()
    listed = worker.get("/v1/connectors").json()
    assert "csrfPost" not in listed and "csrfGet" not in listed


def test_a_page_on_another_site_cannot_frame_the_console(worker: WorkerProcess, page) -> None:
    """Clickjacking: a page of another origin showed the console in a frame under its own
    content, and a click plus a confirm deleted a connector. Every answer now says
    `frame-ancestors 'none'` and `X-Frame-Options: DENY`: Chromium loads the console's answer
    and shows an error page in the frame instead of it."""
    html = f"""<html><body><iframe id="console" src={json.dumps(worker.url + "/ui/")}>
    </iframe></body></html>""".encode()

    class FramingPage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *_: object) -> None:
            pass

    framing = ThreadingHTTPServer(("127.0.0.1", 0), FramingPage)
    threading.Thread(target=framing.serve_forever, daemon=True).start()
    try:
        with page.expect_response(lambda r: r.url == worker.url + "/ui/") as answer:
            page.goto(f"http://localhost:{framing.server_address[1]}/")
        # `headers`, not `all_headers()`: Chromium may never report the raw headers of a
        # response it refused to frame, and `all_headers()` then waits for them for good
        headers = answer.value.headers
        assert headers["content-security-policy"] == "frame-ancestors 'none'"
        assert headers["x-frame-options"] == "DENY"
        [frame] = [f for f in page.frames if f is not page.main_frame]
        wait_until(lambda: frame.url != "about:blank", 60, "the frame to navigate")
        # blocked: Chromium's error page, none of the console's own markup
        assert not frame.url.startswith(worker.url), frame.url
        assert frame.locator("header, nav, #main").count() == 0
        page.screenshot(path=str(ARTIFACTS / "framed-refused.png"))
    finally:
        framing.shutdown()
