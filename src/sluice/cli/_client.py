"""A small synchronous client of the worker's REST API: one method per call the CLI makes.

It speaks ``/v1`` for everything except the two calls only the RocketMQ Connect face has
(``/getClusterInfo`` and ``/plugin/reload``), whose ``{"status": 200, "body": …}`` envelope it
unwraps, so callers never see which face answered. httpx's exceptions are translated here, at the
boundary, into the CLI's own (``_errors``), so no command has to know about httpx.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from ._errors import BadResponse, ServerError, UsageProblem, WorkerUnreachable

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_URL", "Client", "Json"]

DEFAULT_URL = "http://127.0.0.1:8082"
DEFAULT_TIMEOUT = 30.0

# What a parsed JSON body can be; the CLI treats bodies as plain data, not models, because it must
# keep working against a newer worker that adds fields.
Json = Any


def _segment(value: str) -> str:
    # Connector names may hold '/', '?', spaces…: quote every character that is not safe in a
    # single path segment so the name always maps to one resource.
    return quote(value, safe="")


def _unreachable_reason(exc: httpx.TransportError, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout:g}s"
    # httpx wraps httpcore's error, which wraps the socket's OSError: find the OSError.
    cause: BaseException | None = exc
    seen = 0
    while cause is not None and not isinstance(cause, OSError) and seen < 10:
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, OSError) and cause.strerror:
        # "Name or service not known" -> "name or service not known": it follows a '('.
        return cause.strerror[:1].lower() + cause.strerror[1:]
    text = str(exc)
    # httpx renders OSErrors as "[Errno 111] Connection refused": keep the human part only.
    if text.startswith("[Errno") and "] " in text:
        text = text.split("] ", 1)[1]
    return text or type(exc).__name__


class Client:
    """The REST calls of the ``sluice`` command, against the worker at ``url``.

    Every method returns the parsed response body (``None`` for an empty one) and raises a
    ``CliError``: ``ServerError`` for an HTTP error status, ``WorkerUnreachable`` when nothing
    answers, ``BadResponse`` for a body that is not JSON. Use it as a context manager.
    """

    def __init__(
        self,
        *,
        url: str = DEFAULT_URL,
        timeout: float = DEFAULT_TIMEOUT,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        cacert: str | None = None,
    ) -> None:
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise UsageProblem(f"invalid --url {url!r}: it must start with http:// or https://")
        self.url = url
        self.timeout = timeout
        self._credentials = bool(user or token)  # a 401 then means "refused", not "missing"
        try:
            # credentials for a worker with rest.auth=basic (user) or rest.auth=token (token)
            auth = httpx.BasicAuth(user, password or "") if user else None
            headers = {"Authorization": f"Bearer {token}"} if token else None
            self._http = httpx.Client(
                base_url=url,
                timeout=timeout,
                auth=auth,
                headers=headers,
                verify=cacert if cacert else True,
            )
        except httpx.InvalidURL as exc:
            raise UsageProblem(f"invalid --url {url!r}: {exc}") from exc

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying connection pool."""
        self._http.close()

    # -- plumbing -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Json = None,
        params: dict[str, str] | None = None,
    ) -> Json:
        """Send one request and return its parsed JSON body (``None`` when the body is empty)."""
        return self._parse(self._send(method, path, json=json, params=params))

    def _send(
        self, method: str, path: str, *, json: Json = None, params: dict[str, str] | None = None
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except httpx.ReadTimeout as exc:
            # Connected and sent: the worker may still carry the request out, so say that.
            raise WorkerUnreachable(
                self.url,
                "no answer",
                message=f"the worker at {self.url} did not answer {method} {path} within "
                f"{self.timeout:g}s; it may still complete it (see --timeout)",
            ) from exc
        except httpx.TransportError as exc:
            raise WorkerUnreachable(self.url, _unreachable_reason(exc, self.timeout)) from exc
        except httpx.InvalidURL as exc:
            raise UsageProblem(f"invalid request URL: {exc}") from exc
        if response.is_error:
            raise ServerError.from_response(response, credentials=self._credentials)
        return response

    def _parse(self, response: httpx.Response) -> Json:
        if not response.content.strip():
            return None
        try:
            return response.json()
        except ValueError as exc:
            request = response.request
            raise BadResponse(
                f"{request.method} {request.url.path} answered {response.status_code} with a "
                f"body that is not JSON (is {self.url} a sluice worker?)"
            ) from exc

    def _enveloped(self, path: str) -> Json:
        # RocketMQ Connect face: success is {"status": 200, "body": …}; errors already raised.
        body = self.request("GET", path)
        if not isinstance(body, dict) or "body" not in body:
            raise BadResponse(f"GET {path} did not answer with a {{'status', 'body'}} envelope")
        return body["body"]

    # -- connectors -----------------------------------------------------------------------------

    def connectors(self) -> Json:
        """``{name: {"status": STATUS}}`` for every connector."""
        return self.request("GET", "/v1/connectors", params={"expand": "status"})

    def create(self, name: str, config: dict[str, str]) -> Json:
        """Create a connector; 409 when it exists. Returns its INFO."""
        return self.request("POST", "/v1/connectors", json={"name": name, "config": config})

    def put_config(self, name: str, config: dict[str, str]) -> tuple[bool, Json]:
        """Create or replace a connector's config: ``(created, INFO)``."""
        response = self._send("PUT", f"/v1/connectors/{_segment(name)}/config", json=config)
        return response.status_code == 201, self._parse(response)

    def config(self, name: str) -> Json:
        """The connector's config map."""
        return self.request("GET", f"/v1/connectors/{_segment(name)}/config")

    def status(self, name: str) -> Json:
        """The connector's STATUS."""
        return self.request("GET", f"/v1/connectors/{_segment(name)}/status")

    def action(self, name: str, verb: str) -> Json:
        """``pause``, ``resume`` or ``stop`` (PUT) the connector; returns its STATUS."""
        return self.request("PUT", f"/v1/connectors/{_segment(name)}/{verb}")

    def restart(self, name: str, task: int | None = None) -> Json:
        """Restart the connector, or only one of its tasks; returns its STATUS."""
        path = f"/v1/connectors/{_segment(name)}"
        if task is not None:
            path += f"/tasks/{task}"
        return self.request("POST", f"{path}/restart")

    def delete(self, name: str) -> Json:
        """Delete the connector (its positions are kept by the worker)."""
        return self.request("DELETE", f"/v1/connectors/{_segment(name)}")

    def offsets(self, name: str) -> Json:
        """``{"offsets": [{"partition": …, "offset": …}]}``."""
        return self.request("GET", f"/v1/connectors/{_segment(name)}/offsets")

    def push(self, name: str) -> Json:
        """A push sink's limits and progress."""
        return self.request("GET", f"/v1/connectors/{_segment(name)}/push")

    def tune_push(self, name: str, changes: Json) -> Json:
        """PATCH a push sink's limits (applied live)."""
        return self.request("PATCH", f"/v1/connectors/{_segment(name)}/push", json=changes)

    def set_offsets(self, name: str, body: Json) -> Json:
        """PATCH the connector's offsets (it must be STOPPED)."""
        return self.request("PATCH", f"/v1/connectors/{_segment(name)}/offsets", json=body)

    def reset_offsets(self, name: str) -> Json:
        """DELETE the connector's offsets (it must be STOPPED)."""
        return self.request("DELETE", f"/v1/connectors/{_segment(name)}/offsets")

    # -- plugins, cluster, topics ---------------------------------------------------------------

    def plugins(self) -> Json:
        """Every installed plugin: ``[{"class", "type", "version", "aliases"}]``."""
        return self.request("GET", "/v1/connector-plugins?connectorsOnly=false")

    def reload_plugins(self) -> Json:
        """Rescan plugins (RocketMQ Connect face); returns the worker's message."""
        return self._enveloped("/plugin/reload")

    def validate(self, plugin: str, config: dict[str, str]) -> Json:
        """Validate a config against a plugin class without creating anything."""
        path = f"/v1/connector-plugins/{_segment(plugin)}/config/validate"
        return self.request("PUT", path, json=config)

    def cluster(self) -> Json:
        """The ids of the live workers (RocketMQ Connect face)."""
        return self._enveloped("/getClusterInfo")

    def topic_records(
        self, name: str, *, queue: int | None = None, offset: int | None = None, limit: int = 20
    ) -> Json:
        """``{"topic", "converter", "records": [...], "next": {queue: offset}}``."""
        params = {"limit": str(limit)}
        if queue is not None:
            params["queue"] = str(queue)
        if offset is not None:
            params["offset"] = str(offset)
        return self.request("GET", f"/v1/topics/{_segment(name)}/records", params=params)

    def delete_topic(self, name: str) -> Json:
        """Delete a topic and its data (refused while a connector uses it)."""
        return self.request("DELETE", f"/v1/topics/{_segment(name)}")

    def topics(self) -> Json:
        """``[{"name", "queues": [{"queue_id", "min_offset", "max_offset"}]}]``."""
        return self.request("GET", "/v1/topics")
