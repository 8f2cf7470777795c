"""The herder: the control plane of one worker, the only part of the runtime the REST API calls.

This package's front door is the interface and its typed results and errors (`api`), re-exported
here. Behind it:

- `base`: `BaseHerder`, what both modes serve alike (validation, reads, offsets, topics, plugins,
  push settings, metrics) over a narrow view of the query runner (`QueryRunner`);
- `standalone` and `distributed`: the two lifecycles, siblings on that base (one worker applies
  REST writes itself; a cluster's worker writes them to the shared store, and the owner applies
  them at its next round under its lease);
- `reconcile`, `restarts`, `status_board`: what keeps the queries of a worker at their target
  state (duties, retriable restarts with backoff, statuses the store refused);
- `validation`: a posted config checked against its connector's keys before it is stored;
- `booting`: the herder the REST API sees while the worker is still starting.
"""

from sluice.runtime.herder.api import (
    CONNECTOR_NAME_MAX,
    CONNECTOR_NAME_PATTERN,
    AllocatedTask,
    BadRequest,
    Conflict,
    ConnectorInfo,
    ConnectorStatus,
    Herder,
    HerderError,
    NotFound,
    Position,
    QueueOffsets,
    Retrying,
    Starting,
    State,
    TaskConfig,
    TaskId,
    TaskStatus,
    TooMany,
    TopicSummary,
    check_connector_name,
)

__all__ = [
    "CONNECTOR_NAME_MAX",
    "CONNECTOR_NAME_PATTERN",
    "AllocatedTask",
    "BadRequest",
    "Conflict",
    "ConnectorInfo",
    "ConnectorStatus",
    "Herder",
    "HerderError",
    "NotFound",
    "Position",
    "QueueOffsets",
    "Retrying",
    "Starting",
    "State",
    "TaskConfig",
    "TaskId",
    "TaskStatus",
    "TooMany",
    "TopicSummary",
    "check_connector_name",
]
