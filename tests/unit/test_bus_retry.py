"""The outage retry policy of the bus (pure logic: a fake clock, no broker)."""

from __future__ import annotations

import time

import pytest

from sluice.bus.base import BusUnavailable, retry_outage


class FakeClock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []
        monkeypatch.setattr(time, "monotonic", lambda: self.now)

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def failing(times: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise BusUnavailable(f"broker down (attempt {len(calls)})")
        return "ok"

    return calls, call


def test_retries_with_doubling_pauses_and_a_long_one_after_16_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)
    calls, call = failing(17)
    assert retry_outage("commit", call, 300, sleep=clock.sleep) == "ok"
    assert len(calls) == 18
    assert clock.pauses[:4] == [0.3, 0.6, 1.2, 2.0]
    assert clock.pauses[15] == 10.0 and clock.pauses[16] == 2.0


def test_gives_up_with_the_last_error_when_the_outage_outlasts_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)
    _, call = failing(1_000)
    with pytest.raises(BusUnavailable, match=r"broker down \(attempt \d+\)"):
        retry_outage("commit", call, 20, sleep=clock.sleep)
    assert sum(clock.pauses) <= 20


def test_zero_limit_means_no_retry_and_other_errors_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)
    calls, call = failing(1)
    with pytest.raises(BusUnavailable):
        retry_outage("read", call, 0, sleep=clock.sleep)
    assert len(calls) == 1 and clock.pauses == []

    def broken() -> None:
        raise ValueError("not an outage")

    with pytest.raises(ValueError, match="not an outage"):
        retry_outage("read", broken, 300, sleep=clock.sleep)
    assert clock.pauses == []
