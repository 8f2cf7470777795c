"""Secrets, authentication, roles, TLS and `file.allowed.dirs` on one real worker process.

The worker serves HTTPS with a certificate made here (openssl), asks for basic credentials (an
admin and a read-only user), enables the `env` and `file` config providers and confines file
connectors to one folder. A JDBC source on the real PostgreSQL reads its user from `${env:…}` and
its password and table from `${file:…}`; a second one has a literal password. No REST answer of
this module, no CLI output and no line of the worker's log may contain either password.
PostgreSQL trusts loopback logins here (scripts/servers/postgres.sh), so the references are
proved resolved by the user (a role that exists only under its resolved name) and the table.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from sluice.rest._auth import add_credential, is_v1_face
from tests.conftest import wait_until
from tests.e2e.secured import ADMIN, READER, certificate
from tests.e2e.worker_process import REPO, WorkerProcess
from tests.integration.jdbc_db import PG_HOST, require

pytestmark = pytest.mark.slow

SECRET_FILE_PW = f"fromfile-{uuid.uuid4().hex[:12]}"
SECRET_LITERAL_PW = f"literal-{uuid.uuid4().hex[:12]}"
SECRET_URL_PW = f"inurl-{uuid.uuid4().hex[:12]}"
SECRETS = (SECRET_FILE_PW, SECRET_LITERAL_PW, SECRET_URL_PW, ADMIN[1], READER[1])
JDBC = "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector"

#: every answer the module received, checked for secrets at the end
ANSWERS: list[str] = []
#: the worker's rest.auth.failures.per.minute, and the wrong passwords of the burst test
BURST = 48
#: the worker's max.connectors (this module holds at most 3 at once otherwise)
MAX_CONNECTORS = 4


class Ops:
    """The worker of this module, its HTTPS client and the database namespace."""

    def __init__(self, worker: WorkerProcess, cert: Path, files: Path, schema: str, role: str):
        self.worker = worker
        self.cert = cert
        self.files = files
        self.schema = schema
        self.role = role
        self.url = f"https://127.0.0.1:{worker.port}"

    def request(
        self, method: str, path: str, *, auth: tuple[str, str] | None = ADMIN, **kw: Any
    ) -> httpx.Response:
        response = httpx.request(
            method, self.url + path, auth=auth, verify=str(self.cert), timeout=120, **kw
        )
        ANSWERS.append(f"{method} {path} -> {response.status_code} {response.text}")
        return response

    def topic_count(self, topic: str) -> int:
        response = self.request("GET", f"/v1/topics/{topic}")
        if response.status_code == 404:
            return 0
        return sum(q["max_offset"] - q["min_offset"] for q in response.json()["queues"])


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    tmp = tmp_path_factory.mktemp("ops")
    engine = require("postgresql")
    schema = f"sluice_t_{uuid.uuid4().hex[:10]}"
    role = f"sluice_u_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql(
            f'CREATE TABLE "{schema}".items (id SERIAL PRIMARY KEY, name TEXT NOT NULL)'
        )
        conn.exec_driver_sql(f"INSERT INTO \"{schema}\".items (name) VALUES ('a'), ('b'), ('c')")
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET_FILE_PW}'")
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.exec_driver_sql(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
    cert, key = certificate(tmp)
    users = tmp / "users"
    add_credential(str(users), *ADMIN[:1], "admin", ADMIN[1])
    add_credential(str(users), READER[0], "read-only", READER[1])
    (tmp / "secrets").mkdir()
    (tmp / "secrets" / "db.properties").write_text(f"password={SECRET_FILE_PW}\ntable=items\n")
    files = tmp / "files"
    files.mkdir()
    worker = WorkerProcess(
        tmp / "worker",
        extra_conf={
            "config.providers": "env,file",
            "config.providers.file.param.allowed.paths": str(tmp / "secrets"),
            "config.providers.env.param.allowlist.pattern": "SLUICE_T_.*",
            "file.allowed.dirs": str(files),
            "rest.auth": "basic",
            "rest.auth.file": str(users),
            "rest.auth.metrics.open": "true",
            "rest.tls.cert": str(cert),
            "rest.tls.key": str(key),
            "rest.auth.failures.per.minute": str(BURST),
            "rest.request.body.timeout.ms": "2000",
            "max.connectors": str(MAX_CONNECTORS),
        },
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLUICE_T_PG_USER", role)  # the worker inherits it
        worker.start()
    try:
        yield Ops(worker, cert, files, schema, role)
    finally:
        code = worker.terminate()
        log = worker.log.read_text()
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
        assert code == 0, log[-3000:]
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
    props = ops.worker.tmp.parent / "secrets" / "db.properties"
    by_ref = _jdbc(
        ops,
        "opsSecretRef",
        **{
            "connection.user": "${env:SLUICE_T_PG_USER}",
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
    # a password inside connection.url (PostgreSQL trusts loopback: any password logs in)
    in_url = _jdbc(ops, "opsSecretUrl", **{"table.whitelist": "items"})
    in_url["connection.url"] = in_url["connection.url"].replace(
        "://", f"://{ops.role}:{SECRET_URL_PW}@"
    )
    r = ops.request("POST", "/connectors/jdbcUrl", content=json.dumps(in_url))
    assert r.status_code == 200, r.text
    assert ":********@" in r.json()["body"]["connection.url"], r.text
    wait_until(lambda: ops.topic_count("opsSecretRef") == 3, 120, "3 rows through the refs")
    wait_until(lambda: ops.topic_count("opsSecretLit") == 3, 120, "3 rows, literal password")
    wait_until(lambda: ops.topic_count("opsSecretUrl") == 3, 120, "3 rows, password in the URL")

    # references shown as written, literal passwords masked, on both faces
    shown = ops.request("GET", "/v1/connectors/jdbcRef/config").json()
    assert shown["connection.password"] == by_ref["connection.password"]
    assert shown["connection.user"] == "${env:SLUICE_T_PG_USER}"
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
        "/v1/connectors/jdbcUrl",
        "/v1/connectors/jdbcUrl/config",
        "/v1/connectors/jdbcUrl/tasks",
        "/connectors/jdbcUrl/config",
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
    for name in ("jdbcLit", "jdbcUrl"):
        current = ops.request("GET", f"/v1/connectors/{name}/config").json()
        r = ops.request("PUT", f"/v1/connectors/{name}/config", json=current)
        assert r.status_code == 200, r.text
        state = ops.request("GET", f"/v1/connectors/{name}/status").json()["connector"]["state"]
        assert state == "RUNNING", name

    # a reference that cannot be resolved: 400 naming the key, nothing stored
    broken = {**by_ref, "connection.password": f"${{file:{props.parent}/nope.properties:pw}}"}
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
         "--cacert", str(ops.cert), "connectors", "config", "jdbcUrl"],
        env=dict(os.environ, PYTHONPATH=str(REPO), SLUICE_PASSWORD=ADMIN[1]),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "********" in cli.stdout
    ANSWERS.append(cli.stdout + cli.stderr)

    for answer in ANSWERS:
        for secret in SECRETS[:3]:
            assert secret not in answer, answer[:500]
    log = ops.worker.log.read_text()
    for secret in SECRETS[:3]:
        assert secret not in log
    for name in ("jdbcRef", "jdbcLit", "jdbcUrl"):
        assert ops.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_references_outside_what_the_worker_allows_are_refused(ops: Ops) -> None:
    """`${file:…}` outside `allowed.paths` and `${env:…}` outside `allowlist.pattern`: a 400
    naming the key at create and at validation, on both faces, in the same words whether the
    file or variable exists or not; nothing stored, nothing read."""
    (ops.files / "in.txt").write_text("x\n")
    base = {
        "connector.class": "FileSourceConnector",
        "filename": str(ops.files / "in.txt"),
        "connect.topicname": "opsRefs",
        "transforms": "q",
        "transforms.q.type": "sql",
    }
    query = "SELECT topic, key, '{ref}' AS value, timestamp, headers FROM records"
    words = []
    for ref, target in (
        ("${file:/etc/shadow:root}", "/etc/shadow"),
        ("${file:/etc/no-such-file-sluice:root}", "/etc/no-such-file-sluice"),
        (f"${{file:{ops.worker.tmp.parent}/secrets/{'../' * 12}etc/passwd:root}}", "-"),
        ("${env:PATH}", "PATH"),
        ("${env:OTHER_NOT_SET_ANYWHERE_X}", "OTHER_NOT_SET_ANYWHERE_X"),
    ):
        config = {**base, "transforms.q.query": query.format(ref=ref)}
        answers = [
            ops.request("POST", "/v1/connectors", json={"name": "refOut", "config": config}),
            ops.request("POST", "/connectors/refOut", content=json.dumps(config)),
            ops.request(
                "PUT", "/v1/connector-plugins/FileSourceConnector/config/validate", json=config
            ),
            ops.request("GET", "/plugin/config/validate", params={"config": json.dumps(config)}),
        ]
        for r in answers:
            assert r.status_code == 400, (ref, r.request.url, r.text)
            assert "transforms.q.query" in r.text and "is refused" in r.text, r.text
            assert "root:" not in r.text and "No such file" not in r.text, r.text
        words.append(answers[0].json()["message"].replace(ref, "REF").replace(target, "T"))
    # no oracle: a file or variable that exists and one that does not get the same words
    assert words[0] == words[1] and words[3] == words[4], words
    assert ops.request("GET", "/v1/connectors/refOut").status_code == 404


@dataclass(frozen=True)
class Sample:
    """One route of the app, its path parameters filled in, and whether a request to it
    writes (as the route declares it: `sluice.rest._routes`)."""

    method: str
    template: str
    writes: bool

    def path(self, name: str = "nope0", topic: str = "nope0", plugin: str = "nope0") -> str:
        path = self.template.replace("{task}", "0").replace("{class_name}", plugin)
        return path.replace("{name}", topic if path.startswith("/v1/topics/") else name)


def _route_samples() -> list[Sample]:
    """Every route of the REST API as the app holds it (the OpenAPI pages and the console's
    files included), each method once."""
    from fastapi.routing import iter_route_contexts

    from sluice.rest._routes import route_writes
    from sluice.rest.app import create_app

    app = create_app(None)  # type: ignore[arg-type]  # only its routes are read
    samples = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        for method in sorted(getattr(route, "methods", None) or ()):
            if method == "HEAD":
                continue  # the GET beside it
            writes = isinstance(route, APIRoute) and route_writes(route, method)
            samples.append(Sample(method, str(context.path_format), writes))
    return samples


def test_every_route_that_writes_is_refused_to_readers_and_other_sites(ops: Ops) -> None:
    """Generated from the app's routes: no credentials 401 everywhere; a read-only user 403 on
    every route that writes (RocketMQ Connect's GET create/stop/delete/pause/resume, the `/all`
    routes, `/plugin/reload`, validation…) and on none that reads; an admin's browser on
    another site likewise (`GET …/delete` escaped both: it was missing from a hand list)."""
    samples = _route_samples()
    assert len(samples) > 50
    assert {s.template for s in samples if s.writes and s.method == "GET"} >= {
        "/connectors/{name}/delete",
        "/connectors/{name}",
        "/plugin/config/validate",
    }
    for sample in samples:
        method, path = sample.method, sample.path()
        r = ops.request(method, path, auth=None)
        if path in ("/metrics", "/health"):  # rest.auth.metrics.open=true; probes need none
            assert r.status_code != 401, (method, path)
            continue
        assert r.status_code == 401, (method, path, r.status_code)
        assert r.headers["www-authenticate"].startswith("Basic"), path
        key = "error_code" if is_v1_face(path) else "errorCode"  # GET / is on the /v1 face
        assert r.json()[key] == 401
    for sample in samples[:5]:  # a few: every one counts against rest.auth.failures.per.minute
        assert (
            ops.request(sample.method, sample.path(), auth=(ADMIN[0], "wrong")).status_code == 401
        )
    cross_site = {"Sec-Fetch-Site": "cross-site"}
    for sample in samples:
        method, path = sample.method, sample.path()
        as_reader = ops.request(method, path, auth=READER)
        from_elsewhere = ops.request(method, path, headers=cross_site)  # an admin's browser
        if sample.writes:
            assert as_reader.status_code == 403, (method, path, as_reader.status_code)
            assert as_reader.json()["code"] == "auth.read_only", as_reader.text
            assert "read-only" in as_reader.text
            assert from_elsewhere.status_code == 403, (method, path, from_elsewhere.text)
            assert from_elsewhere.json()["code"] == "request.cross_site", from_elsewhere.text
        else:
            assert as_reader.status_code not in (401, 403), (method, path, as_reader.status_code)
            assert from_elsewhere.status_code != 403, (method, path, from_elsewhere.text)
    assert ops.request("GET", "/v1/connectors", auth=READER).status_code == 200
    assert ops.request("GET", "/openapi.json", auth=None).status_code == 401


def _state(ops: Ops, name: str) -> dict[str, Any]:
    """What a request could change: connectors (configs, statuses), topics, positions, plugins,
    and the starts, stops and deletes in the worker's log."""
    log = ops.worker.log.read_text(errors="replace")
    return {
        "names": ops.request("GET", "/v1/connectors").json(),
        "status": ops.request("GET", f"/v1/connectors/{name}/status").json(),
        "config": ops.request("GET", f"/v1/connectors/{name}/config").json(),
        "topics": ops.request("GET", "/v1/topics").json(),
        "offsets": ops.request("GET", f"/v1/connectors/{name}/offsets").json(),
        "plugins": ops.request("GET", "/plugin/list").json(),
        "log": [log.count(word) for word in (" started (", " deleted", " stopped", " paused")],
    }


def test_routes_that_do_not_write_change_nothing(ops: Ops) -> None:
    """The other half of the classification: an admin calls every route not declared as
    writing, on a real connector, topic and plugin, and nothing changes."""
    name, topic = "oracleSrc", "opsOracle"
    (ops.files / "oracle.txt").write_text("a\nb\nc\n")
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(ops.files / "oracle.txt"),
        "connect.topicname": topic,
    }
    r = ops.request("POST", "/v1/connectors", json={"name": name, "config": config})
    assert r.status_code == 201, r.text
    try:
        wait_until(lambda: ops.topic_count(topic) == 3, 120, "the 3 lines in the topic")
        wait_until(
            lambda: ops.request("GET", f"/v1/connectors/{name}/offsets").json()["offsets"],
            60,
            "the source's position",
        )
        before = _state(ops, name)
        reads = [s for s in _route_samples() if not s.writes]
        assert len(reads) > 25
        for sample in reads:
            path = sample.path(name=name, topic=topic, plugin="FileSourceConnector")
            answer = ops.request(sample.method, path)
            assert answer.status_code < 500, (sample, answer.text)
        assert _state(ops, name) == before
    finally:
        assert ops.request("DELETE", f"/v1/connectors/{name}").status_code == 204


def test_client_file_options_stay_inside_file_allowed_dirs(ops: Ops) -> None:
    """A client library's certificate, key or CA file (Kafka's `*.location`, a JDBC or CDC URL's
    `sslrootcert`, Redis's `ssl_ca_certs`, RabbitMQ's `ssl_options`) is a file the worker reads:
    outside `file.allowed.dirs` it is refused at create, naming the key the user typed."""
    outside = "/etc/ssl/certs/ca-certificates.crt"
    kafka_source = {
        "connector.class": "KafkaSourceConnector",
        "source.bootstrap.servers": "127.0.0.1:9",
        "source.topics": "t",
        "source.kafka.security.protocol": "ssl",
    }
    cases = [
        ("source.kafka.ssl.ca.location", {**kafka_source, "source.kafka.ssl.ca.location": outside}),
        (
            "target.kafka.ssl.key.location",
            {
                "connector.class": "KafkaSinkConnector",
                "target.bootstrap.servers": "127.0.0.1:9",
                "connect.topicnames": "t",
                "target.kafka.ssl.key.location": "/etc/ssl/private/key.pem",
            },
        ),
        (
            "connection.url",
            _jdbc(
                ops, "t", **{"connection.url": f"postgresql://{PG_HOST}/test?sslrootcert={outside}"}
            ),
        ),
        (
            "connection.url",
            {
                "connector.class": "PostgresCdcSourceConnector",
                "connection.url": f"postgresql://{PG_HOST}/test?sslcert=/root/client.crt",
                "topic.prefix": "p",
            },
        ),
        (
            "redis.url",
            {
                "connector.class": "RedisSinkConnector",
                "redis.url": f"rediss://127.0.0.1:6380/0?ssl_ca_certs={outside}",
                "connect.topicnames": "t",
            },
        ),
        (
            "rabbitmq.url",
            {
                "connector.class": "RabbitMQSinkConnector",
                "rabbitmq.url": "amqps://127.0.0.1/%2F?ssl_options={'keyfile': '/etc/shadow'}",
                "connect.topicnames": "t",
            },
        ),
    ]
    for i, (key, config) in enumerate(cases):
        r = ops.request("POST", "/v1/connectors", json={"name": f"clientFile{i}", "config": config})
        assert r.status_code == 400, r.text
        [error] = [e for e in r.json()["errors"] if e["key"] == key]
        assert "is outside the folders this worker allows (file.allowed.dirs=" in error["message"]
    # inside the folder the option reaches librdkafka (which then cannot reach the cluster)
    ca = ops.files / "ca.pem"
    ca.write_bytes(ops.cert.read_bytes())
    inside = {**kafka_source, "source.kafka.ssl.ca.location": str(ca)}
    r = ops.request(
        "PUT", "/v1/connector-plugins/KafkaSourceConnector/config/validate", json=inside
    )
    assert r.status_code == 200, r.text
    errors = {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"]}
    assert errors["source.bootstrap.servers"], "the cluster at 127.0.0.1:9 cannot be reached"
    assert not [e for found in errors.values() for e in found if "ssl.ca.location" in e], errors


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
        verify=str(ops.cert),
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


def test_a_burst_of_wrong_passwords_does_not_hold_up_other_requests(ops: Ops) -> None:
    """scrypt ran on the server's event loop: 64 wrong passwords stalled an authorised request
    for 21.5 s. Now the hashing runs on two threads: an admin whose credentials the worker
    knows is answered while most of the burst still waits for its hashing; past
    `rest.auth.failures.per.minute` the address gets 429 with Retry-After, without hashing."""

    async def burst() -> tuple[int, list[int], httpx.Response, httpx.Response]:
        transport = httpx.AsyncHTTPTransport(verify=str(ops.cert), local_address="127.0.0.3")
        limits = httpx.Limits(max_connections=BURST + 4)
        async with httpx.AsyncClient(
            transport=transport, base_url=ops.url, timeout=120, limits=limits
        ) as client:
            assert (await client.get("/v1/connectors", auth=ADMIN)).status_code == 200
            wrong = [
                asyncio.create_task(client.get("/v1/connectors", auth=(ADMIN[0], f"no-{i}")))
                for i in range(BURST)
            ]
            # the worker is busy with the burst once it has answered one of them
            await asyncio.wait(wrong, return_when=asyncio.FIRST_COMPLETED)
            authorised = await client.get("/v1/connectors", auth=ADMIN)
            assert authorised.status_code == 200, authorised.text
            still_hashing = sum(not task.done() for task in wrong)
            statuses = [answer.status_code for answer in await asyncio.gather(*wrong)]
            limited = await client.get("/v1/connectors", auth=(ADMIN[0], "one-more"))
            known = await client.get("/v1/connectors", auth=ADMIN)
            return still_hashing, statuses, limited, known

    still_hashing, statuses, limited, known = asyncio.run(burst())
    assert statuses == [401] * BURST  # each checked: the burst is within the limit
    # the authorised answer came while a quarter or more of the burst was still to be hashed
    # (behind them all, it came last: it waited for every hash on the loop before)
    assert still_hashing >= BURST // 4, f"{still_hashing} of {BURST} still unanswered"
    assert limited.status_code == 429, limited.text
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert limited.json()["key"] == "rest.auth.failures.per.minute"
    assert known.status_code == 200  # a known credential needs no hashing: never limited


def test_a_body_that_trickles_in_times_out(ops: Ops) -> None:
    """Headers, then a byte now and then: with rest.request.body.timeout.ms=2000 the worker
    answers 408 and closes the connection while the client still has most of its body to
    send (the connection was held for ever)."""
    context = ssl.create_default_context(cafile=str(ops.cert))
    basic = base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
    length = 120  # a minute at this pace: long past the worker's 2 s
    head = (
        f"POST /v1/connectors HTTP/1.1\r\nHost: 127.0.0.1:{ops.worker.port}\r\n"
        f"Authorization: Basic {basic}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    raw = socket.create_connection(("127.0.0.1", ops.worker.port), timeout=30)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(head.encode())
        sent, answer = 0, b""
        while sent < length and not answer:
            tls.sendall(b" ")
            sent += 1
            tls.settimeout(0.5)  # a trickle: a byte per half second, until the answer comes
            try:
                answer = tls.recv(4096)
            except TimeoutError:
                continue
        tls.settimeout(30)
        with contextlib.suppress(OSError):  # the worker closes the connection after it
            while more := tls.recv(4096):
                answer += more
    assert sent < length, "the worker waited for the whole trickled body"
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer[:300]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body["key"] == "rest.request.body.timeout.ms" and body["error_code"] == 408


def test_max_connectors_refuses_a_create_past_it(ops: Ops) -> None:
    existing = ops.request("GET", "/v1/connectors").json()
    assert len(existing) < MAX_CONNECTORS, existing
    (ops.files / "limit.txt").write_text("x\n")
    config = {
        "connector.class": "FileSourceConnector",
        "filename": str(ops.files / "limit.txt"),
        "connect.topicname": "opsLimit",
    }
    fillers = [f"limit{i}" for i in range(MAX_CONNECTORS - len(existing))]
    try:
        for name in fillers:
            r = ops.request("POST", "/v1/connectors", json={"name": name, "config": config})
            assert r.status_code == 201, r.text
        for method, path, kwargs in (
            ("POST", "/v1/connectors", {"json": {"name": "limitX", "config": config}}),
            ("PUT", "/v1/connectors/limitX/config", {"json": config}),
            ("POST", "/connectors/limitX", {"content": json.dumps(config)}),
        ):
            refused = ops.request(method, path, **kwargs)
            assert refused.status_code == 429, refused.text
            assert refused.json()["key"] == "max.connectors"
            assert f"max.connectors is {MAX_CONNECTORS}" in refused.json()["message"]
        assert ops.request("GET", "/v1/connectors/limitX").status_code == 404
        # an update of one that exists is no new connector
        r = ops.request("PUT", f"/v1/connectors/{fillers[0]}/config", json={**config, "x": "1"})
        assert r.status_code == 200, r.text
    finally:
        for name in fillers:
            ops.request("DELETE", f"/v1/connectors/{name}")
