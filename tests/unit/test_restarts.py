"""The automatic restarts after a transient Spark failure (`sluice.runtime.herder.restarts`): which
failures qualify, the backoff, the attempt limit and when the count starts again."""

from __future__ import annotations

from sluice.runtime.herder.restarts import TransientRestarts, is_transient, requested_reason

CONNECT_BACK = (
    "PythonException: org.apache.spark.SparkException: Python worker failed to connect back."
)
CRASHED = "SparkException: Python worker exited unexpectedly (crashed)"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_spark_failures_of_the_machine_are_transient() -> None:
    assert is_transient(f"StreamingQueryException: Job aborted\n\n{CONNECT_BACK}")
    assert is_transient(CRASHED)
    assert is_transient("ExecutorLostFailure (executor 1 exited caused by one of the tasks)")
    assert not is_transient("ValueError: line 3 is not JSON")
    assert not is_transient("WriterFenced: fenced: writer 'c' epoch 1 may no longer commit")


def test_a_task_that_asks_for_a_restart_gets_one() -> None:
    from sluice.connectors.cdc._evolve import SchemaChanged
    from sluice.sdk import ConnectException, RestartRequested

    asked = RestartRequested("table t changed its columns while running (added: x)")
    assert str(asked).startswith("table t changed") and asked.code == "connect.restart_requested"
    # as Spark reports it: the Python error's text inside the query's failure
    assert is_transient(f"StreamingQueryException: ...\nConnectException: {asked}")
    assert is_transient(str(SchemaChanged("s.t", "added: x")))
    assert not is_transient(str(ConnectException("table t changed its columns while running")))


def test_the_reason_of_a_requested_restart_is_found_in_sparks_failure_text() -> None:
    from sluice.connectors.cdc._evolve import SchemaChanged

    asked = SchemaChanged("shop.orders", "ADD COLUMN qty")
    failure = (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
        'perform latestOffset: Traceback (most recent call last):\n  File "x.py", line 3\n'
        f"sluice.connectors.cdc._evolve.SchemaChanged: {asked}\n"
    )
    reason = requested_reason(failure)
    assert reason is not None and reason.startswith(
        "schema of shop.orders changed: ADD COLUMN qty; restarting the source"
    ), reason
    assert "Traceback" not in reason and "(restart requested)" not in reason
    assert requested_reason("ValueError: line 3 is not JSON") is None


def test_restarts_back_off_and_stop_after_the_limit() -> None:
    clock = _Clock()
    restarts = TransientRestarts(clock)
    config = {"restart.transient.max.attempts": "3", "restart.transient.backoff.max.ms": "3000"}
    restarts.started("c")
    delays = []
    for _ in range(3):
        restart = restarts.schedule("c", CRASHED, config)
        assert restart is not None
        delays.append((restart.attempt, restart.of, restart.delay_s))
        assert restarts.waiting("c") and restarts.due() == []
        clock.now += restart.delay_s
        assert not restarts.waiting("c")
        assert restarts.due() == ["c"] and restarts.due() == []  # returned once
        restarts.started("c")
        clock.now += 1  # fails again a second later
    assert delays == [(1, 3, 1.0), (2, 3, 2.0), (3, 3, 3.0)]  # doubling, capped at 3 s
    assert restarts.schedule("c", CRASHED, config) is None  # used up: it stays FAILED


def test_a_query_that_ran_past_the_longest_backoff_starts_a_new_series() -> None:
    clock = _Clock()
    restarts = TransientRestarts(clock)
    config = {"restart.transient.max.attempts": "1", "restart.transient.backoff.max.ms": "5000"}
    restarts.started("c")
    assert restarts.schedule("c", CONNECT_BACK, config) is not None
    clock.now += 1
    restarts.due()
    restarts.started("c")
    clock.now += 6  # ran 6 s > 5 s without failing
    restart = restarts.schedule("c", CONNECT_BACK, config)
    assert restart is not None and restart.attempt == 1


def test_no_automatic_restart_for_other_failures_or_when_turned_off() -> None:
    restarts = TransientRestarts(_Clock())
    assert restarts.schedule("c", "ValueError: bad record", {}) is None
    assert restarts.schedule("c", CRASHED, {"restart.transient.max.attempts": "0"}) is None
    first = restarts.schedule("d", CRASHED, {})  # defaults: 5 attempts, from 1 s
    assert first is not None and (first.attempt, first.of, first.delay_s) == (1, 5, 1.0)


def test_requested_restarts_are_at_once_and_do_not_use_up_the_transient_attempts() -> None:
    from sluice.runtime.herder.restarts import REQUESTED_LIMIT
    from sluice.sdk import RestartRequested

    clock = _Clock()
    restarts = TransientRestarts(clock)
    config = {"restart.transient.max.attempts": "2"}
    asked = f"ConnectException: {RestartRequested('table t changed its columns (added: x)')}"
    restarts.started("c")
    for n in range(1, 7):  # a migration's six ALTERs, a second apart
        restart = restarts.schedule("c", asked, config)
        assert restart is not None and restart.delay_s == 0 and restart.attempt == n
        assert restarts.due() == ["c"]
        restarts.started("c")
        clock.now += 1
    crash = restarts.schedule("c", CRASHED, config)  # the machine's attempts are all there
    assert crash is not None and (crash.attempt, crash.of, crash.delay_s) == (1, 2, 1.0)
    restarts.due()
    for _ in range(REQUESTED_LIMIT - 6):  # a task asking again and again gets nowhere …
        assert restarts.schedule("c", asked, config) is not None
    assert restarts.schedule("c", asked, config) is None  # … and stays FAILED
    assert (
        TransientRestarts(clock).schedule("d", asked, {"restart.transient.max.attempts": "0"})
        is None
    )


def test_a_server_that_is_away_restarts_with_backoff_for_a_bounded_time() -> None:
    from sluice.runtime.herder.restarts import is_retriable

    gave_up = (
        "ConnectException: put failed after 9 retries in 2000 ms (errors.retry.timeout=2000): "
        "orders: db unavailable\nsluice.sdk._errors.RetriableException: orders: db unavailable"
    )
    assert is_retriable(gave_up)
    assert is_retriable(gave_up.splitlines()[0])  # as Spark reports it: the last error only
    assert is_retriable("OperationalError: database or disk is full")
    assert not is_retriable("ValueError: bad record")
    # a broker away or busy, as a query's failure names it: the subclass, not RetriableException
    # (found: a private Kafka's coordinator still loading FAILED a new source for good)
    assert is_retriable(
        "sluice.bus.base.BusUnavailable: kafka bootstrap.servers=127.0.0.1:35307: cannot start "
        "the producer of sluice-src/609c6195c555#0: Failed to initialize Producer ID: Broker: "
        "Coordinator load in progress (COORDINATOR_LOAD_IN_PROGRESS)"
    )
    assert is_retriable("sluice.clients.rocketmq.RocketMQUnavailable: code 2: broker busy")
    # a config error is the config's, whatever driver error it quotes
    assert not is_retriable("ConfigException: connection.password: OperationalError: refused")
    clock = _Clock()
    restarts = TransientRestarts(clock)
    config = {"restart.retriable.timeout.ms": "30000", "restart.transient.backoff.max.ms": "4000"}
    restarts.started("c")
    delays = []
    while (restart := restarts.schedule("c", gave_up, config)) is not None:
        assert restart.kind == "retriable" and restart.of == 0  # bounded by time, not count
        delays.append(restart.delay_s)
        clock.now += restart.delay_s
        restarts.started("c")
        clock.now += 1  # fails again a second later
    assert delays[:4] == [1.0, 2.0, 4.0, 4.0]  # doubling, capped
    assert 25 <= sum(delays) + len(delays) <= 35  # … for restart.retriable.timeout.ms
    assert restarts.schedule("d", gave_up, {"restart.retriable.timeout.ms": "0"}) is None
    assert restarts.schedule("d", gave_up, {"restart.transient.max.attempts": "0"}) is None
    forever = {"restart.retriable.timeout.ms": "-1"}
    for _ in range(100):
        assert restarts.schedule("e", gave_up, forever) is not None
        clock.now += 1


def test_hasten_makes_the_retriable_restarts_due_now() -> None:
    clock = _Clock()
    restarts = TransientRestarts(clock)
    restarts.schedule("c", "OperationalError: connection refused", {})
    restarts.schedule("d", CRASHED, {})  # the machine's: keeps its backoff
    assert restarts.waiting("c") and restarts.waiting("d")
    assert restarts.hasten() == ["c"]
    assert not restarts.waiting("c") and restarts.waiting("d")


def test_a_start_that_met_a_server_away_is_retriable_unless_the_config_is_at_fault() -> None:
    import sqlite3

    from sluice.runtime.herder.restarts import retriable_start_error
    from sluice.sdk import ConfigException, RetriableException

    def raised(make):  # the exception with the chain Python gives it
        try:
            make()
        except Exception as exc:
            return exc
        raise AssertionError("did not raise")

    def down() -> None:
        try:
            raise RetriableException("cannot connect to db: Connection refused")
        except RetriableException as exc:
            raise ConfigException("connection.url", exc.message) from None

    def wrong_password() -> None:
        try:
            raise sqlite3.OperationalError("password authentication failed")
        except sqlite3.OperationalError:
            raise ConfigException("connection.password", "refused the credentials") from None

    def store_away() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    assert retriable_start_error(raised(down))
    assert not retriable_start_error(raised(wrong_password))
    assert retriable_start_error(raised(store_away))
    assert retriable_start_error(ConnectionRefusedError("refused"))
    assert retriable_start_error(OSError(28, "No space left on device"))
    assert not retriable_start_error(ValueError("no"))


def test_a_sink_waiting_for_its_topics_first_schema_is_started_again_without_limit() -> None:
    """`SchemaNotRegisteredError` is "not yet", not a failure: restarts every ≤ 5 s, no count or
    time limit, none of the other kinds' attempts used; off only with max.attempts=0."""
    from sluice.engine.converters import SchemaNotRegisteredError
    from sluice.runtime.herder.restarts import WAIT_CAP_S, is_waiting

    clock = _Clock()
    restarts = TransientRestarts(clock)
    waiting = (
        f"SchemaNotRegisteredError: {SchemaNotRegisteredError('value.converter', 'no schema')}"
    )
    assert is_waiting(waiting)
    assert not is_waiting(f"ConfigException: value.converter: x\n  {waiting}")  # cause only
    delays = []
    for _ in range(200):  # far past the 10 minutes a retriable failure gets
        restart = restarts.schedule("sink", waiting, {})
        assert restart is not None and restart.kind == "waiting" and restart.of == 0
        delays.append(restart.delay_s)
        clock.now += restart.delay_s
        assert restarts.due() == ["sink"]
    assert delays[:4] == [1.0, 2.0, 4.0, WAIT_CAP_S] and max(delays) == WAIT_CAP_S
    crash = restarts.schedule("sink", CRASHED, {"restart.transient.max.attempts": "2"})
    assert crash is not None and (crash.attempt, crash.of) == (1, 2)  # none used by the waits
    off = {"restart.transient.max.attempts": "0"}
    assert TransientRestarts(clock).schedule("other", waiting, off) is None
