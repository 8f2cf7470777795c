"""HttpSinkConnector through real Spark pipelines (file → topic → HTTP sink) against a real HTTP
server on loopback: delivery with idempotency keys, never-retried statuses, timeouts that cancel,
Retry-After, isolation between targets, parking in the retry topic, live limits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.integration.push_target import Target, serve
from tests.integration.test_dead_letters import topic_records

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t, server, thread = serve()
    yield t
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _fresh(target: Target) -> None:
    target.reset()


def _fill(runner: Any, tmp_path: Path, lines: list[str], topic: str = "t") -> None:
    src = tmp_path / f"{topic}.txt"
    src.write_text("".join(f"{line}\n" for line in lines))
    runner.start(
        f"src-{topic}",
        {
            "connector.class": "FileSourceConnector",
            "filename": str(src),
            "connect.topicname": topic,
        },
    )
    wait_until(lambda: runner.bus.count(topic) == len(lines), 240, f"{len(lines)} in {topic}")


def _sink(runner: Any, name: str, url: str, **extra: Any) -> None:
    config = {
        "connector.class": "org.apache.rocketmq.connect.http.sink.HttpSinkConnector",
        "connect.topicnames": "t",
        "url": url,
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": f"{name}-dlq",
        **{k: str(v) for k, v in extra.items()},
    }
    runner.start(name, config)


def _healthy(runner: Any) -> None:
    for r in runner.running.values():
        assert r.query.exception() is None, r.query.exception()


def test_records_arrive_once_each_with_idempotency_keys_and_auth(
    runner: Any, tmp_path: Path, target: Target
) -> None:
    _fill(runner, tmp_path, [f"v{i}" for i in range(40)])
    _sink(
        runner,
        "hook",
        target.url + "/ok/{topic}",
        **{"auth.type": "bearer", "auth.bearer.token": "s3cret", "headers": '{"X-Env": "test"}'},
    )
    wait_until(lambda: (_healthy(runner), len(target.ok("ok")) >= 40)[1], 240, "40 requests")
    got = target.ok("ok")
    assert sorted(r.body.decode() for r in got) == sorted(f"v{i}" for i in range(40))
    keys = {r.headers["idempotency-key"] for r in got}
    originals = {f"t/{r['queue']}/{r['offset']}" for r in topic_records(runner, "t")}
    assert keys == originals  # one key per record: its topic/queue/offset
    assert {r.path for r in got} == {"/ok/t"}
    assert all(r.headers["authorization"] == "Bearer s3cret" for r in got)
    assert all(r.headers["x-env"] == "test" for r in got)
    # the tasks found the worker's push board (and their name) in their context: their totals
    wait_until(
        lambda: runner.push_board.progress("hook")["totals"].get("succeeded", 0) >= 40,
        60,
        "the tasks' totals on the push board",
    )


def test_400_is_dead_lettered_at_once_and_a_hang_is_cancelled_then_retried_then_dead(
    runner: Any, tmp_path: Path, target: Target
) -> None:
    target.behaviour = {"bad": {"status": 400}, "hang": {"hang": 30}}
    lines = [json.dumps({"to": "bad" if i % 2 else "hang", "i": i}) for i in range(6)]
    _fill(runner, tmp_path, lines)
    _sink(
        runner,
        "hook",
        target.url + "/{value.to}/x",
        **{
            "timeout.ms": 2000,
            "retry.max.attempts": 2,
            "retry.backoff.initial.ms": 50,
            "push.flush.max.ms": 20000,
        },
    )
    wait_until(
        lambda: (_healthy(runner), runner.bus.count("hook-dlq") >= 6)[1], 240, "6 dead letters"
    )
    letters = topic_records(runner, "hook-dlq")
    by_status: dict[str, list[dict]] = {}
    for letter in letters:
        headers = json.loads(letter["headers"])
        by_status.setdefault(headers["__connect.errors.http.status"], []).append(headers)
        assert headers["__connect.errors.topic"] == "t"
        assert headers["__connect.errors.connector.name"] == "hook"
        assert headers["__connect.errors.stage"] == "TASK_PUT"
        assert headers["__connect.errors.exception.class.name"].endswith("DeliveryFailed")
    assert sorted(by_status) == ["", "400"]
    assert all(h["__connect.errors.attempts"] == "1" for h in by_status["400"]), by_status["400"]
    assert all("never retried" in h["__connect.errors.exception.message"] for h in by_status["400"])
    timed_out = by_status[""]
    assert all(h["__connect.errors.attempts"] == "2" for h in timed_out)
    assert all("timed out" in h["__connect.errors.exception.message"] for h in timed_out)
    # each hung record was tried twice (each attempt cut at 2 s), its second after the fresh ones
    # (the server may not see an attempt the client cut before it was read: at most 6)
    hung = target.arrived("hang")
    assert len(hung) <= 6 and len({key for _, key, _ in hung}) == 3
    assert target.seen("hang") == []  # none was answered: the client gave up each time
    assert len(target.seen("bad")) == 3  # 400: one attempt each


def test_retry_after_is_honoured(runner: Any, tmp_path: Path, target: Target) -> None:
    target.behaviour = {"busy": {"fail_first": 1, "status": 429, "retry_after": 2}}
    _fill(runner, tmp_path, ["only"])
    _sink(runner, "hook", target.url + "/busy", **{"retry.backoff.initial.ms": 10})
    wait_until(lambda: (_healthy(runner), len(target.ok("busy")) == 1)[1], 240, "the retry")
    first, second = target.seen("busy")
    assert first.status == 429 and second.status == 200
    assert second.at - first.at >= 2.0  # nothing sent inside the Retry-After window


def test_a_hung_target_does_not_slow_the_other(runner: Any, tmp_path: Path, target: Target) -> None:
    target.behaviour = {"a": {"hang": 30}, "b": {"delay": 0.02}}
    lines = [json.dumps({"to": "a" if i % 10 == 0 else "b", "i": i}) for i in range(200)]
    _fill(runner, tmp_path, lines)
    _sink(
        runner,
        "hook",
        target.url + "/{value.to}/x",
        **{"timeout.ms": 20000, "push.concurrency": 16, "push.target.concurrency": 8},
    )
    wait_until(lambda: (_healthy(runner), len(target.ok("b")) >= 180)[1], 240, "b's 180 records")
    b = target.ok("b")
    a = target.arrived("a")
    # every b record was delivered while a's first requests still hung (20 s before a timeout,
    # 30 s before a's answer): a's 8 slots (its per-target limit) never took b's
    assert a and max(r.at for r in b) < min(at for _, _, at in a) + 20
    assert len(target.ok("a")) == 0 and len(a) <= 8


def test_a_slow_target_parks_records_in_the_retry_topic_and_they_come_back(
    runner: Any, tmp_path: Path, target: Target
) -> None:
    target.behaviour = {"flaky": {"fail_first": 1, "status": 503}}
    _fill(runner, tmp_path, [f"p{i}" for i in range(5)])
    _sink(
        runner,
        "hook",
        target.url + "/flaky",
        **{"push.flush.max.ms": 500, "retry.backoff.initial.ms": 3000, "retry.jitter": 0},
    )
    wait_until(lambda: (_healthy(runner), len(target.ok("flaky")) == 5)[1], 240, "5 delivered")
    parked = topic_records(runner, "hook-push-retry")
    # each waited in the retry topic, not in the micro-batch, and was read back once due: parked
    # once per attempt before its due time, never again by a micro-batch that read it early
    # (the retry topic is a delay queue for its reader; issue 33 found 10,157 copies for 3,000
    # records). A due copy may be parked again unsent when its micro-batch's 0.5 s deadline
    # comes first (a loaded machine): that one is parked at or after its due time.
    assert {row["key"] for row in parked} == {
        r.headers["idempotency-key"].encode() for r in target.ok("flaky")
    }

    def early(row: dict[str, Any]) -> bool:
        due = float(json.loads(row["headers"])["sluice.push.due"])
        return row["timestamp"].timestamp() < due - 0.05

    before_due = [
        (row["key"], json.loads(row["headers"])["sluice.push.attempts"])
        for row in parked
        if early(row)
    ]
    assert before_due and len(before_due) == len(set(before_due)), sorted(before_due)
    for row in parked:
        headers = json.loads(row["headers"])
        # parked after its failed first attempt, or still queued at the 0.5 s deadline
        assert headers["sluice.push.attempts"] in ("0", "1")
        if headers["sluice.push.attempts"] == "1":  # a 503, or (loaded machine) a timeout
            assert headers["sluice.push.status"] in ("503", "")
            assert float(headers["sluice.push.due"]) > float(headers["sluice.push.first"]) + 2.5
    first = {r.headers["idempotency-key"]: r.at for r in target.seen("flaky") if r.status == 503}
    for r in target.ok("flaky"):
        assert r.at - first[r.headers["idempotency-key"]] >= 2.5  # at its due time, not before
    assert runner.bus.count("hook-dlq") == 0


def test_the_retry_topic_keeps_no_resolved_secret(
    runner: Any, tmp_path: Path, target: Target
) -> None:
    """A URL (and a header) taken from `${file:…}`: parked requests keep neither, in the records
    nor in the segment files; re-delivery renders the URL from the config again."""
    from sluice.runtime.secrets import ConfigProviders

    token = f"tok{uuid.uuid4().hex}"
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "hook.properties").write_text(f"path={token}\nkey=hdr{token}\n")
    runner.providers = ConfigProviders.from_worker(
        {"config.providers": "file", "config.providers.file.param.allowed.paths": str(secrets)}
    )
    ref = f"${{file:{secrets}/hook.properties:"
    target.behaviour = {"sec": {"fail_first": 1, "status": 503}}
    _fill(runner, tmp_path, [f"s{i}" for i in range(4)])
    _sink(
        runner,
        "hooksec",
        f"{target.url}/sec/{ref}path}}/{{topic}}",
        **{
            "headers": f'{{"X-Hook-Key": "{ref}key}}"}}',
            "push.flush.max.ms": 500,
            "retry.backoff.initial.ms": 2000,
            "retry.jitter": 0,
        },
    )
    wait_until(lambda: (_healthy(runner), len(target.ok("sec")) == 4)[1], 240, "4 delivered")
    delivered = target.ok("sec")
    assert {r.path for r in delivered} == {f"/sec/{token}/t"}  # resolved again when re-sent
    assert {r.headers["x-hook-key"] for r in delivered} == {f"hdr{token}"}
    parked = topic_records(runner, "hooksec-push-retry")
    assert parked, "nothing was parked: the test proves nothing"
    assert token not in repr(parked)
    for row in parked:
        assert json.loads(json.loads(row["headers"])["sluice.push.url.values"]) == {"topic": "t"}
    for path in (Path(runner.root) / "bus").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert runner.bus.count("hooksec-dlq") == 0
