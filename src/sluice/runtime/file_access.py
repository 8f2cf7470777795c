"""What on this machine a connector config may reach: `file.allowed.dirs` (the folders its file
paths may point into) and the client-option policy (which options it may hand to a client
library, `sluice.sdk._client_options`).

A REST client that may create connectors could otherwise read `/etc/shadow` through a file
source. Every key a connector declares `type="path"` is checked against the worker's
`file.allowed.dirs` (comma-separated folders; empty: no limit) after symlinks are resolved, and
so is the file a SQLAlchemy SQLite URL in any key names (`sqlite:////data/catalog.db`: the
Iceberg sink's catalog), which a connector creates and writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sluice.sdk import ClientPolicy, ConfigException
from sluice.sdk._paths import ALLOWED_DIRS_KEY, inside

#: SQLAlchemy's SQLite URLs (`sqlite:///relative.db`, `sqlite:////absolute.db`, with a driver).
_SQLITE_URL = re.compile(r"sqlite(?:\+\w+)?:///([^?]*)")


def check_allowed_paths(
    connector_class: type, config: Mapping[str, str], folders: Sequence[str]
) -> None:
    """Raise `ConfigException` naming the key if a path key points outside `folders` (the real
    paths of the worker's `file.allowed.dirs`, `ClientPolicy.allowed_dirs`; empty: no limit)."""
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
        if not inside(value, folders):
            raise ConfigException(
                name,
                f"{value!r} is outside the folders this worker allows "
                f"({ALLOWED_DIRS_KEY}={','.join(folders)})",
                suggestion=f"use a file under {folders[0]}, or ask the operator to add its "
                f"folder to {ALLOWED_DIRS_KEY}",
            )


def check_client_options(
    connector_class: type, config: Mapping[str, str], policy: ClientPolicy
) -> None:
    """Raise `ConfigException` (or `InvalidConfig`) naming each key whose client options the
    worker's `policy` refuses (`Connector.client_options`: Kafka's `source.kafka.*`, a URL's
    parameters). Runs before the connector's `validate`, which may open a client with them."""
    declared = getattr(connector_class, "client_options", None)
    if declared is None:
        return
    try:
        options = declared(config)
    except ConfigException:
        # A config the connector cannot read yet (no URL, one that does not parse): its
        # `validate` reports why, and opens no client from it.
        return
    policy.check(options)
