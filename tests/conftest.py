"""Shared fixtures (one quiet local SparkSession for the whole test session), `wait_until`, and
how the suite runs on two pytest-xdist workers (`make test`: `-n 2 --dist loadgroup`).

Two workers: the modules of `SERIAL` (the ones that kill processes, cut or restart servers, run
clusters of workers, or fill the machine on purpose) form one xdist group, which runs in the order
listed on one worker, first; every other module is a group of its own, so that its module- and
session-scoped fixtures (a worker process, a SparkSession) are built once on the worker that runs
it. The rest goes to the other worker, heaviest first, and to the first once it is done with the
serial group. Without xdist the marks change nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI (`make test`, `make test-quick`) runs Hypothesis with this profile: the same examples every
# run, so that a failure is reproducible and a green run stays green.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Spark's Python workers import connector classes defined in test modules: let them find `tests`.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p
)


#: when the running test's pytest-timeout ends, less a margin (None: no test runs, or no timeout)
_TEST_DEADLINE: list[float | None] = [None]
#: what `wait_until` leaves of a test's time for its teardown and report
_MARGIN_S = 15.0


def wait_until(
    predicate: Callable[[], object], timeout: float = 120.0, what: str = "", every: float = 0.1
) -> None:
    """Wait for a condition (not a fixed sleep), checking it every `every` seconds (less often
    when checking costs, e.g. a database query); fail with `what` if it never holds.

    Never waits past the test's own timeout (pytest-timeout, less a margin): a test that would
    hang fails here, naming what it waited for, not with a bare timeout."""
    budget = timeout
    test_deadline = _TEST_DEADLINE[0]
    if test_deadline is not None:
        budget = max(0.0, min(timeout, test_deadline - time.monotonic()))
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    cut = "" if budget >= timeout else f" (cut from {timeout}s: the test's timeout ran out)"
    assert predicate(), f"timed out after {budget:.0f}s{cut} waiting for {what or predicate}"


def whole_lines(path: Path) -> list[str]:
    """The lines a sink has finished writing to `path` (none if it does not exist yet): a sink
    appends while a test reads, so a last line without its newline is still being written."""
    if not path.exists():
        return []
    text = path.read_text()
    return text[: text.rfind("\n") + 1].splitlines()


def _timeout_of(item: pytest.Item) -> float | None:
    """The item's pytest-timeout in seconds (its marker, else the run's setting); None if off."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        value = marker.args[0] if marker.args else marker.kwargs["timeout"]
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        return None
    return seconds if seconds > 0 else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    # pytest-timeout times setup, call and teardown together, from here
    seconds = _timeout_of(item)
    _TEST_DEADLINE[0] = None if seconds is None else time.monotonic() + seconds - _MARGIN_S
    began = time.time()
    try:
        return (yield)
    finally:
        _TEST_DEADLINE[0] = None
        _note_timeline(item, began, time.time())


#: the worst outcome of each test's phases so far (setup, call, teardown), for the timeline
_OUTCOMES: dict[str, str] = {}


_RANK = {"passed": 0, "skipped": 1, "failed": 2}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, object, object]:
    report = yield
    outcome = str(getattr(report, "outcome", "passed"))
    # a failed setup or teardown is the test's outcome too: the worst phase wins
    if _RANK.get(outcome, 2) >= _RANK.get(_OUTCOMES.get(item.nodeid, "passed"), 2):
        _OUTCOMES[item.nodeid] = outcome
    return report


def _note_timeline(item: pytest.Item, began: float, ended: float) -> None:
    """One line per test (xdist worker, start, end, test id, outcome) in `SLUICE_TEST_TIMELINE`
    if set (`make test` sets it): how busy each worker was, which group kept the run going
    longest, and which tests failed while the suite still runs (`python -m tests.timeline`)."""
    path = os.environ.get("SLUICE_TEST_TIMELINE")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    outcome = _OUTCOMES.pop(item.nodeid, "unknown")
    with open(path, "a") as f:  # one short write per line: the two workers' lines do not mix
        f.write(f"{worker}\t{began:.3f}\t{ended:.3f}\t{item.nodeid}\t{outcome}\n")


#: modules (relative to tests/) that run one after another on one xdist worker, in this order:
#: crash (kill -9), outage, distributed, Spark-cluster, push and broker-restarting modules
SERIAL = (
    "e2e/test_push_worker.py",
    "e2e/test_distributed.py",
    "e2e/test_crash_recovery.py",
    "e2e/test_bus_crash.py",
    "e2e/test_spark_cluster.py",
    "e2e/test_bus_outage.py",
    "e2e/test_jdbc_crash.py",
    "e2e/test_cdc_crash.py",
    "e2e/test_mq_outage.py",
    "e2e/test_jdbc_outage.py",
    "e2e/test_distributed_kafka.py",
    "e2e/test_redis_outage.py",
    "e2e/test_rabbitmq_outage.py",
    "e2e/test_replay_crash.py",
    "e2e/test_lake_crash.py",
    "e2e/test_redis_crash.py",
    "e2e/test_rabbitmq_crash.py",
    "e2e/test_mq_crash.py",
    "e2e/test_worker_restart.py",
)
# (test_worker_bus_quickstart and test_kafka_sink_exactly_once kill only workers of their own:
# they run with the rest, which balances the two workers — measured with `tests.timeline` on
# 2026-11-28: the serial group 2,791 s, the rest 2,440 s with them in the serial group.)
#: modules that share workers of their own (tests/e2e/conftest.py: the secured workers): one
#: group, in this order (the OpenAPI run's `/connectors/stop/all` last)
SHARED_GROUPS = {
    "e2e/test_console_browser.py": "secured",
    "e2e/test_ops_security.py": "secured",
    "e2e/test_openapi_conformance.py": "secured",
}
#: the other modules that take longest (measured), started first: the worker that is free
#: takes the next module in collection order, so the long ones must not come last
HEAVY_FIRST = (
    "secured",
    "e2e/test_cli.py",
    "e2e/test_worker.py",
    "integration/test_replicator_connectors.py",
    "integration/test_file_pipeline.py",
    "integration/test_cdc_postgres.py",
    "integration/test_cdc_mysql.py",
)
_TESTS = os.path.dirname(os.path.abspath(__file__))


def _module(item: pytest.Item) -> str:
    return os.path.relpath(str(item.path), _TESTS).replace(os.sep, "/")


def _group(item: pytest.Item) -> str:
    module = _module(item)
    if module in SERIAL:
        return "serial"
    return SHARED_GROUPS.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`: each module its xdist group (`_group`), the serial group first
    (in `SERIAL`'s order), then `HEAVY_FIRST`, then the rest in collection order.

    First of the hook's implementations: xdist's worker turns the `xdist_group` marks into the
    node ids its scheduler groups by in its own implementation of this hook, which must see
    them. (Until 2026-11-28 this hook ran after xdist's and looked at the worker's `dist`, which
    is always "no": no group was ever applied, every module was split over both workers and the
    "serial" modules ran beside everything else.)"""
    # On an xdist worker `dist` is "no" (a worker does not distribute): xdist tells it that the
    # run is `--dist loadgroup` with the `loadgroup` option instead.
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))

    shared = list(SHARED_GROUPS)

    def rank(indexed: tuple[int, pytest.Item]) -> tuple[int, int, int, int]:
        index, item = indexed
        group, module = _group(item), _module(item)
        within = shared.index(module) if module in SHARED_GROUPS else 0
        if group == "serial":
            return (0, SERIAL.index(module), 0, index)
        if group in HEAVY_FIRST:
            return (1, HEAVY_FIRST.index(group), within, index)
        return (2, 0, within, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from sluice.engine.session import build_session

    # Four task slots (slots, not CPUs): an outage test's two sinks retry inside their write
    # tasks for the whole outage, each holding a slot; with two slots a source whose micro-batch
    # was planned just before the outage waited for a slot until the end and never met it (its
    # status showed no retry: test_mq_outage failed so in CI of ef715bb).
    session = build_session(
        {"spark.master": "local[4]", "spark.driver.memory": "2g"}, log_level="ERROR"
    )
    yield session
    session.stop()


@pytest.fixture
def runner(spark: object, tmp_path: object) -> Iterator[object]:
    from sluice.runtime.runner import ConnectorRunner

    r = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=100)
    yield r
    r.close()


#: the micro-batch interval of `paced_runner`
PACE_MS = 1000


@pytest.fixture
def paced_runner(spark: object, tmp_path: object) -> Iterator[object]:
    """A runner (as `runner`, same store folder) whose micro-batches start at most once every
    `PACE_MS`: a source with `read.max.rows=R` copies N records in no less than (N/R - 1)
    intervals, however fast the machine. Outage tests use it to have the copy still running when
    the server goes, by construction rather than by a size guessed for one machine's speed."""
    from sluice.runtime.runner import ConnectorRunner

    r = ConnectorRunner(spark, tmp_path / "store", trigger_interval_ms=PACE_MS)
    yield r
    r.close()


@pytest.fixture(autouse=True)
def _rocketmq_broker(request: pytest.FixtureRequest) -> None:
    """Tests marked `rocketmq` get the test broker (scripts/servers.sh up rocketmq) first."""
    if request.node.get_closest_marker("rocketmq") is not None:
        from tests.integration.bus_helpers import rocketmq_namesrv

        rocketmq_namesrv()


def pytest_configure(config: pytest.Config) -> None:
    # Under xdist the controlling process is the run that uses the servers (tests.servers): its
    # workers, started after this, inherit its pid.
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        os.environ["SLUICE_SERVERS_USER"] = str(os.getpid())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.servers import stop_started

    stop_started()
