"""Before/after in one run: a bench script against two source trees, rounds interleaved.

Each round runs the benchmark twice in fresh processes, once with `PYTHONPATH=<base>/src` (the
baseline checkout, e.g. `git worktree add /tmp/sluice-base <commit>`) and once with this tree's
`src`, alternating which goes first, so machine noise hits both alike. It reads the step table the
bench prints (`name  seconds  …`) and prints each step's median seconds and the ratio new / base.

Usage:
  python bench/ab.py --base /tmp/sluice-base [--rounds 3] -- bench/file_pipeline.py --lines 2000000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

_ROW = re.compile(r"^(\S.*?)\s{2,}(\d+\.\d+)\s+[\d,]+\s")  # "hop 1: …   4.12   1,093,625 …"


def timed(src: str, command: list[str]) -> dict[str, float]:
    """Run `command` with `src` first on the import path; the seconds of each table row."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    done = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{src}: {' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return {m[1]: float(m[2]) for line in done.stdout.splitlines() if (m := _ROW.match(line))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="checkout of the baseline commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("command", nargs="+", help="bench script and its arguments")
    args = parser.parse_args()
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src")
    trees = {"base": os.path.join(args.base, "src"), "new": here}
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for i in range(args.rounds):
        for name in ("base", "new") if i % 2 == 0 else ("new", "base"):
            runs[name].append(timed(trees[name], args.command))
            print(f"round {i + 1} {name}: {runs[name][-1]}", flush=True)
    print(f"\n{'step':<36}{'base s':>9}{'new s':>9}{'new/base':>10}   (medians of {args.rounds})")
    for step in runs["base"][0]:
        base = statistics.median(r[step] for r in runs["base"])
        new = statistics.median(r[step] for r in runs["new"])
        print(f"{step:<36}{base:>9.2f}{new:>9.2f}{new / base:>10.2f}")
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
