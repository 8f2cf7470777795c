"""Crash-safe small files: a JSON state file replaced atomically, and a durable rename.

Shared by the SDK's staged-append protocol and the lake sinks, which both keep a pending/done
state beside the files they publish and must survive kill -9 between any two steps.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["fsync_dir", "read_state", "write_state"]


def fsync_dir(path: str) -> None:
    """Make the renames and creations inside `path` durable (a rename is durable once its
    directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_state(path: str) -> dict[str, Any]:
    """The JSON object at `path`, or `{}` when no state was written yet."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def write_state(path: str, state: dict[str, Any]) -> None:
    """Replace the JSON object at `path` atomically and durably (write, fsync, rename, fsync)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
