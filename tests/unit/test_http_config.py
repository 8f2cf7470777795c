"""HttpSinkConnector config and request building (pure logic): every bad key is named."""

from __future__ import annotations

import base64
import json

import pytest

from sluice.connectors.http import HttpSinkConnector, parse
from sluice.connectors.http import _request as rq
from sluice.push import PushBoard, parse_limits
from sluice.sdk import ConfigException, ConnectRecord

BASE = {"connect.topicnames": "t", "url": "http://127.0.0.1:9/x"}


def _bad(key: str, **changes: str) -> str:
    with pytest.raises(ConfigException) as exc:
        HttpSinkConnector().validate({**BASE, **changes})
    assert exc.value.key == key, exc.value
    return str(exc.value)


def test_bad_config_names_the_key() -> None:
    assert "unbalanced" in _bad("url", url="http://h/{topic")
    assert "unknown placeholder {nope}" in _bad("url", url="http://h/{nope}")
    assert "http://" in _bad("url", url="ftp://h/x")
    assert "unknown auth type 'OAUTH_AUTH'" in _bad("auth.type", **{"auth.type": "OAUTH_AUTH"})
    assert "unknown auth type" in _bad("authType", authType="kerberos")  # the alias, as written
    assert "positive" in _bad("timeout.ms", **{"timeout.ms": "-5"})
    assert "positive" in _bad("timeout", timeout="0")
    assert _bad("auth.bearer.token", **{"auth.type": "bearer"})
    assert _bad("auth.basic.user", authType="BASIC_AUTH")
    assert "JSON" in _bad("headers", headers="X-A: b")
    assert _bad("method", method="DELETE")
    assert _bad("rate.limit.per.second", **{"rate.limit.per.second": "-1"})
    assert _bad("retry.jitter", **{"retry.jitter": "1.5"})
    assert _bad(
        "cloudevents.mode",
        **{"body.format": "cloudevents", "cloudevents.mode": "binary", "batch.max.records": "5"},
    )
    assert _bad("retry.topic.name", **{"retry.topic.name": "t"})
    assert "contradicts" in _bad("urlPattern", urlPattern="http://h/other")


def test_rocketmq_keys_are_aliases() -> None:
    config = parse(
        {
            **BASE,
            "urlPattern": BASE["url"],
            "authType": "API_KEY_AUTH",
            "apiKeyName": "X-K",
            "apiKeyValue": "v",
            "timeout": "1500",
            "headerParameters": '{"A": "1"}',
        }
    )
    assert config.auth == ("X-K", "v") and config.timeout_s == 1.5 and config.headers == {"A": "1"}


def _record(value: object, **kw: object) -> ConnectRecord:
    return ConnectRecord(
        value=value,
        topic="t",
        partition={"topic": "t", "queueId": "3"},
        offset={"queueOffset": 18},
        **kw,  # type: ignore[arg-type]
    )


def test_url_template_and_idempotency_key() -> None:
    config = parse({**BASE, "url": "http://h/{topic}/{value.user.id}/{header.k}/{key}"})
    record = _record('{"user": {"id": "a b"}}', key="k1", extensions={"k": "v"})
    assert rq.expand_url(config, record) == "http://h/t/a%20b/v/k1"
    with pytest.raises(LookupError, match=r"header\.k"):
        rq.expand_url(config, _record('{"user": {"id": 1}}', key="x"))
    request = rq.build(parse(BASE), "http://h/x", [record])
    assert request.headers["Idempotency-Key"] == "t/3/17"  # the record's own offset
    assert rq.target_of("http://h:1/a?q=1", "url") == "http://h:1/a"
    assert rq.target_of("http://h:1/a?q=1", "host") == "http://h:1"


def test_bodies_raw_json_cloudevents_and_batches() -> None:
    record = _record('{"a": 1}', key="k")
    raw = rq.build(parse(BASE), "http://h", [record])
    assert raw.body == b'{"a": 1}' and raw.headers["Content-Type"].startswith("text/plain")
    js = rq.build(parse({**BASE, "body.format": "json"}), "http://h", [record])
    assert json.loads(js.body) == {"a": 1} and js.headers["Content-Type"] == "application/json"
    ce = rq.build(parse({**BASE, "body.format": "cloudevents"}), "http://h", [record])
    event = json.loads(ce.body)
    assert ce.headers["Content-Type"] == "application/cloudevents+json"
    assert event["specversion"] == "1.0" and event["id"] == "t/3/17" and event["data"] == {"a": 1}
    assert event["subject"] == "k" and event["source"] == "sluice/http-sink"
    binary = rq.build(
        parse({**BASE, "body.format": "cloudevents", "cloudevents.mode": "binary"}),
        "http://h",
        [record],
    )
    assert binary.headers["ce-id"] == "t/3/17" and binary.headers["ce-specversion"] == "1.0"
    assert binary.body == b'{"a": 1}' and binary.headers["Content-Type"] == "application/json"
    batch = rq.build(parse(BASE), "http://h", [record, _record("plain")])
    assert json.loads(batch.body) == [{"a": 1}, "plain"]
    assert batch.headers["Idempotency-Key"].startswith("batch-")


def test_parked_requests_round_trip_without_the_secret() -> None:
    config = parse({**BASE, "auth.type": "bearer", "auth.bearer.token": "s3cret"})
    request = rq.build(config, "http://h/x", [_record(b"\x00\xff")])
    headers = rq.park_headers(config, request, 2, 100.0, 160.0, 503, "HTTP 503")
    assert "s3cret" not in json.dumps(headers)
    assert base64.b64decode(headers["sluice.push.body"]) == b"\x00\xff"
    parked = ConnectRecord(value=b"", topic="hook-push-retry", extensions=headers)
    assert rq.is_parked(parked)
    again, attempts, first, due = rq.unpark(config, parked)
    assert (attempts, first, due) == (2, 100.0, 160.0)
    assert again.headers["Authorization"] == "Bearer s3cret" and again.body == b"\x00\xff"
    assert again.records[0].offset == {"queueOffset": 18} and again.key == "t/3/17"


def test_parked_requests_keep_no_resolved_secret_and_render_the_url_again() -> None:
    """The URL and static headers come from the config, as resolved where the task runs: a
    parked request keeps only the placeholders' values and renders the URL on re-delivery."""
    resolved = {
        **BASE,
        "url": "https://hook:pw-in-url@h/api/tok-in-path/{topic}/{value.id}?sig=tok-in-query",
        "headers": '{"X-Api-Key": "tok-in-header"}',
        "auth.type": "basic",
        "auth.basic.user": "u",
        "auth.basic.password": "tok-basic",
    }
    config = parse(resolved)
    record = _record('{"id": "a/b"}')
    values = rq.url_values(config, record)
    assert values == {"topic": "t", "value.id": "a%2Fb"}
    url = rq.render_url(config, values)
    request = rq.build(config, url, [record], values)
    error = f"ClientConnectorError: cannot connect to {url}"
    headers = rq.park_headers(config, request, 1, 100.0, 160.0, None, error)
    stored = json.dumps(headers)
    for secret in ("pw-in-url", "tok-in-path", "tok-in-query", "tok-in-header", "dG9rLWJhc2lj"):
        assert secret not in stored, (secret, stored)
    assert "tok-basic" not in stored and "Basic" not in stored
    assert "cannot connect to https://h/…" in headers["sluice.push.error"]
    assert rq.target_of(url, "url") == "https://h/api/tok-in-path/t/a%2Fb"  # no user, password
    parked = ConnectRecord(value=b"", topic="hook-push-retry", extensions=headers)
    again, attempts, _, _ = rq.unpark(config, parked)
    assert again.url == url and attempts == 1
    assert again.headers["X-Api-Key"] == "tok-in-header"
    assert again.headers["Authorization"] == request.headers["Authorization"]
    # rotated secret: re-delivery uses the config as it is now
    rotated = parse({**resolved, "url": resolved["url"].replace("tok-in-path", "tok-2")})
    assert rq.unpark(rotated, parked)[0].url == url.replace("tok-in-path", "tok-2")
    # a template that gained a placeholder: the request cannot be rendered (dead-lettered)
    changed = parse({**resolved, "url": "https://h/{topic}/{key}"})
    with pytest.raises(LookupError, match=r"\{key\}"):
        rq.unpark(changed, parked)
    # a request parked by an earlier version (the URL itself in a header) is still sent
    legacy = {k: v for k, v in headers.items() if k != "sluice.push.url.values"}
    legacy["sluice.push.url"] = "http://old/x"
    old = ConnectRecord(value=b"", topic="hook-push-retry", extensions=legacy)
    assert rq.is_parked(old) and rq.unpark(config, old)[0].url == "http://old/x"


def test_push_settings_validate_and_merge(tmp_path) -> None:
    assert parse_limits({"maxThreadSize": "12", "coreThreadSize": 12}) == {
        "concurrency": 12,
        "core_concurrency": 12,
    }
    with pytest.raises(ConfigException) as exc:
        parse_limits({"concurrency": 4, "threads": 2})
    assert exc.value.key == "threads"
    with pytest.raises(ConfigException) as exc:
        parse_limits({"queue_limit": 0})
    assert exc.value.key == "queue_limit"
    board = PushBoard(str(tmp_path / "push.sqlite"))
    board.set_settings("c", {"concurrency": 4})
    assert board.set_settings("c", {"consumerCurrentQueueSizeLimit": 17}) == {
        "concurrency": 4,
        "queue_limit": 17,
    }
    board.report("c", 0, {"active": 1}, {"read": 5, "succeeded": 4})
    board.report("c", 0, {"active": 0}, {"read": 1, "succeeded": 2})
    p = board.progress("c")
    assert p["totals"] == {"read": 6, "succeeded": 6} and p["tasks"][0]["active"] == 0


def test_a_parked_json_body_keeps_the_topics_bytes_for_its_dead_letters() -> None:
    """A text value sent as a JSON string (`body=json`) or in a batch: the dead letter of the
    request read back from the retry topic carries the value as the topic held it, not the
    body's JSON (found: 10 of 42 dead letters JSON-quoted a second time)."""
    config = parse({**BASE, "body.format": "json"})
    for records in ([_record("plain text")], [_record("a b"), _record('{"x": 1}'), _record(None)]):
        request = rq.build(config, "http://h/x", records)
        headers = rq.park_headers(config, request, 3, 100.0, 160.0, 503, "HTTP 503")
        assert "sluice.push.values" in headers  # the body is not the records' bytes
        parked = ConnectRecord(value=b"", topic="hook-push-retry", extensions=headers)
        again = rq.unpark(config, parked)[0]
        assert [r.value for r in again.records] == [rq.topic_bytes(r.value) for r in records]
        assert again.body == request.body  # what is sent again is unchanged
    # raw bodies are the records' bytes: nothing is stored twice
    raw = rq.build(parse(BASE), "http://h/x", [_record(b"\x00\xff")])
    assert "sluice.push.values" not in rq.park_headers(parse(BASE), raw, 1, 1.0, 2.0, None, "e")


def test_a_sink_dead_letter_carries_text_as_its_utf8_bytes() -> None:
    from sluice.engine.errors import task_letter
    from sluice.sdk import DeadLetterRequest

    record = ConnectRecord(
        value="héllo", key="k1", topic="t", partition={"topic": "t", "queueId": "0"}
    )
    letter = task_letter(DeadLetterRequest(record, "gave up", "X", {}), "Task")
    assert (letter.value, letter.key) == ("héllo".encode(), b"k1")  # not '"héllo"'
    structured = ConnectRecord(value={"a": 1}, topic="t")
    assert task_letter(DeadLetterRequest(structured, "m", "X", {}), "T").value == b'{"a": 1}'
