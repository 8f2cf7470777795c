"""JetStream's pull and publish requests at the protocol level, a page at a time.

nats-py's own calls cost a task and a timer per message: `PullSubscription.fetch` awaits each
message with `asyncio.wait_for`, and `JetStreamContext.publish_async` registers a future per
message and parses each acknowledgement as JSON. Measured alone on the 2-core bench machine
(50,000 messages of ~200 bytes, load ~10): `fetch` 3.1k msgs/s against 23.7k/s for the same pull
read through one subscription callback, and `publish_async` 8.4k/s against 28.7k/s for the same
publishes acknowledged through one subscription (bench/README.md). The requests are JetStream's
documented API:

* a pull is a request to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with
  ``{"batch": n, "no_wait": true}``: the server sends up to `n` messages to the reply subject,
  then, if it had fewer, a status message (``404`` no messages, ``408`` request timeout);
* a publish to a stream's subject with a reply subject gets an acknowledgement there:
  ``{"stream": …, "seq": …}`` (``"duplicate": true`` for a repeated ``Nats-Msg-Id``) or
  ``{"error": {"code": …, "description": …}}``, or a ``503`` status when no stream takes the
  subject.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.sdk import ConnectException

_STATUS = "Status"
_END_OF_PULL = ("404", "408")  # fewer messages than asked for: no more now / request expired
_NO_STREAM = "503"  # no responders: no stream takes the subject
_LIMIT_BYTES = 256 * 1024 * 1024  # what one subscription may hold unprocessed
_CLOSE_CHECK_S = 0.2  # how often a wait for answers looks at the connection


async def _answered(nc: Any, answered: asyncio.Future[Any], timeout_s: float) -> Any:
    """`answered`'s result once the server's answers completed it; `asyncio.TimeoutError` after
    `timeout_s`. A connection that is lost meanwhile ends the wait at once with nats-py's
    `ConnectionClosedError` (retriable): nats-py does not end a subscription's pending answers
    when its connection closes, so a pull or a window of publishes would otherwise wait out its
    whole timeout (30 s for a pull) before the outage showed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not answered.done():
        if not nc.is_connected:
            from sluice.connectors.nats._client import nats_module

            raise nats_module().errors.ConnectionClosedError
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError
        await asyncio.wait((answered,), timeout=min(left, _CLOSE_CHECK_S))
    return answered.result()


async def pull(nc: Any, stream: str, consumer: str, want: int, timeout_s: float) -> list[Any]:
    """Up to `want` messages of pull consumer `consumer` of `stream`, in order, in one request
    (``no_wait``: fewer only if the consumer has fewer now). Each page has its own reply
    subject, so nothing of an earlier, abandoned page can mix in."""
    loop = asyncio.get_running_loop()
    msgs: list[Any] = []
    done: asyncio.Future[str] = loop.create_future()

    async def arrived(msg: Any) -> None:
        if done.done():
            return
        if msg.reply:  # a stream message (its reply subject is its $JS.ACK metadata)
            msgs.append(msg)
            if len(msgs) >= want:
                done.set_result("")
        else:  # a status message ends the pull
            done.set_result((msg.headers or {}).get(_STATUS, "?"))

    limit = max(2 * want, 65536)
    sub = await nc.subscribe(
        nc.new_inbox(), cb=arrived, pending_msgs_limit=limit, pending_bytes_limit=_LIMIT_BYTES
    )
    try:
        request = json.dumps({"batch": want, "no_wait": True}).encode()
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, sub.subject)
        status = await _answered(nc, done, timeout_s)
    finally:
        if nc.is_connected:  # a lost connection took its subscriptions with it
            await sub.unsubscribe()
    if status and status not in _END_OF_PULL:
        raise ConnectException(f"pulling from stream {stream!r}: the server answered {status}")
    return msgs


def positions(msgs: Sequence[Any]) -> tuple[pa.Array, pa.Array]:
    """The stream sequences (int64) and stored times (`timestamp[us, UTC]`) of JetStream
    messages, read from their ``$JS.ACK`` reply subjects in Arrow rather than one
    `Msg.metadata` object each. The subject is ``$JS.ACK.<stream>.<consumer>.<delivered>.
    <stream seq>.<consumer seq>.<nanoseconds>.<pending>`` (9 tokens), or with a domain and an
    account hash after ``ACK`` (12 tokens; 11 from older servers)."""
    tokens = pc.split_pattern(pa.array([m.reply for m in msgs], pa.string()), ".")
    seq_at, ns_at = (5, 7) if len(msgs[0].reply.split(".")) == 9 else (7, 9)
    seqs = pc.cast(pc.list_element(tokens, seq_at), pa.int64())
    micros = pc.divide(pc.cast(pc.list_element(tokens, ns_at), pa.int64()), 1000)
    return seqs, micros.cast(pa.timestamp("us", tz="UTC"))


async def publish(
    nc: Any, messages: Sequence[tuple[str, bytes, dict[str, str]]], window: int, timeout_s: float
) -> dict[int, BaseException]:
    """Publish `(subject, data, headers)`s in order, at most `window` unacknowledged at a time,
    and wait for every acknowledgement; returns the index → error of each message the server
    did not store (`NoStreamResponseError`, `APIError`). A window not fully acknowledged within
    `timeout_s` raises `asyncio.TimeoutError`."""
    errors = nats_errors()
    loop = asyncio.get_running_loop()
    refused: dict[int, BaseException] = {}
    state: dict[str, Any] = {}

    async def acked(msg: Any) -> None:
        if not msg.data or b'"error"' in msg.data:  # rare: parse only these
            i = int(msg.subject.rsplit(".", 1)[1])
            refused[i] = _refusal(msg, errors)
        state["left"] -= 1
        if state["left"] == 0 and not state["done"].done():
            state["done"].set_result(None)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(
        f"{inbox}.*",
        cb=acked,
        pending_msgs_limit=max(2 * window, 65536),
        pending_bytes_limit=_LIMIT_BYTES,
    )
    try:
        for first in range(0, len(messages), window):
            chunk = messages[first : first + window]
            state.update(left=len(chunk), done=loop.create_future())
            for i, (subject, data, headers) in enumerate(chunk, first):
                await nc.publish(subject, data, f"{inbox}.{i}", headers)
            await _answered(nc, state["done"], timeout_s)
    finally:
        if nc.is_connected:  # a lost connection took its subscriptions with it
            await sub.unsubscribe()
    return refused


def _refusal(msg: Any, errors: Any) -> BaseException:
    status = (msg.headers or {}).get(_STATUS)
    if not msg.data and status == _NO_STREAM:
        return errors.NoStreamResponseError()
    try:
        err = json.loads(msg.data)["error"]
    except (ValueError, KeyError, TypeError):
        return errors.Error(f"unexpected acknowledgement {msg.data!r} (status {status})")
    return errors.APIError(
        code=err.get("code"), err_code=err.get("err_code"), description=err.get("description")
    )


def nats_errors() -> Any:
    """nats-py's JetStream errors (nats-py is imported lazily)."""
    from sluice.connectors.nats._client import nats_module

    return nats_module().js.errors
