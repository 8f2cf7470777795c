"""kill -9 a process running file source → topic → file sink; restart; nothing lost or doubled.

The suite kills once per pipeline kind (fused and JVM path), at a random sink fill level, over
`SLUICE_FILE_LINES` lines (200,000 by default). `SLUICE_CRASH_ROUNDS=N` kills at N random fill
levels and once more at a random instant soon after start-up; `make crash-file` runs 3 rounds over
1,000,000 lines. `SLUICE_CRASH_SEED` fixes the random choices."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.orphans import spawn

# more than the default 300 s on a loaded 2-core machine: a kill -9 and restarts of a Spark process
# copying 200,000 lines
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHILD = Path(__file__).with_name("pipeline_child.py")
LINES = int(os.environ.get("SLUICE_FILE_LINES", "200000"))
ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "1"))


def _start(root: Path, src: Path, dst: Path, log: Path, fused: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    # A session of its own, so kill -9 takes the JVM (a child of the driver) down with it.
    return spawn(
        [sys.executable, str(CHILD), str(root), str(src), str(dst), fused],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@pytest.mark.parametrize("fused", ["true", "false"])
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path, fused: str) -> None:
    src, dst, root, log = (
        tmp_path / "in.txt",
        tmp_path / "out.txt",
        tmp_path / "store",
        tmp_path / "child.log",
    )
    seed = int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns()))
    rng = random.Random(seed)
    with open(src, "w", encoding="utf-8") as f:
        for i in range(LINES):
            f.write(f"{i:07d} {'ünïcode ' * (i % 4)}{rng.random():.6f}\n")
    total = _size(src)
    kills: list[str] = []
    # Kill at random sink fill levels (mid-batch, mid-commit, ...) and, with more than one
    # round, once at a random instant soon after start-up, before anything may have reached the
    # sink.
    fills = sorted(rng.uniform(0.05, 0.9) for _ in range(ROUNDS))
    plans: list[tuple[str, float]] = [("fill", f) for f in fills]
    if ROUNDS > 1:
        plans.insert(rng.randrange(len(plans) + 1), ("time", rng.uniform(2.0, 12.0)))
    for kind, amount in plans:
        before = _size(dst)
        proc = _start(root, src, dst, log, fused)
        if kind == "time":
            deadline = time.monotonic() + amount
            wait_until(lambda d=deadline, p=proc: time.monotonic() >= d or p.poll() is not None, 60)
        else:
            target = max(before + 1, int(total * amount))
            wait_until(
                lambda t=target, p=proc: _size(dst) >= t or p.poll() is not None,
                400,
                f"sink to reach {target} bytes",
            )
        assert proc.poll() is None, f"child exited early:\n{log.read_text()[-3000:]}"
        _kill9(proc)
        kills.append(f"{kind}={amount:.2f} at sink={_size(dst)}/{total}")
    proc = _start(root, src, dst, log, fused)
    try:
        wait_until(lambda: _size(dst) >= total or proc.poll() is not None, 600, "sink complete")
        assert proc.poll() is None, f"child failed:\n{log.read_text()[-3000:]}"
    finally:
        _kill9(proc) if proc.poll() is None else None
    print(f"seed {seed}; kills:", "; ".join(kills))
    assert _size(dst) == total, kills
    assert dst.read_bytes() == src.read_bytes(), kills
