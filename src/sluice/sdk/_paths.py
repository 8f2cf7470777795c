"""The pure rule behind the worker's `file.allowed.dirs`: is a path inside one of some folders?

Shared by the runtime (the keys a connector declares `type="path"`) and the client-option policy
(`sluice.sdk._client_options`: a client library's certificate, key or keytab files), so both
judge a path the same way: after `~` is expanded and symlinks are resolved.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

ALLOWED_DIRS_KEY = "file.allowed.dirs"


def allowed_dirs(raw: str) -> tuple[str, ...]:
    """The real paths of the folders of a `file.allowed.dirs` value (`,` or `;` between them);
    () means no limit."""
    return tuple(
        os.path.realpath(os.path.expanduser(d.strip()))
        for d in raw.replace(";", ",").split(",")
        if d.strip()
    )


def inside(path: str, folders: Iterable[str]) -> bool:
    """True when `path` (symlinks resolved, relative to the worker's folder) is one of `folders`
    (real paths, see `allowed_dirs`) or lies under one."""
    real = os.path.realpath(os.path.expanduser(path.strip()))
    return any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in folders)
