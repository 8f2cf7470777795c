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


def _resolve(
    name: str, builtins: dict[str, type], base: type, key: str, kind: str, expected: str
) -> type:
    """A built-in (by name or alias) or `module.Class` / `module:Class` that subclasses `base`."""
    name = name.strip()
    if name in builtins:
        return builtins[name]
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep or "$" in name:
        known = ", ".join(sorted(k for k in builtins if "." not in k))
        raise ConfigException(key, f"unknown {kind} class {name!r}; built-ins: {known}")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigException(key, f"cannot load {name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigException(key, f"{name!r} is not {expected}")
    return cls


def resolve_connector(name: str) -> type[Connector]:
    """The class named by `connector.class`: a built-in name or alias, or `module.Class`."""
    return _resolve(
        name,
        BUILTIN_CONNECTORS,
        Connector,
        "connector.class",
        "connector",
        "a SourceConnector or SinkConnector",
    )


def resolve_transform(name: str) -> type[Transform]:
    """The class named by `transforms.<n>.class`: a built-in name or alias, or `module.Class`."""
    return _resolve(name, BUILTIN_TRANSFORMS, Transform, "transforms", "transform", "a Transform")
