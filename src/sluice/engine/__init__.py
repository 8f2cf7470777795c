"""The Spark engine: what the runtime calls to run a connector as a streaming query.

The front door is small: the runtime parses a connector's common keys once
(`parse_settings` → `ConnectorSettings`), resolves one start into a `QueryRequest` (its
transforms from `parse_transforms`) and calls `launch(services, request)` with the worker's
`QueryServices`; `check_config` is what validation asks; `activate` makes the worker's Spark
session the one queries start on; `last_committed_offsets` reads a stopped query's checkpoint.
The modules behind it (source and sink plans, converters, error routing, the fused path) are
the engine's own. Names are imported on first use, so that importing one engine module (a
Python worker's daemon, the class-archive builder) does not load Spark's whole query stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.engine.checkpoint import last_committed_offsets
    from sluice.engine.front_door import (
        LaunchedQuery,
        QueryRequest,
        QueryServices,
        TopicPort,
        launch,
    )
    from sluice.engine.positions import PositionStore
    from sluice.engine.session import activate
    from sluice.engine.settings import (
        ConfigReport,
        ConnectorSettings,
        Problem,
        check_config,
        parse_settings,
        topic_use,
    )
    from sluice.engine.transforms import parse_transforms

_WHERE = {
    "LaunchedQuery": "sluice.engine.front_door",
    "QueryRequest": "sluice.engine.front_door",
    "QueryServices": "sluice.engine.front_door",
    "TopicPort": "sluice.engine.front_door",
    "launch": "sluice.engine.front_door",
    "ConfigReport": "sluice.engine.settings",
    "ConnectorSettings": "sluice.engine.settings",
    "Problem": "sluice.engine.settings",
    "check_config": "sluice.engine.settings",
    "parse_settings": "sluice.engine.settings",
    "topic_use": "sluice.engine.settings",
    "PositionStore": "sluice.engine.positions",
    "activate": "sluice.engine.session",
    "last_committed_offsets": "sluice.engine.checkpoint",
    "parse_transforms": "sluice.engine.transforms",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sluice.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = [
    "ConfigReport",
    "ConnectorSettings",
    "LaunchedQuery",
    "PositionStore",
    "Problem",
    "QueryRequest",
    "QueryServices",
    "TopicPort",
    "activate",
    "check_config",
    "last_committed_offsets",
    "launch",
    "parse_settings",
    "parse_transforms",
    "topic_use",
]
