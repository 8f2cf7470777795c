"""How the suite's time was spent per pytest-xdist worker, from the timeline `make test` writes
(`SLUICE_TEST_TIMELINE`, one line per test: worker, start, end, test id, outcome):

    python -m tests.timeline test-reports/timeline.tsv

prints, per worker, its busy time, when its last test ended (from the first test's start) and its
ten longest modules — what to move between the xdist groups of tests/conftest.py when one worker
idles while the other still runs — then every test that did not pass, with its worker and end
time (readable while the suite still runs, before pytest's own summary).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path


def summary(path: Path) -> str:
    rows = []
    not_passed = []
    for line in path.read_text().splitlines():
        worker, began, ended, nodeid, *rest = line.split("\t")
        rows.append((worker, float(began), float(ended), nodeid.split("::", 1)[0]))
        outcome = rest[0] if rest else "unknown"
        if outcome not in ("passed", "unknown"):
            not_passed.append((float(ended), worker, nodeid, outcome))
    if not rows:
        return "no test ran"
    start = min(r[1] for r in rows)
    out = []
    for worker in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == worker]
        modules: collections.Counter[str] = collections.Counter()
        for _, began, ended, module in mine:
            modules[module] += ended - began
        busy = sum(modules.values())
        last = max(r[2] for r in mine) - start
        out.append(f"{worker}: {len(mine)} tests, busy {busy:.0f} s, last ended at {last:.0f} s")
        out.extend(f"  {seconds:7.0f} s  {module}" for module, seconds in modules.most_common(10))
    for ended, worker, nodeid, outcome in sorted(not_passed):
        out.append(f"{outcome.upper()} {nodeid} ({worker}, ended at {ended - start:.0f} s)")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
