"""The REST guards' own logic: which routes write (from the app's routes), credential checks
(constant work, a per-client limit), framing headers, log lines, shared list renderings, store
outages as 503, and plugin lookups that import nothing."""

from __future__ import annotations

import asyncio
import base64
import logging
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from sluice.rest import _auth
from sluice.rest._auth import Credentials, RestSecurity, add_credential
from sluice.rest._listing import SharedRenders
from sluice.rest._log_lines import EscapeControls, escape_controls
from sluice.rest._logins import WINDOW_S, FailureLimit
from sluice.rest._routes import GuardedRoute, route_writes
from sluice.rest.app import create_app
from sluice.runtime.herder import BadRequest
from sluice.runtime.herder.validation import check
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.stores import store_outage
from sluice.sdk import ConfigException
from sluice.store.cluster import PgConfigStore
from tests.e2e.worker_process import free_port

#: RocketMQ Connect's GETs that change state, the EventBridge GET alias of PATCH …/push, and
#: validation (it builds the connector's network clients): what the routes must declare
GET_WRITES = {
    "/connectors/stop/all",
    "/connectors/pause/all",
    "/connectors/resume/all",
    "/connectors/{name}",
    "/connectors/{name}/stop",
    "/connectors/{name}/delete",
    "/connectors/{name}/pause",
    "/connectors/{name}/resume",
    "/plugin/reload",
    "/plugin/config/validate",
    "/v1/connectors/{name}/task/adjust",
}


def test_the_routes_say_which_requests_write(tmp_path: Path) -> None:
    app = create_app(None)  # type: ignore[arg-type]  # only its routes are read
    contexts = [
        c for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)
    ]
    assert len(contexts) > 50
    # every route of the app checks, itself, whether its request writes
    assert [c.path_format for c in contexts if not isinstance(c.original_route, GuardedRoute)] == []
    declared = set()
    for context in contexts:
        route = context.original_route
        for method in route.methods:
            if method != "GET":
                assert route_writes(route, method), (method, context.path_format)
            elif route_writes(route, method):
                declared.add(context.path_format)
    assert declared == GET_WRITES
    # the document shows the mark
    doc = app.openapi()
    assert doc["paths"]["/connectors/{name}/delete"]["get"]["x-sluice-writes"] is True
    assert "x-sluice-writes" not in doc["paths"]["/connectors/{name}/config"]["get"]

    # and the routes the router picks refuse: a read-only user, a page of another site
    path = str(tmp_path / "users")
    add_credential(path, "viewer", "read-only", "pw")
    add_credential(path, "ops", "admin", "pw")
    security = RestSecurity.from_properties({"rest.auth": "basic", "rest.auth.file": path})
    client = TestClient(create_app(None, security))  # type: ignore[arg-type]  # refused first
    reader, admin = _basic("viewer", "pw"), _basic("ops", "pw")
    cross = {**admin, "Sec-Fetch-Site": "cross-site"}
    for target in ("/connectors/a/delete", "/connectors/stop/all", "/plugin/config/validate"):
        refused = client.get(target, headers=reader)
        assert refused.status_code == 403 and refused.json()["code"] == "auth.read_only"
        refused = client.get(target, headers=cross)
        assert refused.status_code == 403 and refused.json()["code"] == "request.cross_site"
    assert client.get("/openapi.json", headers=cross).status_code == 200  # reads are not


def test_an_unknown_user_costs_the_same_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "users")
    add_credential(path, "alice", "admin", "right")
    credentials = Credentials(path)
    hashed: list[str] = []
    verify = _auth.verify_secret

    def counting(secret: str, encoded: str) -> bool:
        hashed.append(encoded)
        return verify(secret, encoded)

    monkeypatch.setattr(_auth, "verify_secret", counting)
    assert credentials.check("nobody", "x") is None
    assert credentials.check("alice", "wrong") is None
    assert len(hashed) == 2 and hashed[0] != hashed[1]  # the dummy line, then alice's
    assert hashed[0].split("$")[:4] == hashed[1].split("$")[:4]  # same scrypt parameters
    assert credentials.check("alice", "right") == _auth.Principal("alice", "admin")
    assert credentials.remembered("alice", "right") == _auth.Principal("alice", "admin")
    assert credentials.check("alice", "right") is not None and len(hashed) == 3  # remembered


def test_failed_checks_are_limited_per_client() -> None:
    now = [1000.0]
    limit = FailureLimit(3, clock=lambda: now[0])
    assert [limit.reserve("a") for _ in range(3)] == [None, None, None]
    assert limit.reserve("a") == 1  # three in flight: the next waits for one to end
    assert limit.reserve("b") is None  # another address is not concerned
    limit.settle("a", failed=False)  # a success frees its slot
    assert limit.reserve("a") is None
    for _ in range(3):
        limit.settle("a", failed=True)
    now[0] += 20
    assert limit.reserve("a") == 40  # the oldest failure leaves the window in 40 s
    now[0] += WINDOW_S - 20
    assert limit.reserve("a") is None
    assert FailureLimit(0).reserve("a") is None  # 0: no limit


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_middleware_answers_429_past_the_limit_but_knows_its_users(tmp_path: Path) -> None:
    path = str(tmp_path / "users")
    add_credential(path, "alice", "admin", "right")
    security = RestSecurity.from_properties(
        {"rest.auth": "basic", "rest.auth.file": path, "rest.auth.failures.per.minute": "2"}
    )
    client = TestClient(create_app(None, security))  # type: ignore[arg-type]  # auth only
    assert client.get("/openapi.json", headers=_basic("alice", "right")).status_code == 200
    for _ in range(2):
        assert client.get("/openapi.json", headers=_basic("alice", "no")).status_code == 401
    limited = client.get("/openapi.json", headers=_basic("alice", "no"))
    assert limited.status_code == 429, limited.text
    assert 55 <= int(limited.headers["retry-after"]) <= 60
    assert limited.json()["key"] == "rest.auth.failures.per.minute"
    assert limited.headers["x-frame-options"] == "DENY"
    # a credential verified before needs no hashing: its user is not locked out
    assert client.get("/openapi.json", headers=_basic("alice", "right")).status_code == 200
    # no credentials at all cost nothing and are not counted
    assert client.get("/openapi.json").status_code == 401


def test_every_answer_forbids_framing(tmp_path: Path) -> None:
    path = str(tmp_path / "users")
    add_credential(path, "alice", "read-only", "pw")
    security = RestSecurity.from_properties({"rest.auth": "basic", "rest.auth.file": path})
    client = TestClient(create_app(None, security))  # type: ignore[arg-type]  # middleware only
    answers = [
        client.get("/openapi.json", headers=_basic("alice", "pw")),  # 200
        client.get("/ui/", headers=_basic("alice", "pw")),  # the console
        client.get("/nowhere", headers=_basic("alice", "pw")),  # 404
        client.get("/openapi.json"),  # 401
        client.delete("/v1/connectors/x", headers=_basic("alice", "pw")),  # 403
    ]
    assert [a.status_code for a in answers] == [200, 200, 404, 401, 403]
    for answer in answers:
        assert answer.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert answer.headers["x-frame-options"] == "DENY"


def test_control_characters_are_escaped_in_log_lines_and_refused_in_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert escape_controls("a\nb\r\x1bc\u2028d\te") == "a\\nb\\r\\x1bc\\u2028d\te"
    record = logging.LogRecord(
        "t", logging.WARNING, __file__, 1, "connector %s: %s", ("x", "k\n2024 INFO forged"), None
    )
    EscapeControls().filter(record)
    assert record.getMessage() == "connector x: k\\n2024 INFO forged"
    registry = PluginRegistry()
    with pytest.raises(BadRequest) as refused:
        check(registry, {"connector.class": "FileSourceConnector", "a\nforged": "1"})
    assert refused.value.key == "a\\nforged"
    assert "control characters" in refused.value.message


def test_concurrent_lists_share_one_rendering_and_none_is_older_than_its_request() -> None:
    renders = SharedRenders()
    started, release = threading.Event(), threading.Event()
    made: list[int] = []

    def build() -> bytes:
        made.append(len(made) + 1)
        started.set()
        release.wait(30)
        return str(len(made)).encode()

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        first = [asyncio.create_task(renders.get("list", build)) for _ in range(50)]
        await asyncio.to_thread(started.wait, 30)
        # these came while the first rendering ran: it may not have seen what they expect
        later = [asyncio.create_task(renders.get("list", build)) for _ in range(50)]
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*first), await asyncio.gather(*later)

    first, later = asyncio.run(scenario())
    assert made == [1, 2] and renders.renders == 2
    assert set(first) == {b"1"} and set(later) == {b"2"}


def test_a_store_that_does_not_answer_is_a_503_naming_it(tmp_path: Path) -> None:
    engine = sa.create_engine(
        f"postgresql+psycopg://u:secretpw@127.0.0.1:{free_port()}/db",
        connect_args={"connect_timeout": 2},
    )
    store = PgConfigStore(engine)  # a real store whose server is not there

    class Reads:  # what GET /v1/connectors asks of the herder
        connectors = staticmethod(store.names)

    client = TestClient(create_app(Reads()), raise_server_exceptions=False)  # type: ignore[arg-type]
    answer = client.get("/v1/connectors")
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "store.unavailable"
    assert answer.json()["message"].startswith("the cluster store (PostgreSQL) does not answer")
    assert answer.headers["retry-after"] == "5" and "secretpw" not in answer.text
    with pytest.raises(sqlite3.OperationalError) as locked:
        sqlite3.connect(str(tmp_path / "missing" / "configs.sqlite"))
    assert "SQLite" in (store_outage(locked.value) or "")
    with pytest.raises(sqlite3.OperationalError) as bad_sql:
        sqlite3.connect(":memory:").execute("SELECT * FROM nothing")
    assert store_outage(bad_sql.value) is None  # a bug, not an outage: a 500
    assert store_outage(ValueError("x")) is None


def test_a_plugin_lookup_for_a_read_imports_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "sluice_t_side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass X: pass\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        registry = PluginRegistry()
        with pytest.raises(ConfigException) as refused:
            registry.connector("sluice_t_side_effect.X", load=False)
        assert "not a registered connector" in str(refused.value)
        assert not marker.exists() and "sluice_t_side_effect" not in sys.modules
        assert registry.connector("FileSourceConnector", load=False).__name__ == (
            "FileSourceConnector"
        )
        # a class of a module imported already (a connector created by module.Class) is found
        full = "sluice.connectors.file.source.FileSourceConnector"
        assert registry.connector(full, load=False).__name__ == "FileSourceConnector"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("sluice_t_side_effect", None)
