"""Reads what a query's Spark checkpoint says was last committed.

Spark tells a source that a micro-batch committed only when it plans the *next* one, so the
positions a reader saved on `commit(end)` can trail the checkpoint by one batch. After a query
stops, its checkpoint is the truth: the runner copies the last committed batch's end offsets into
the position store, so a fresh run (an update, an offsets reset) starts exactly where it ended.
"""

from __future__ import annotations

import json
import os


def last_committed_offsets(checkpoint: str) -> list[dict] | None:
    """The end offsets (one per source, as the readers serialised them) of the last micro-batch
    in `commits/`, or None if no batch committed yet."""
    try:
        batches = [int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit()]
    except FileNotFoundError:
        return None
    if not batches:
        return None
    with open(os.path.join(checkpoint, "offsets", str(max(batches))), encoding="utf-8") as f:
        lines = f.read().splitlines()
    # line 0 is the log version ("v1"), line 1 the batch metadata, then one line per source
    return [json.loads(line) for line in lines[2:] if line.strip() and line.strip() != "-"]
