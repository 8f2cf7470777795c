"""Push delivery throughput: the HTTP sink's task (push runtime + aiohttp) against Little's law and
against plain aiohttp and httpx loops with the same concurrency, in the same run, on the same
target (ratios are against the aiohttp loop, the sink's own client).

The target is a small keep-alive HTTP/1.1 server on raw asyncio in a *separate process* (so it
does not share the client's GIL or CPU accounting) that answers every request after a fixed delay.
Two rounds:

1. delay 20 ms, concurrency 64: records/s vs the bound 64 / 0.020 = 3,200/s and vs the plain loop;
2. delay 0 ms: records/s and client CPU per record (process time of this process) vs the plain
   loop.

The sink task is driven directly (`start`, `put`, `flush`, as Spark would on an executor) — one
micro-batch of N records — so the figures are those of the push path, not of Spark.

    .venv/bin/python bench/push.py --records 100000
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import time
from typing import Any

import httpx

from sluice.connectors.http import HttpSinkTask
from sluice.sdk import BatchId, ConnectRecord, SinkTaskContext

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def _serve(sock: socket.socket, delay: float, counter: Any) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                if delay:
                    await asyncio.sleep(delay)
                writer.write(RESPONSE)
                with counter.get_lock():
                    counter.value += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Target:
    """The delay server in a child process."""

    def __init__(self, delay: float) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.counter = multiprocessing.Value("q", 0)
        self.proc = multiprocessing.get_context("fork").Process(
            target=_serve, args=(self.sock, delay, self.counter), daemon=True
        )
        self.proc.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/in"

    def close(self) -> None:
        self.proc.kill()
        self.proc.join()


def plain_loop(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """A plain httpx loop: `concurrency` workers posting one record each; (seconds, CPU s)."""

    async def main() -> None:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:
            it = iter(range(n))

            async def worker() -> None:
                for i in it:
                    r = await client.post(url, content=f"r{i}".encode())
                    r.raise_for_status()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - wall, time.process_time() - cpu


def aiohttp_loop(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """A plain aiohttp loop (the sink's own client): `concurrency` workers posting one record
    each; (seconds, CPU s)."""
    import aiohttp

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            it = iter(range(n))

            async def worker() -> None:
                for i in it:
                    async with session.post(url, data=f"r{i}".encode()) as r:
                        await r.read()
                        r.raise_for_status()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - wall, time.process_time() - cpu


def sink_task(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """The HTTP sink's task over one micro-batch of `n` records; (seconds, CPU s)."""
    task = HttpSinkTask()
    task.context = SinkTaskContext(connector_name="bench", task_id=0, batch_id=BatchId("b", 0))
    records = [
        ConnectRecord(
            value=f"r{i}",
            topic="t",
            partition={"topic": "t", "queueId": "0"},
            offset={"queueOffset": i + 1},
        )
        for i in range(n)
    ]
    cpu, wall = time.process_time(), time.perf_counter()
    task.start(
        {
            "connect.topicnames": "t",
            "url": url,
            "push.concurrency": str(concurrency),
            "push.target.concurrency": str(concurrency),
            "push.queue.limit": "10000",
            "push.flush.max.ms": "3600000",
            "timeout.ms": "60000",  # a loaded machine must not turn slowness into retries
        }
    )
    for i in range(0, n, 10_000):
        task.put(records[i : i + 10_000])
    task.flush(task.context.batch_id)
    task.stop()
    elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
    assert not task.context.dead_letters and not task.context.produced, "not all delivered"
    return elapsed, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument(
        "--httpx-records",
        type=int,
        default=5000,
        help="records for the plain httpx loop (it needs ~4.5 ms of CPU per request)",
    )
    args = parser.parse_args()
    n, c = args.records, args.concurrency
    print(f"records={n} concurrency={c} load={os.getloadavg()[0]:.1f} cpus={os.cpu_count()}")
    for delay in (args.delay_ms / 1000, 0.0):
        target = Target(delay)
        try:
            rows = []
            runs = (
                ("plain aiohttp loop", aiohttp_loop),
                ("sluice HttpSinkTask", sink_task),
                ("plain httpx loop", plain_loop),
            )
            for name, run in runs:
                count = min(n, args.httpx_records) if run is plain_loop else n
                before = target.counter.value
                seconds, cpu = run(target.url, count, c)
                sent = target.counter.value - before
                assert sent == count, f"the target counted {sent} requests, not {count}"
                rows.append((name, count, seconds, cpu))
            bound = c / delay if delay else float("nan")
            print(f"\ntarget delay {delay * 1000:.0f} ms (Little's-law bound {bound:,.0f}/s)")
            base = rows[0][2] / rows[0][1]  # seconds per record of the aiohttp loop
            for name, count, seconds, cpu in rows:
                rate = count / seconds
                share = f"{rate / bound:.0%} of bound, " if delay else ""
                print(
                    f"  {name:22s} {seconds:7.2f} s {rate:9,.0f}/s  {share}"
                    f"{base * rate:.2f}x plain, CPU {cpu / count * 1e6:6.0f} µs/record"
                )
        finally:
            target.close()


if __name__ == "__main__":
    main()
