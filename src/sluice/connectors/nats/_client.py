"""The NATS client every NATS connector uses: a blocking face over nats-py's asyncio client
(connected as `Settings` say), and the errors it raises. nats-py is imported lazily, so the rest
of sluice does not need it.

nats-py is asyncio-only, while sluice's task methods are plain calls (on the driver between
micro-batches, on executors inside a read or a write). `Session` runs one event loop in a daemon
thread and hands coroutines to it, so the connection keeps answering the server's pings between
calls. A connection that fails is dropped, and the next call connects again: nats-py's own
reconnection is off, so that a server that is away turns into a `RetriableException` the runtime
retries with its backoff (`errors.retry.*`) instead of calls that hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sluice.connectors.nats._config import URL, Settings
from sluice.sdk import ConfigException, ConnectException, RetriableException
from sluice.sdk.extras import NATS, require

T = TypeVar("T")


def nats_module() -> Any:
    """nats-py (the ``nats`` extra), or an error naming the install line."""
    require(NATS, "the NATS connectors")
    import nats
    import nats.js.api  # a submodule the package does not import itself

    return nats


async def _quiet(_exc: Exception) -> None:
    """nats-py logs every failed attempt with a stack trace; the error reaches us anyway."""


def failure(settings: Settings, doing: str, exc: BaseException) -> ConnectException:
    """The sluice error for a nats-py exception: refused credentials are a config error, a
    lost, refused or timed-out connection is retriable, anything else names what failed."""
    nats = nats_module()
    if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in str(exc).lower():
        return ConfigException(
            "nats.password",
            f"{settings.where} refused the credentials while {doing}: {exc}",
            suggestion="check nats.username / nats.password (or nats.token)",
        )
    retriable = (
        nats.errors.NoServersError,
        nats.errors.ConnectionClosedError,
        nats.errors.TimeoutError,
        nats.errors.StaleConnectionError,
        nats.errors.UnexpectedEOF,
        OSError,
        asyncio.TimeoutError,
    )
    if isinstance(exc, retriable):
        return RetriableException(f"{URL}={settings.where}: {doing}: {exc or type(exc).__name__}")
    return ConnectException(f"{URL}={settings.where}: {doing}: {exc}")


class Session:
    """One NATS connection driven by an event loop of its own (a daemon thread).

    `call(fn)` runs ``await fn(js)`` with the JetStream context and returns its result, or raises
    the sluice error for what went wrong (`failure`); after a connection error the next
    call connects afresh.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="nats")
        self._thread.start()
        self._nc: Any = None

    async def _connect(self) -> Any:
        nats = nats_module()
        if self._nc is None or self._nc.is_closed:
            s = self.settings
            options: dict[str, Any] = {
                "connect_timeout": max(1, round(s.timeout_s)),
                "allow_reconnect": False,
                "max_reconnect_attempts": 1,
                "error_cb": _quiet,
            }
            if s.username:
                options |= {"user": s.username, "password": s.password or ""}
            if s.token:
                options["token"] = s.token
            self._nc = await nats.connect(list(s.servers), **options)
        return self._nc

    async def _run(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        nc = await self._connect()
        return await fn(nc.jetstream(timeout=self.settings.timeout_s))

    @property
    def connection(self) -> Any:
        """The nats-py connection, for a coroutine that `call` runs (it is connected then)."""
        return self._nc

    def call(self, doing: str, fn: Callable[[Any], Awaitable[T]]) -> T:
        future = asyncio.run_coroutine_threadsafe(self._run(fn), self._loop)
        try:
            return future.result()
        except ConnectException:
            raise
        except Exception as exc:
            err = failure(self.settings, doing, exc)
            if isinstance(err, RetriableException):
                self._drop()
            raise err from None

    def _drop(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            asyncio.run_coroutine_threadsafe(_close(nc), self._loop).result(10)

    def close(self) -> None:
        self._drop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


async def _close(nc: Any) -> None:
    with contextlib.suppress(Exception):  # already gone: nothing to release
        await nc.close()


def probe(settings: Settings, check: Callable[[Any], Awaitable[None]]) -> None:
    """Connect and run `check(js)` (driver, in `validate`); unreachable → ConfigException."""
    session = Session(settings)
    try:
        session.call("connecting", check)
    except RetriableException as exc:
        raise ConfigException(URL, f"cannot reach NATS at {settings.where}: {exc}") from None
    finally:
        session.close()
