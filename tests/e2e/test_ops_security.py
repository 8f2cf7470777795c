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

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.rest._auth import add_credential, is_v1_face
from tests.conftest import wait_until
from tests.e2e.worker_process import REPO, WorkerProcess
from tests.integration.jdbc_db import PG_HOST, require

pytestmark = pytest.mark.slow

ADMIN = ("ops", "admin-Pw-1")
READER = ("viewer", "read-Pw-2")
SECRET_FILE_PW = f"fromfile-{uuid.uuid4().hex[:12]}"
SECRET_LITERAL_PW = f"literal-{uuid.uuid4().hex[:12]}"
SECRET_URL_PW = f"inurl-{uuid.uuid4().hex[:12]}"
SECRETS = (SECRET_FILE_PW, SECRET_LITERAL_PW, SECRET_URL_PW, ADMIN[1], READER[1])
JDBC = "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector"

#: every answer the module received, checked for secrets at the end
ANSWERS: list[str] = []


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


def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


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
    cert, key = _certificate(tmp)
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
