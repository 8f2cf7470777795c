"""HttpSinkConnector: pushes each record (or a batch of records) to an HTTP endpoint.

Delivery: **at-least-once to the target; exactly-once in effect for a receiver that drops
duplicates by the idempotency key** (header `Idempotency-Key` = `<topic>/<queue>/<offset>` of the
record, or a digest of a batched request's records). A micro-batch commits only when each of its
records is delivered (2xx), dead-lettered (given up: a never-retried status such as 400, or the
retry policy ran out — routed like any record the sink gives up on: `errors.tolerance=all` and
`errors.deadletterqueue.topic.name`, headers `__connect.errors.*` plus `__connect.errors.attempts`
and `__connect.errors.http.status`), or *parked* in the connector's retry topic
(`retry.topic.name`, default `<connector>-push-retry`) with its due time in a header. Parked
records are written in the same exactly-once commit as the micro-batch, and read back like the
connector's own topics at low priority; so a kill -9 at any moment loses nothing (the micro-batch
is replayed: records may be sent again, with the same idempotency key), and a slow or hung target
holds a micro-batch at most `push.flush.max.ms` plus one `timeout.ms`.

Unit of parallelism: one task per group of queues (`max.tasks`); inside a task, the push runtime
(`sluice.push`) sends requests concurrently on its share of the connector's budget
(`push.concurrency` in flight, at most `push.target.concurrency` per target, the rate limit:
divided evenly among the tasks running at once), each target with its own bounded queue
(`push.queue.limit`, per task), its own rate limit and its own `Retry-After` window. Order is kept
per target only with `push.target.concurrency=1` and no retries. Keys: see
`sluice.connectors.http` and docs/http.md.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from sluice.connectors.http import _request as rq
from sluice.connectors.http._config import KEYS, HttpConfig, parse
from sluice.push import (
    Limits,
    Outcome,
    PushBoard,
    PushRuntime,
    parse_retry_after,
)
from sluice.sdk import (
    BatchId,
    ConfigException,
    ConnectException,
    ConnectRecord,
    SinkConnector,
    SinkTask,
)
from sluice.sdk.extras import HTTP, require

_COUNTERS = ("read", "succeeded", "failed", "retried", "dead_lettered", "parked", "timeouts")


class DeliveryFailed(ConnectException):
    """A record the HTTP sink gave up on (its dead letter names this class)."""

    code = "http.delivery"


class HttpSinkTask(SinkTask):
    """Hands its records of one micro-batch to a push runtime and settles each before `flush`
    returns: delivered, dead-lettered, or parked in the retry topic."""

    def start(self, config: Mapping[str, str]) -> None:
        self.name = self.context.connector_name or "http-sink"
        self.config: HttpConfig = parse(config, self.name)
        self.deadline = time.time() + self.config.flush_s
        board = self.context.push_board_path
        self.board = PushBoard(board) if board else None
        self.runtime = PushRuntime(
            self._send,
            policy=self.config.policy,
            limits=self.config.limits,
            timeout_s=self.config.timeout_s,
        )
        self.runtime.deadline = self.deadline
        self.runtime.on_loop_start = self._open_client
        self.runtime.on_loop_stop = self._close_client
        self._reported = dict.fromkeys(_COUNTERS, 0)
        self._report_lock = threading.Lock()
        self._applied: Limits | None = None
        self._tune()
        self.runtime.start()
        self._pending: dict[str, list[ConnectRecord]] = {}
        self._pending_bytes: dict[str, int] = {}
        self._values: dict[str, dict[str, str]] = {}  # URL -> its placeholders' values
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="sluice-push-board", daemon=True)
        self._ticker.start()

    # -- the event loop's side --------------------------------------------------------------------
    async def _open_client(self) -> None:
        # aiohttp, not httpx: at 64 requests in flight httpx spent ~4.5 ms of CPU per request
        # and aiohttp ~0.17 ms (bench/push.py), which decides how close a task gets to the
        # Little's-law bound on two cores.
        aiohttp = require(HTTP, "HttpSinkConnector")

        if self.config.verify is True:
            tls: ssl.SSLContext | bool = ssl.create_default_context()
        elif self.config.verify is False:
            tls = False
        else:  # a CA bundle
            tls = ssl.create_default_context(cafile=str(self.config.verify))
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=tls)
        # No client timeout: the runtime cancels an attempt at timeout.ms (asyncio.wait_for).
        self.client = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("Content-Type",),
        )

    async def _close_client(self) -> None:
        await self.client.close()

    async def _send(self, target: str, request: rq.Request) -> Outcome:
        async with self.client.request(
            request.method, request.url, headers=request.headers, data=request.body
        ) as response:
            status = response.status
            if 200 <= status < 300:
                await response.read()  # keep the connection reusable
                return Outcome(True, status)
            text = (await response.text(errors="replace"))[:200].strip()
            retry_after = parse_retry_after(response.headers.get("retry-after"), time.time())
        return Outcome(False, status, retry_after, f"HTTP {status}" + (f": {text}" if text else ""))

    # -- live limits and progress -----------------------------------------------------------------
    def _tune(self) -> None:
        """Apply this task's share of the connector's limits (the config's, as changed live)."""
        if self.board is None:
            return
        budget = replace(self.config.limits, **self.board.settings(self.name))
        share = budget.share(self.board.live_tasks(self.name))
        if share != self._applied:
            self.runtime.set_limits(**asdict(share))
            self._applied = share

    def _report(self) -> None:
        if self.board is None:
            return
        with self._report_lock:  # the ticker and flush both report
            progress = self.runtime.progress()
            increments = {k: progress[k] - self._reported[k] for k in _COUNTERS}
            self.board.report(self.name, self.context.task_id, progress, increments)
            self._reported = {k: progress[k] for k in _COUNTERS}

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._tune()
                self._report()
            except Exception:  # a busy board is retried next second; delivery goes on
                continue

    # -- the task's side --------------------------------------------------------------------------
    def put(self, records: list[ConnectRecord]) -> None:
        for record in records:
            if rq.is_parked(record):
                try:
                    request, attempts, first, due = rq.unpark(self.config, record)
                except LookupError as exc:  # the URL template changed under it
                    self.context.dead_letter(
                        record, str(exc), exception_class=_class(DeliveryFailed)
                    )
                    continue
                target = rq.target_of(request.url, self.config.target_by)
                self.runtime.submit(
                    target, request, attempts=attempts, first_epoch=first, due_epoch=due
                )
                continue
            try:
                values = rq.url_values(self.config, record)
                url = rq.render_url(self.config, values)
            except LookupError as exc:
                self.context.dead_letter(record, str(exc), exception_class=_class(DeliveryFailed))
                continue
            self._values.setdefault(url, values)
            if self.config.batch_records == 1:
                self._submit(url, [record])
            else:
                self._batch(url, record)

    def _batch(self, url: str, record: ConnectRecord) -> None:
        size = len(rq.raw_body(record.value)[0])
        group = self._pending.setdefault(url, [])
        if group and self._pending_bytes.get(url, 0) + size > self.config.batch_bytes:
            self._submit(url, group)
            group = self._pending[url] = []
            self._pending_bytes[url] = 0
        group.append(record)
        self._pending_bytes[url] = self._pending_bytes.get(url, 0) + size
        if len(group) >= self.config.batch_records:
            self._submit(url, group)
            self._pending[url] = []
            self._pending_bytes[url] = 0

    def _submit(self, url: str, records: list[ConnectRecord]) -> None:
        # one URL, one set of placeholder values (the first record's: they render it the same)
        request = rq.build(self.config, url, records, self._values.get(url))
        self.runtime.submit(rq.target_of(url, self.config.target_by), request)

    def flush(self, batch_id: BatchId) -> Any:
        for url, group in self._pending.items():
            if group:
                self._submit(url, group)
        self._pending.clear()
        self._values.clear()
        result = self.runtime.drain(self.deadline)
        for item in result.dead:
            request: rq.Request = item.payload
            for record in request.records:
                self.context.dead_letter(
                    record,
                    rq.without_url(item.reason, request.url),
                    exception_class=_class(DeliveryFailed),
                    headers={
                        "__connect.errors.attempts": str(item.attempts),
                        "__connect.errors.http.status": str(item.last_status or ""),
                    },
                )
        for item in result.parked:
            request = item.payload
            self.context.produce(
                self.config.retry_topic,
                key=request.key.encode(),
                value=request.body,
                headers=rq.park_headers(
                    self.config,
                    request,
                    item.attempts,
                    item.first_epoch or time.time(),
                    item.due_epoch,
                    item.last_status,
                    item.last_error or item.reason,
                ),
            )
        # The counters of what this batch settled reach the board before the batch commits, so
        # a kill -9 can only make them count a replayed delivery twice, never miss a committed one.
        with contextlib.suppress(Exception):  # progress is best effort; records are settled
            self._report()
        return None

    def stop(self) -> None:
        self._stop.set()
        self.runtime.close()
        self._ticker.join(timeout=5)
        with contextlib.suppress(Exception):  # progress is best effort; records are settled
            self._report()


def _class(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class HttpSinkConnector(SinkConnector):
    """Pushes records to HTTP endpoints: at-least-once, exactly-once in effect for a receiver that
    deduplicates by the idempotency key (see the module docstring)."""

    config_def = KEYS
    task_class = HttpSinkTask
    requires = (HTTP,)
    #: Its tasks run on `sluice.push`: limits tunable live, progress on `GET …/push`.
    push_runtime = True

    def validate(self, config: Mapping[str, str]) -> None:
        parsed = parse(config, self.context.connector_name)
        if parsed.batch_records > 1 and parsed.body == "cloudevents" and parsed.ce_mode == "binary":
            raise ConfigException(
                "cloudevents.mode",
                "binary mode sends one event per request; set batch.max.records=1 or use "
                "structured mode",
            )
        topics = self.config_def.parse(config)["connect.topicnames"]
        if parsed.retry_topic in topics:
            raise ConfigException(
                "retry.topic.name", f"{parsed.retry_topic!r} is also in connect.topicnames"
            )

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self.parsed = parse(config, self.context.connector_name)

    def owned_topics(self) -> list[str]:
        return [self.parsed.retry_topic]

    def delayed_topics(self) -> dict[str, str]:
        # a parked request is read back once due: parked once per attempt, not once per read
        return {self.parsed.retry_topic: rq.DUE_HEADER}

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
