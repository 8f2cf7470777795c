"""An outage of a server, ridden out by a runner's connectors: none may fail meanwhile, and their
status (both REST faces, through a herder over the runner) shows the tasks retrying."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluice.runtime.assembly import build_metrics, build_progress
from sluice.runtime.herder.standalone import StandaloneHerder
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.stores import WorkerParts
from sluice.runtime.worker_config import WorkerConfig
from sluice.store.configs import SqliteConfigStore
from sluice.store.statuses import SqliteStatusStore
from tests.conftest import wait_until


def healthy(runner: Any, during: str = "") -> None:
    """Fail naming the first connector of `runner` whose query failed."""
    for running in runner.running.values():
        failure = running.failure()
        assert failure is None, f"{running.name} failed{during}: {failure[0]}"


def ride_out(runner: Any, seconds: float, restore: Callable[[], None]) -> None:
    """Let `seconds` pass with the server away, checking the connectors stay up; then `restore()`
    the server (also when a connector failed). None or less than none: restore at once (the
    outage already lasted long enough while the test waited for the status to show it)."""
    seconds = max(0.0, seconds)
    until = time.monotonic() + seconds

    def over() -> bool:
        healthy(runner, " during the outage")
        return time.monotonic() >= until

    try:
        wait_until(over, seconds + 30, "the end of the outage", every=0.5)
    finally:
        restore()


def status_herder(runner: Any, folder: Path) -> StandaloneHerder:
    """A standalone herder over the test's runner (its stores in `folder`), so that the test can
    create its connectors through it and read their status on both REST faces."""
    config = WorkerConfig.from_properties({"storePathRootDir": runner.root})
    plugins = PluginRegistry(())
    configs = SqliteConfigStore(folder / "configs.sqlite")
    parts = WorkerParts(runner.bus, runner.stores, runner.push_board)
    progress = build_progress(runner.spark, runner, parts)
    return StandaloneHerder(
        runner.spark,
        config,
        plugins,
        runner=runner,
        configs=configs,
        statuses=SqliteStatusStore(folder / "statuses.sqlite"),
        progress=progress,
        metrics=build_metrics(config, plugins, runner, progress, configs, parts),
        parts=parts,
    )


def retry_notes(rest: Any, name: str) -> dict[int, dict] | None:
    """Task id → retry note of connector `name` as `/v1` shows it, if the RocketMQ face marks the
    same tasks (None if a note came or went between the two requests: ask again). Every task
    must be RUNNING: retrying is not failing."""
    v1 = rest.get(f"/v1/connectors/{name}/status").json()
    rocketmq = rest.get(f"/connectors/{name}/status").json()["body"]
    assert all(t["state"] == "RUNNING" for t in v1["tasks"]), v1
    notes = {t["id"]: t["retrying"] for t in v1["tasks"] if "retrying" in t}
    return notes if set(notes) == {t["id"] for t in rocketmq["tasks"] if "retrying" in t} else None


def await_retrying(rest: Any, names: list[str], seconds: float) -> dict[str, dict]:
    """The first retry note of task 0 of each connector in `names`, waited for up to `seconds`
    (during an outage); each note must say when it began, how often and why.

    Callers keep the server away until every note showed (up to three times the 20 s outage),
    then for what is left of the 20 s: on a loaded machine a source may reach its next `poll`
    or `latest` (where it meets the outage) only after several seconds of micro-batch."""
    seen: dict[str, dict] = {}

    def shown() -> bool:
        for name in names:
            if name not in seen:
                note = (retry_notes(rest, name) or {}).get(0)
                if note is not None:
                    seen[name] = note
        return len(seen) == len(names)

    try:
        wait_until(shown, seconds, f"the status of {names} to show the retries")
    except AssertionError:
        statuses = {n: rest.get(f"/v1/connectors/{n}/status").json() for n in names}
        raise AssertionError(f"only {sorted(seen)} showed their retries: {statuses}") from None
    for note in seen.values():
        assert note["attempts"] >= 1 and note["error"], note
        assert note["since"] / 1000 <= time.time()
    return seen


def await_no_retrying(rest: Any, names: list[str]) -> None:
    """Wait until no task of the connectors in `names` shows a retry note (after an outage)."""
    wait_until(lambda: all(retry_notes(rest, n) == {} for n in names), 60, "the retry notes to go")
