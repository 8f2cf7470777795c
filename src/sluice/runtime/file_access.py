"""`file.allowed.dirs`: the folders a connector's file paths may point into.

A REST client that may create connectors could otherwise read `/etc/shadow` through a file
source. Every key a connector declares `type="path"` is checked against the worker's
`file.allowed.dirs` (comma-separated folders; empty: no limit) after symlinks are resolved, and
so is the file a SQLAlchemy SQLite URL in any key names (`sqlite:////data/catalog.db`: the
Iceberg sink's catalog), which a connector creates and writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from sluice.sdk import ConfigException

ALLOWED_DIRS_KEY = "file.allowed.dirs"
#: SQLAlchemy's SQLite URLs (`sqlite:///relative.db`, `sqlite:////absolute.db`, with a driver).
_SQLITE_URL = re.compile(r"sqlite(?:\+\w+)?:///([^?]*)")


def allowed_dirs(worker_props: Mapping[str, str]) -> list[str]:
    """The real paths of the allowed folders ([] = anything goes)."""
    raw = worker_props.get(ALLOWED_DIRS_KEY, "")
    return [
        os.path.realpath(os.path.expanduser(d.strip()))
        for d in raw.replace(";", ",").split(",")
        if d.strip()
    ]


def check_allowed_paths(
    connector_class: type, config: Mapping[str, str], worker_props: Mapping[str, str]
) -> None:
    """Raise `ConfigException` naming the key if a path key points outside the allowed folders."""
    folders = allowed_dirs(worker_props)
    if not folders:
        return
    config_def = getattr(connector_class, "config_def", None)
    for name, key in getattr(config_def, "keys", {}).items():
        value = config.get(name, "")
        sqlite = _SQLITE_URL.match(value.strip())
        if sqlite is not None:
            value = sqlite.group(1)
        elif key.type != "path":
            continue
        if not value.strip():
            continue
        real = os.path.realpath(os.path.expanduser(value.strip()))
        if not any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in folders):
            raise ConfigException(
                name,
                f"{value!r} is outside the folders this worker allows "
                f"({ALLOWED_DIRS_KEY}={','.join(folders)})",
                suggestion=f"use a file under {folders[0]}, or ask the operator to add its "
                f"folder to {ALLOWED_DIRS_KEY}",
            )
