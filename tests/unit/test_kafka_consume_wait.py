"""`next_consume_wait`: the timeouts of the `Consumer.consume` calls that read a range."""

from __future__ import annotations

from sluice.clients.kafka import CONSUME_WAIT_S, next_consume_wait


def test_the_first_wait_and_a_wait_after_messages_are_short() -> None:
    short, _ = CONSUME_WAIT_S
    assert next_consume_wait(None, False) == short
    assert next_consume_wait(0.16, True) == short


def test_waits_double_while_nothing_comes_up_to_the_longest() -> None:
    short, longest = CONSUME_WAIT_S
    waits = [next_consume_wait(None, False)]
    for _ in range(10):
        waits.append(next_consume_wait(waits[-1], False))
    assert waits[:3] == [short, short * 2, short * 4]
    assert waits[-1] == longest and max(waits) == longest
