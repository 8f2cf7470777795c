"""A stalled HTTP target with a large backlog: the worker's memory stays bounded, nothing is lost.

The issue's figure: 1M records (~2 KB each, ~1.9 GiB) wait in a topic while the target hangs every
request for 60 s; then it answers at once. A real worker process (embedded bus, local[2]) runs a
file source into the topic and the HTTP sink out of it; the scenario itself is
`tests/e2e/push_stall.py` (the suite runs it with 60k records of 4 KB and a 10 s stall; `make
push-stall` runs this with the issue's figure). Reported: the
peak proportional set size of the worker's Python processes and of its JVM against the backlog,
records parked while stalled, and the time from the target's return to the last record delivered.

    .venv/bin/python bench/push_stall.py --records 1000000 --stall-s 60
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.e2e.push_stall import run_stall
from tests.e2e.worker_process import WorkerProcess
from tests.integration.push_target import serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=2000)
    parser.add_argument("--stall-s", type=float, default=60)
    parser.add_argument("--read-max-rows", type=int, default=500, help="per queue, per batch")
    args = parser.parse_args()
    target, server, _thread = serve()
    with tempfile.TemporaryDirectory(prefix="sluice-push-stall-") as tmp:
        worker = WorkerProcess(Path(tmp)).start()
        try:
            result = run_stall(
                worker,
                target,
                Path(tmp),
                name="stall",
                records=args.records,
                value_bytes=args.value_bytes,
                stall_s=args.stall_s,
                read_max_rows=args.read_max_rows,
                recover_timeout_s=7200,
            )
        finally:
            worker.terminate()
            server.should_exit = True
    lost = args.records - len(result.delivered)
    print(result.describe())
    print(f"lost: {lost}; largest Python process at the peak: {result.peak_detail[0]} MiB")


if __name__ == "__main__":
    main()
