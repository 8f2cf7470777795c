"""Finds connector classes by name: built-ins, their RocketMQ Connect aliases, or a dotted path."""

from __future__ import annotations

import importlib

from sluice.connectors.file import FileSinkConnector, FileSourceConnector
from sluice.sdk import ConfigException, Connector, Transform
from sluice.transforms import BUILTIN_TRANSFORMS

BUILTIN_CONNECTORS: dict[str, type[Connector]] = {
    "FileSourceConnector": FileSourceConnector,
    "FileSinkConnector": FileSinkConnector,
    "org.apache.rocketmq.connect.file.FileSourceConnector": FileSourceConnector,
    "org.apache.rocketmq.connect.file.FileSinkConnector": FileSinkConnector,
}


def resolve_connector(name: str) -> type[Connector]:
    """The class named by `connector.class`: a built-in name or alias, or `module.Class`."""
    name = name.strip()
    if name in BUILTIN_CONNECTORS:
        return BUILTIN_CONNECTORS[name]
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep:
        known = ", ".join(sorted(k for k in BUILTIN_CONNECTORS if "." not in k))
        raise ConfigException(
            "connector.class", f"unknown connector class {name!r}; built-ins: {known}"
        )
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigException("connector.class", f"cannot load {name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Connector)):
        raise ConfigException(
            "connector.class", f"{name!r} is not a SourceConnector or SinkConnector"
        )
    return cls


def resolve_transform(name: str) -> type[Transform]:
    """The class named by `transforms.<n>.class`: a built-in name or alias, or `module.Class`."""
    name = name.strip()
    if name in BUILTIN_TRANSFORMS:
        return BUILTIN_TRANSFORMS[name]
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep or "$" in name:
        known = ", ".join(sorted(k for k in BUILTIN_TRANSFORMS if "." not in k))
        raise ConfigException("transforms", f"unknown transform class {name!r}; built-ins: {known}")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigException("transforms", f"cannot load transform {name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        raise ConfigException("transforms", f"{name!r} is not a Transform")
    return cls
