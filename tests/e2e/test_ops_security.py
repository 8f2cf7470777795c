"""Secrets, authentication, roles, TLS and `file.allowed.dirs` on one real worker process.

The worker is the shared `basic_worker` (tests/e2e/secured.py): it serves HTTPS with a certificate
made for the run, asks for basic credentials (an admin and a read-only user), enables the `env` and
`file` config providers and confines file connectors to one folder. A JDBC source on the real
PostgreSQL reads its user from `${env:…}` and its password and table from `${file:…}`; a second one
has a literal password. No REST answer of this module, no CLI output and no line of the worker's
log may contain either password. PostgreSQL trusts loopback logins here
(scripts/servers/postgres.sh), so the references are proved resolved by the user (a role that
exists only under its resolved name) and the table.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.rest._auth import is_v1_face
from tests.conftest import wait_until
from tests.e2e.secured import ADMIN, PG_ROLE, PG_USER_ENV, READER, SecuredWorker
from tests.e2e.worker_process import REPO, WorkerProcess
from tests.integration.jdbc_db import PG_HOST, require

pytestmark = pytest.mark.slow

SECRET_FILE_PW = f"fromfile-{uuid.uuid4().hex[:12]}"
SECRET_LITERAL_PW = f"literal-{uuid.uuid4().hex[:12]}"
SECRETS = (SECRET_FILE_PW, SECRET_LITERAL_PW, ADMIN[1], READER[1])
JDBC = "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector"

#: every answer the module received, checked for secrets at the end
ANSWERS: list[str] = []


class Ops:
    """The worker of this module, its HTTPS client and the database namespace."""

    def __init__(self, secured: SecuredWorker, schema: str, role: str):
        assert secured.cert is not None
        self.worker: WorkerProcess = secured.worker
        self.cert: Path = secured.cert
        self.files = secured.home / "files"
        self.secrets = secured.home / "secrets"
        self.schema = schema
        self.role = role
        self.url = secured.url

    def request(
        self, method: str, path: str, *, auth: tuple[str, str] | None = ADMIN, **kw: Any
    ) -> httpx.Response:
        response = httpx.request(
            method, self.url + path, auth=auth, verify=_trusting(self.cert), timeout=120, **kw
        )
        ANSWERS.append(f"{method} {path} -> {response.status_code} {response.text}")
        return response

    def topic_count(self, topic: str) -> int:
        response = self.request("GET", f"/v1/topics/{topic}")
        if response.status_code == 404:
            return 0
        return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


def _trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


@pytest.fixture(scope="module")
def ops(basic_worker: SecuredWorker) -> Iterator[Ops]:
    engine = require("postgresql")
    schema = f"sluice_t_{uuid.uuid4().hex[:10]}"
    role = PG_ROLE  # the shared worker runs with ${env:SLUICE_T_PG_USER} naming it
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql(
            f'CREATE TABLE "{schema}".items (id SERIAL PRIMARY KEY, name TEXT NOT NULL)'
        )
        conn.exec_driver_sql(f"INSERT INTO \"{schema}\".items (name) VALUES ('a'), ('b'), ('c')")
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET_FILE_PW}'")
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.exec_driver_sql(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
    props = basic_worker.home / "secrets" / "db.properties"
    props.write_text(f"password={SECRET_FILE_PW}\ntable=items\n")
    try:
        yield Ops(basic_worker, schema, role)
    finally:
        for name in ("jdbcRef", "jdbcLit"):  # the shared worker goes on: stop reading the schema
            httpx.request(
                "DELETE",
                f"{basic_worker.url}/v1/connectors/{name}",
                auth=ADMIN,
                verify=_trusting(basic_worker.worker.tls_cert),  # type: ignore[arg-type]
                timeout=120,
            )
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
        log = basic_worker.worker.log.read_text(errors="replace")
        for secret in SECRETS:
            assert secret not in log, f"the worker's log shows the secret {secret}"


def _jdbc(ops: Ops, topic: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": JDBC,
        "connection.url": f"jdbc:postgresql://{PG_HOST}/test?currentSchema={ops.schema}",
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "connect.topicname": topic,
        "poll.interval.ms": "300",
        **extra,
    }


def test_secrets_resolve_where_the_connector_runs_and_are_never_shown(ops: Ops) -> None:
    props = ops.secrets / "db.properties"
    by_ref = _jdbc(
        ops,
        "opsSecretRef",
        **{
            "connection.user": f"${{env:{PG_USER_ENV}}}",
            "connection.password": f"${{file:{props}:password}}",
            "table.whitelist": f"${{file:{props}:table}}",
        },
    )
    literal = _jdbc(
        ops,
        "opsSecretLit",
        **{
            "connection.user": ops.role,
            "connection.password": SECRET_LITERAL_PW,
            "table.whitelist": "items",
        },
    )
    r = ops.request("POST", "/v1/connectors", json={"name": "jdbcRef", "config": by_ref})
    assert r.status_code == 201, r.text
    # RocketMQ Connect's face echoes the config it was given: masked
    r = ops.request("POST", "/connectors/jdbcLit", content=json.dumps(literal))
    assert r.status_code == 200, r.text
    assert r.json()["body"]["connection.password"] == "********"
    wait_until(lambda: ops.topic_count("opsSecretRef") == 3, 120, "3 rows through the refs")
    wait_until(lambda: ops.topic_count("opsSecretLit") == 3, 120, "3 rows, literal password")

    # references shown as written, literal passwords masked, on both faces
    shown = ops.request("GET", "/v1/connectors/jdbcRef/config").json()
    assert shown["connection.password"] == by_ref["connection.password"]
    assert shown["connection.user"] == f"${{env:{PG_USER_ENV}}}"
    assert ops.request("GET", "/v1/connectors/jdbcLit").json()["config"]["connection.password"] == (
        "********"
    )
    for path in (
        "/v1/connectors?expand=info",
        "/v1/connectors/jdbcLit/tasks",
        "/v1/connectors/jdbcRef/tasks",
        "/connectors/list",
        "/connectors/jdbcLit/config",
        "/connectors/jdbcLit/tasks",
        "/connectors/jdbcRef/tasks",
        "/allocated/connectors",
    ):
        r = ops.request("GET", path)
        assert r.status_code == 200, (path, r.text)
        assert "********" in r.text or "${file:" in r.text, (path, r.text)
    assert ops.request("GET", "/v1/connectors/jdbcLit/status").status_code == 200
    tasks = ops.request("GET", "/v1/connectors/jdbcRef/tasks").json()
    assert tasks[0]["config"]["connection.password"] == by_ref["connection.password"]
    r = ops.request(
        "PUT", f"/v1/connector-plugins/{JDBC}/config/validate", json={**literal, "x": "1"}
    )
    values = {c["value"]["name"]: c["value"]["value"] for c in r.json()["configs"]}
    assert values["connection.password"] == "********", r.text

    # a config PUT back as it was shown keeps its secret: nothing changes, it still runs
    current = ops.request("GET", "/v1/connectors/jdbcLit/config").json()
    r = ops.request("PUT", "/v1/connectors/jdbcLit/config", json=current)
    assert r.status_code == 200, r.text
    assert ops.request("GET", "/v1/connectors/jdbcLit/status").json()["connector"]["state"] == (
        "RUNNING"
    )

    # a reference that cannot be resolved: 400 naming the key, nothing stored
    broken = {**by_ref, "connection.password": "${file:/nonexistent/db.properties:password}"}
    r = ops.request("PUT", "/v1/connectors/jdbcBroken/config", json=broken)
    assert r.status_code == 400 and "connection.password" in r.json()["message"], r.text
    r = ops.request("PUT", "/v1/connectors/jdbcBroken/config", json={
        **by_ref, "connection.user": "${env:SLUICE_T_NOT_SET}"
    })  # fmt: skip
    assert r.status_code == 400, r.text
    assert "connection.user" in r.text and "SLUICE_T_NOT_SET" in r.text, r.text

    # the CLI, over HTTPS with the user's credentials, shows what REST shows
    cli = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "--url", ops.url, "--user", ADMIN[0],
         "--cacert", str(ops.cert), "connectors", "config", "jdbcLit"],
        env=dict(os.environ, PYTHONPATH=str(REPO), SLUICE_PASSWORD=ADMIN[1]),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "********" in cli.stdout
    ANSWERS.append(cli.stdout + cli.stderr)

    for answer in ANSWERS:
        for secret in SECRETS[:2]:
            assert secret not in answer, answer[:500]
    log = ops.worker.log.read_text()
    assert SECRET_FILE_PW not in log and SECRET_LITERAL_PW not in log


def _route_samples() -> list[tuple[str, str]]:
    """(method, concrete path) of every route of the REST API (its OpenAPI document plus the
    document's own routes), path parameters filled in."""
    import warnings

    from sluice.rest.app import create_app

    app = create_app(None)  # type: ignore[arg-type]  # only its routes are read
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate operation ids: not this test's business
        paths = app.openapi()["paths"]
    samples = [("GET", p) for p in ("/openapi.json", "/docs", "/redoc")]
    for path, operations in paths.items():
        concrete = re.sub(r"\{task\}", "0", path)
        concrete = re.sub(r"\{[^}]+\}", "nope0", concrete)
        samples += [(method.upper(), concrete) for method in operations]
    return samples


#: RocketMQ Connect's face changes state with GET on these
GET_MUTATIONS = re.compile(
    r"^/connectors/(stop|pause|resume)/all$|^/connectors/nope0(/(stop|pause|resume))?$"
    r"|^/plugin/reload$|^/v1/connectors/nope0/task/adjust$"
)


def test_no_credentials_401_read_only_403_on_mutations(ops: Ops) -> None:
    samples = _route_samples()
    assert len(samples) > 30
    for method, path in samples:
        r = ops.request(method, path, auth=None)
        if path == "/metrics":  # rest.auth.metrics.open=true
            assert r.status_code != 401, (method, path)
            continue
        assert r.status_code == 401, (method, path, r.status_code)
        assert r.headers["www-authenticate"].startswith("Basic"), path
        key = "error_code" if is_v1_face(path) else "errorCode"  # GET / is on the /v1 face
        assert r.json()[key] == 401
        assert ops.request(method, path, auth=(ADMIN[0], "wrong")).status_code == 401
    for method, path in samples:
        mutation = method not in ("GET", "HEAD", "OPTIONS") or GET_MUTATIONS.match(path)
        r = ops.request(method, path, auth=READER)
        if mutation:
            assert r.status_code == 403, (method, path, r.status_code, r.text)
            assert "read-only" in r.text
        else:
            assert r.status_code not in (401, 403), (method, path, r.status_code)
    assert ops.request("GET", "/v1/connectors", auth=READER).status_code == 200
    assert ops.request("GET", "/openapi.json", auth=None).status_code == 401


def test_tls_and_file_allowed_dirs(ops: Ops) -> None:
    # plain HTTP to the HTTPS port gets no answer a client accepts
    with pytest.raises(httpx.HTTPError):
        httpx.get(
            f"http://127.0.0.1:{ops.worker.port}/v1/connectors", timeout=10
        ).raise_for_status()
    # an unknown certificate is refused by the client: the server really speaks TLS
    with pytest.raises(httpx.ConnectError):
        httpx.get(ops.url + "/v1/connectors", timeout=10)
    basic = base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
    r = httpx.get(
        ops.url + "/v1/connectors",
        headers={"Authorization": f"Basic {basic}"},
        verify=_trusting(ops.cert),
        timeout=30,
    )
    assert r.status_code == 200

    (ops.files / "in.txt").write_text("x\n")
    inside = {
        "connector.class": "FileSourceConnector",
        "filename": str(ops.files / "in.txt"),
        "connect.topicname": "opsFiles",
    }
    r = ops.request("POST", "/v1/connectors", json={"name": "fileInside", "config": inside})
    assert r.status_code == 201, r.text
    for name, config in (
        ("fileShadow", {**inside, "filename": "/etc/shadow"}),
        ("fileEscape", {**inside, "filename": str(ops.files / ".." / "x.txt")}),
        (
            "fileSinkOut",
            {
                "connector.class": "FileSinkConnector",
                "filename": "/tmp/ops-out.txt",
                "connect.topicnames": "opsFiles",
            },
        ),
    ):
        r = ops.request("POST", "/v1/connectors", json={"name": name, "config": config})
        assert r.status_code == 400, r.text
        message = r.json()["message"]
        assert message.startswith("filename:") and "file.allowed.dirs" in message, message
    # Nor through Spark SQL in a transform: reading a file by path, running a shell command or
    # calling Java (the /etc/shadow read worked before sluice.engine.sql_guard)
    for query in (
        "SELECT topic, key, (SELECT first(value) FROM text.`/etc/shadow`) AS value, "
        "timestamp, headers FROM records",
        "SELECT TRANSFORM(value) USING 'cat /etc/shadow' AS (value) FROM records",
        "SELECT topic, key, reflect('java.lang.System', 'getenv', 'SLUICE_T_PG_USER') AS value, "
        "timestamp, headers FROM records",
    ):
        sql = {"transforms": "s", "transforms.s.type": "sql", "transforms.s.query": query}
        r = ops.request(
            "POST", "/v1/connectors", json={"name": "sqlOut", "config": {**inside, **sql}}
        )
        assert r.status_code == 400, (query, r.text)
        assert r.json()["key"].startswith("transforms.s"), r.text
    assert ops.request("DELETE", "/v1/connectors/fileInside").status_code == 204
    assert ops.request("GET", "/v1/connectors/sqlOut").status_code == 404
