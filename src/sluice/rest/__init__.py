"""The worker's REST API (FastAPI): RocketMQ Connect's endpoints and a clean `/v1` resource API,
both over one `Herder`."""

from sluice.rest.app import create_app

__all__ = ["create_app"]
