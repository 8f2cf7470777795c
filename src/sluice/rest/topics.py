"""`/v1/topics/{name}/records` and `DELETE /v1/topics/{name}`: see a topic's data, remove a topic.

Errors are the `/v1` shape (`{"error_code", "message"}`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response

from sluice.rest._common import herder_of
from sluice.rest._routes import GuardedRoute
from sluice.runtime.topic_records import MAX_LIMIT

router = APIRouter(prefix="/v1", tags=["v1"], route_class=GuardedRoute)


@router.get("/topics/{name}/records")
def records(
    name: str,
    request: Request,
    queue: int | None = Query(None, ge=0),
    offset: int | None = Query(None, ge=0),
    limit: int = Query(20, ge=1, le=MAX_LIMIT),
) -> dict[str, Any]:
    """Records of a topic decoded with its writer's converters, with key, headers, timestamp and
    position. Without `offset`: the last `limit` records (of `queue`, or of all queues); `next`
    gives, per queue, the offset to ask for next (what `sluice topics tail` does)."""
    return herder_of(request).topic_records(name, queue, offset, limit)


@router.delete("/topics/{name}", status_code=204)
def delete_topic(name: str, request: Request) -> Response:
    """Delete a topic and its data; 409 while a connector reads, writes or dead-letters to it."""
    herder_of(request).delete_topic(name)
    return Response(status_code=204)
