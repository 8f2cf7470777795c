"""A blocking NATS JetStream client for tests and benchmarks (nats-py, one `asyncio.run` per call):
make streams, publish many messages, read a whole stream back."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import nats
from nats.js import api


@dataclass(frozen=True)
class Message:
    """A message as a stream stored it."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]


class Nats:
    """Calls on one server; each call connects, works and closes."""

    def __init__(self, url: str, **options: Any) -> None:
        self.url, self.options = url, options

    def _run(self, work: Any) -> Any:
        async def main() -> Any:
            nc = await nats.connect(self.url, **self.options)
            try:
                return await work(nc.jetstream(timeout=30))
            finally:
                await nc.close()

        return asyncio.run(main())

    def add_stream(self, name: str, subjects: list[str], **config: Any) -> None:
        async def work(js: Any) -> None:
            await js.add_stream(name=name, subjects=subjects, **config)

        self._run(work)

    def delete_stream(self, name: str) -> None:
        async def work(js: Any) -> None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)

        self._run(work)

    def publish(self, messages: list[tuple[str, bytes, dict[str, str] | None]]) -> None:
        """Publish `(subject, data, headers)`s and wait for every acknowledgement."""

        async def work(js: Any) -> None:
            for i in range(0, len(messages), 5000):
                futures = [
                    await js.publish_async(s, d, headers=h) for s, d, h in messages[i : i + 5000]
                ]
                await asyncio.gather(*futures)

        self._run(work)

    def count(self, stream: str) -> int:
        async def work(js: Any) -> int:
            return (await js.stream_info(stream)).state.messages

        return self._run(work)

    def read(self, stream: str) -> list[Message]:
        """Every message of `stream`, in sequence order."""

        async def work(js: Any) -> list[Message]:
            info = await js.add_consumer(
                stream,
                config=api.ConsumerConfig(
                    ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=30
                ),
            )
            sub = await js.pull_subscribe_bind(consumer=info.name, stream=stream)
            out, left = [], info.num_pending
            while left > 0:
                for m in await sub.fetch(min(left, 5000), timeout=30):
                    out.append(
                        Message(
                            m.metadata.sequence.stream, m.subject, m.data, dict(m.headers or {})
                        )
                    )
                    left -= 1
            await js.delete_consumer(stream, info.name)
            return out

        return self._run(work)
