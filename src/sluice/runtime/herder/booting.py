"""The herder the REST API talks to while the worker boots.

A worker binds its REST port first and builds Spark, the stores and the herder after (building
them takes seconds, Spark's JVM most of it). Until the real herder is there, every call answers
`Starting` (503, with `Retry-After`) except the worker's id, so `GET /` and a load balancer's
health check answer at once and a client knows to retry rather than to give up.
"""

from __future__ import annotations

from typing import Any

from sluice.runtime.herder.api import Herder, Starting


class BootingHerder:
    """Stands in for the worker's herder until `ready` hands it over, then forwards every
    attribute to it. Handed to `sluice.rest.create_app` in place of a `Herder`."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._herder: Herder | None = None

    def ready(self, herder: Herder) -> None:
        """From now on every call goes to `herder`."""
        self._herder = herder

    @property
    def is_ready(self) -> bool:
        return self._herder is not None

    def __getattr__(self, name: str) -> Any:
        # only called for what this object does not have itself: the herder's API
        herder = self._herder
        if herder is None:
            raise Starting(
                "the worker is starting (its Spark session and stores are being built); "
                "this request can be sent again in a few seconds",
                suggestion="retry after the Retry-After header's seconds",
            )
        return getattr(herder, name)
