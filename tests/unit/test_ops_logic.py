"""Pure logic of secrets (providers, masking, scrubbing), REST auth and `file.allowed.dirs`."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sluice.connectors.file.source import FileSourceConnector
from sluice.rest._auth import (
    RestSecurity,
    add_credential,
    hash_secret,
    new_token,
    read_credentials,
    verify_secret,
)
from sluice.rest.app import create_app
from sluice.runtime import secrets
from sluice.runtime.file_access import check_allowed_paths
from sluice.runtime.secrets import ConfigProviders, keep_masked, redact, restore_references
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import PASSWORD_MASK, ConfigException
from sluice.sdk._paths import allowed_dirs


def test_providers_resolve_kafka_syntax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_T_PW", "envsecret1")
    props = tmp_path / "db.properties"
    props.write_text("password=filesecret1\n# comment\nuser: bob\n")
    providers = ConfigProviders.from_worker(
        {
            "config.providers": "env,file",
            "config.providers.env.param.allowlist.pattern": "OPS_T_.*",
            "config.providers.file.param.allowed.paths": f"{tmp_path},/nonexistent",
        }
    )
    out = providers.resolve(
        {
            "a": "${env:OPS_T_PW}",
            "b": f"${{file:{props}:password}}",
            "c": f"u=${{file:{props}:user}};p=${{env:OPS_T_PW}}",
            "d": "${vault:secret/x:y}",  # not enabled: stays as written (as in Kafka)
            "e": "plain",
        }
    )
    assert out == {
        "a": "envsecret1",
        "b": "filesecret1",
        "c": "u=bob;p=envsecret1",
        "d": "${vault:secret/x:y}",
        "e": "plain",
    }
    for ref, words in (
        ("${env:OPS_T_MISSING}", "OPS_T_MISSING is not set"),
        (f"${{file:{props}:nope}}", "has no key 'nope'"),
        ("${file:/nonexistent/x.properties:k}", "cannot read"),
    ):
        with pytest.raises(ConfigException) as caught:
            providers.resolve({"connection.password": ref})
        assert caught.value.key == "connection.password" and words in str(caught.value)
    # Kafka's class names are accepted; an unknown class names its key
    kafka = "org.apache.kafka.common.config.provider.FileConfigProvider"
    ConfigProviders.from_worker({"config.providers": "f", "config.providers.f.class": kafka})
    with pytest.raises(ConfigException) as caught:
        ConfigProviders.from_worker({"config.providers": "vault"})
    assert caught.value.key == "config.providers.vault.class"
    with pytest.raises(ConfigException) as caught:
        WorkerConfig.from_properties(
            {"config.providers": "x", "config.providers.x.class": "no.such.Provider"}
        )
    assert caught.value.key == "config.providers.x.class"


def test_masking_scrubbing_and_restoring(caplog: pytest.LogCaptureFixture) -> None:
    config = {"connection.password": "lit-secret-9", "ref": "${env:X}", "user": "bob"}
    assert redact(config, ["connection.password", "ref"]) == {
        "connection.password": PASSWORD_MASK,
        "ref": "${env:X}",
        "user": "bob",
    }
    shown = redact(config, ["connection.password"])
    assert keep_masked(shown, config, ["connection.password"]) == config
    assert keep_masked(shown, None, ["connection.password"]) == shown
    ConfigProviders().resolve(config, ["connection.password"])  # a literal password is a secret
    assert secrets.scrub("failed with lit-secret-9!") == f"failed with {PASSWORD_MASK}!"
    written = {"pw": "${env:X}", "url": "db"}
    resolved = {"pw": "resolved-secret-7", "url": "db"}
    secrets._SECRETS.add("resolved-secret-7")
    task = {"pw": "resolved-secret-7", "url": "db", "dsn": "db?password=resolved-secret-7"}
    assert restore_references(written, resolved, task) == {
        "pw": "${env:X}",
        "url": "db",
        "dsn": f"db?password={PASSWORD_MASK}",
    }
    logger = logging.getLogger("sluice.test.scrub")
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    try:
        secrets.install_log_scrubber()
        with caplog.at_level(logging.INFO):
            logger.info("connecting with %s", "lit-secret-9")
        assert secrets._FILTER in handler.filters
        record = caplog.records[-1]
        secrets._FILTER.filter(record)
        assert record.getMessage() == f"connecting with {PASSWORD_MASK}"
    finally:
        logger.removeHandler(handler)


def test_file_allowed_dirs(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    allowed = allowed_dirs(str(tmp_path / "in"))
    check_allowed_paths(FileSourceConnector, {"filename": str(tmp_path / "in" / "a")}, allowed)
    check_allowed_paths(FileSourceConnector, {"filename": "/etc/shadow"}, ())  # no limit set
    (tmp_path / "in" / "link").symlink_to("/etc")
    for path in ("/etc/shadow", str(tmp_path / "in" / ".." / "a"), str(tmp_path / "in/link/x")):
        with pytest.raises(ConfigException) as caught:
            check_allowed_paths(FileSourceConnector, {"filename": path}, allowed)
        assert caught.value.key == "filename" and "file.allowed.dirs" in str(caught.value)
    # a SQLite URL names a file the connector creates and writes (the Iceberg sink's catalog)
    from sluice.connectors.lake.iceberg import IcebergSinkConnector

    inside = {"iceberg.catalog.uri": f"sqlite:///{tmp_path}/in/catalog.db"}
    check_allowed_paths(IcebergSinkConnector, inside, allowed)
    check_allowed_paths(IcebergSinkConnector, {"iceberg.catalog.uri": "postgresql://h/db"}, allowed)
    for uri in ("sqlite:////etc/cron.d/x.db", "sqlite+pysqlite:////root/catalog.db"):
        with pytest.raises(ConfigException) as caught:
            check_allowed_paths(IcebergSinkConnector, {"iceberg.catalog.uri": uri}, allowed)
        assert caught.value.key == "iceberg.catalog.uri", uri


def test_credentials_file_and_roles(tmp_path: Path) -> None:
    encoded = hash_secret("pw")
    assert verify_secret("pw", encoded) and not verify_secret("pW", encoded)
    assert not verify_secret("pw", "garbage") and hash_secret("pw") != encoded  # salted
    path = str(tmp_path / "users")
    add_credential(path, "alice", "admin", "a")
    add_credential(path, "alice", "read-only", "b")  # replaces her line
    entries = read_credentials(path)
    assert [(e.name, e.role) for e in entries] == [("alice", "read-only")]
    assert (tmp_path / "users").stat().st_mode & 0o777 == 0o600
    for bad in (("a:b", "admin"), ("bob", "root")):
        with pytest.raises(ValueError):
            add_credential(path, *bad, "x")
    (tmp_path / "bad").write_text("alice:admin:plaintext\n")
    with pytest.raises(ConfigException) as caught:
        RestSecurity.from_properties(
            {"rest.auth": "basic", "rest.auth.file": str(tmp_path / "bad")}
        )
    assert caught.value.key == "rest.auth.file" and ":1:" in str(caught.value)
    with pytest.raises(ConfigException) as caught:
        RestSecurity.from_properties({"rest.auth": "token"})
    assert caught.value.key == "rest.auth.file"
    with pytest.raises(ConfigException) as caught:
        RestSecurity.from_properties({"rest.tls.cert": path})
    assert caught.value.key == "rest.tls.key"


def test_token_mode(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens")
    admin, reader = new_token(), new_token()
    add_credential(path, "ci", "admin", admin)
    add_credential(path, "grafana", "read-only", reader)
    security = RestSecurity.from_properties({"rest.auth": "token", "rest.auth.file": path})
    client = TestClient(create_app(None, security))  # type: ignore[arg-type]  # auth only
    assert client.get("/openapi.json").status_code == 401
    bad = client.get("/v1/connectors", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["www-authenticate"].startswith("Bearer")
    assert bad.json() == {
        "error_code": 401,
        "message": "authentication required",
        "code": "auth.required",
        "key": None,
        "suggestion": None,
        "errors": [],
    }
    ok = client.get("/openapi.json", headers={"Authorization": f"Bearer {reader}"})
    assert ok.status_code == 200
    refused = client.delete("/v1/connectors/x", headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403 and "grafana is read-only" in refused.text
    basic = client.get("/openapi.json", auth=("ci", admin))  # token mode takes no basic auth
    assert basic.status_code == 401
    assert client.get("/openapi.json", headers={"Authorization": f"Bearer {admin}"}).is_success
    # the console's files load without a token (the page must load to ask for one), data not
    for page in ("/ui/", "/ui/static/console.js", "/ui/static/console.css"):
        assert client.get(page).status_code == 200, page
    assert client.get("/ui/static/nope.js").status_code == 404
    assert client.get("/ui/../v1/connectors").status_code == 401
    assert client.get("/uix").status_code == 401
    # the document says what the middleware answers, in the shape of the face called
    assert client.get("/").json()["error_code"] == 401
    doc = ok.json()
    assert doc["components"]["securitySchemes"] == {"token": {"type": "http", "scheme": "bearer"}}
    assert doc["security"] == [{"token": []}]
    paths = doc["paths"]
    assert {"401", "403"} <= set(paths["/v1/connectors/{name}"]["delete"]["responses"])
    assert "403" in paths["/v1/connectors/{name}"]["get"]["responses"]  # a Host refused
    assert "403" in paths["/connectors/{name}/pause"]["get"]["responses"]  # a GET that mutates
    assert "401" in paths["/metrics"]["get"]["responses"]
    open_metrics = RestSecurity.from_properties(
        {"rest.auth": "token", "rest.auth.file": path, "rest.auth.metrics.open": "true"}
    )
    doc = create_app(None, open_metrics).openapi()  # type: ignore[arg-type]
    assert doc["paths"]["/metrics"]["get"]["security"] == []
    assert "401" not in doc["paths"]["/metrics"]["get"]["responses"]


def test_cross_site_requests_are_told_apart() -> None:
    from sluice.rest._cross_site import foreign_origin

    def scope(**headers: str) -> dict:
        return {"headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}

    assert foreign_origin(scope(host="127.0.0.1:8082")) is None  # curl, the CLI
    same = scope(host="127.0.0.1:8082", origin="http://127.0.0.1:8082")
    assert foreign_origin(same) is None  # the console
    console = scope(host="h", origin="http://h:80", sec_fetch_site="same-origin")
    assert foreign_origin(console) is None
    assert foreign_origin(scope(host="h:443", origin="https://h")) is None
    assert foreign_origin(scope(host="127.0.0.1:8082", origin="http://localhost:8082")) == (
        "Origin: http://localhost:8082"
    )
    assert foreign_origin(scope(host="127.0.0.1:8082", origin="null")) == "Origin: null"
    assert foreign_origin(scope(host="h", sec_fetch_site="cross-site")) == (
        "Sec-Fetch-Site: cross-site"
    )
    other_port = scope(host="h", sec_fetch_site="same-site")
    assert foreign_origin(other_port) == "Sec-Fetch-Site: same-site"


def test_a_loopback_worker_answers_only_for_loopback_hosts() -> None:
    """DNS rebinding: a site whose name resolves to 127.0.0.1 is refused by a worker on
    loopback (httpHost=127.0.0.1), reads included; one listening elsewhere is not limited."""
    from sluice.rest._auth import is_loopback

    local = RestSecurity.from_properties({"httpHost": "127.0.0.1"})
    assert local.loopback_only and not RestSecurity.from_properties({}).loopback_only
    client = TestClient(create_app(None, local))  # type: ignore[arg-type]  # middleware only
    for host in ("127.0.0.1:8082", "localhost:8082", "[::1]:8082", "127.0.0.2"):
        assert client.get("/openapi.json", headers={"Host": host}).status_code == 200, host
    refused = client.get("/openapi.json", headers={"Host": "rebound.example:8082"})
    assert refused.status_code == 403
    assert refused.json()["code"] == "request.host"
    assert "'rebound.example'" in refused.json()["message"]
    anywhere = TestClient(create_app(None, RestSecurity.from_properties({})))  # type: ignore[arg-type]
    assert anywhere.get("/openapi.json", headers={"Host": "rebound.example"}).status_code == 200
    assert [is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.com", "::1")] == [
        False,
        False,
        False,
        True,
    ]


def _refused(providers: ConfigProviders, key: str, value: str) -> str:
    """The message of the refusal of `{key: value}`, by `check` and by `resolve` alike."""
    with pytest.raises(ConfigException) as checked:
        providers.check({"name": "x", key: value})
    with pytest.raises(ConfigException) as resolved:
        providers.resolve({key: value})
    assert checked.value.key == resolved.value.key == key
    assert str(checked.value) == str(resolved.value)
    return str(checked.value)


def test_file_provider_reads_only_allowed_paths(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "secrets", tmp_path / "other"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "db.properties").write_text("password=inside-secret\n")
    (outside / "db.properties").write_text("password=outside-secret\n")
    (allowed / "escape").symlink_to(outside)
    (allowed / "users").write_text("alice=admin:scrypt$hash\n")
    providers = ConfigProviders.from_worker(
        {
            "config.providers": "file",
            "config.providers.file.param.allowed.paths": str(allowed),
            "rest.auth.file": str(allowed / "users"),
        }
    )
    ref = f"${{file:{allowed}/db.properties:password}}"
    assert providers.resolve({"k": ref}) == {"k": "inside-secret"}
    # outside (also through `..` and a symlink), relative, no path, the worker's own credentials
    key = "transforms.t.query"
    for path in (
        "/etc/shadow",
        f"{outside}/db.properties",
        f"{allowed}/../other/db.properties",
        f"{allowed}/escape/db.properties",
        "secrets/db.properties",
        f"{allowed}/users",
    ):
        message = _refused(providers, key, f"SELECT '${{file:{path}:password}}' AS v")
        assert "config.providers.file.param.allowed.paths" in message, message
        assert "outside-secret" not in message and "No such file" not in message
    # no oracle: a file that exists and one that does not get the same words
    exists = _refused(providers, key, "${file:/etc/passwd:root}")
    missing = _refused(providers, key, "${file:/etc/no-such-file-here:root}")
    assert exists.replace("/etc/passwd", "P") == missing.replace("/etc/no-such-file-here", "P")


def test_providers_read_nothing_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_T_SET", "value-1")
    providers = ConfigProviders.from_worker({"config.providers": "env,file"})
    for ref in ("${env:OPS_T_SET}", "${env:HOME}", "${file:/etc/passwd:root}"):
        assert "is refused" in _refused(providers, "connection.password", ref)
    # the env allowlist is a whole-name regular expression; set or not, the same refusal
    providers = ConfigProviders.from_worker(
        {"config.providers": "env", "config.providers.env.param.allowlist.pattern": "OPS_T_.*"}
    )
    assert providers.resolve({"a": "${env:OPS_T_SET}"}) == {"a": "value-1"}
    set_var = _refused(providers, "a", "${env:PATH}")
    unset_var = _refused(providers, "a", "${env:NO_SUCH_VAR_OPS}")
    assert "config.providers.env.param.allowlist.pattern" in set_var
    assert set_var.replace("PATH", "V") == unset_var.replace("NO_SUCH_VAR_OPS", "V")
    _refused(providers, "a", "${env:X_OPS_T_SET}")  # fullmatch, not search
    # a provider the worker did not enable stays as written, checked or resolved
    providers.check({"a": "${file:/etc/shadow:root}"})
    # bad parameters name the worker key
    for props, key in (
        ({"config.providers.file.param.allowed.paths": "relative/dir"}, "allowed.paths"),
        ({"config.providers.env.param.allowlist.pattern": "("}, "allowlist.pattern"),
    ):
        with pytest.raises(ConfigException) as caught:
            ConfigProviders.from_worker({"config.providers": "env,file", **props})
        provider = "file" if "file" in key or "paths" in key else "env"
        assert caught.value.key == f"config.providers.{provider}.param.{key}"


def test_url_credentials_masked_wherever_configs_are_shown() -> None:
    config = {
        "connection.url": "postgresql://app:s3cr3t-pg@db:5432/shop",
        "jdbc": "jdbc:mysql://root:s3cr3t-my@h/db?useSSL=false",
        "redis.url": "redis://:s3cr3t-rd@cache:6379/0",
        "amqp": "amqp://guest:s3cr3t-mq@rabbit/%2f",
        "nats.servers": "nats://a:s3cr3t-n1@h1:4222,nats://h2:4222,nats://s3cr3t-tok@h3",
        "odbc": "jdbc:sqlserver://h;user=sa;password=s3cr3t-ms;db=x",
        "query": "http://h/p?user=u&password=s3cr3t-q&x=1",
        "ref": "postgresql://app:${env:SLUICE_SECRET_PW}@db/shop",
        "plain": "http://user@host/path?email=a@b",
        "connection.password": "s3cr3t-lit",
    }
    shown = redact(config, ["connection.password"])
    assert "s3cr3t" not in repr(shown), shown
    assert shown["connection.url"] == f"postgresql://app:{PASSWORD_MASK}@db:5432/shop"
    assert shown["redis.url"] == f"redis://:{PASSWORD_MASK}@cache:6379/0"
    assert shown["nats.servers"] == (
        f"nats://a:{PASSWORD_MASK}@h1:4222,nats://h2:4222,nats://{PASSWORD_MASK}@h3"
    )
    assert shown["ref"] == config["ref"] and shown["plain"] == config["plain"]
    # PUT back as shown: the stored credentials stay; a changed URL is taken as given
    assert keep_masked(shown, config, ["connection.password"]) == config
    changed = dict(shown, **{"connection.url": f"postgresql://app:{PASSWORD_MASK}@db2/shop"})
    assert keep_masked(changed, config, [])["connection.url"] == changed["connection.url"]
    # resolving a config teaches the scrubber its URL passwords (log lines, traces)
    ConfigProviders().resolve(config)
    assert secrets.scrub("connect to redis://:s3cr3t-rd@cache failed") == (
        f"connect to redis://:{PASSWORD_MASK}@cache failed"
    )
    assert PASSWORD_MASK in secrets.scrub("token s3cr3t-tok rejected")


def test_the_shipped_worker_configs_allow_the_references_the_docs_show() -> None:
    """A worker started from conf/*.conf runs the pages' `${env:…}`/`${file:…}` examples."""
    root = Path(__file__).parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    blocks = [b for page in pages for b in re.findall(r"```.*?```", page.read_text(), re.S)]
    examples = {m.group(0) for block in blocks for m in secrets.REFERENCE.finditer(block)}
    assert len(examples) >= 5, examples
    for conf in ("connect-standalone.conf", "connect-distributed.conf"):
        props = {}
        for line in (root / "conf" / conf).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
        providers = ConfigProviders.from_worker(props)
        for ref in sorted(examples):
            providers.check({"k": ref})  # raises naming the reference if the conf refuses it
        with pytest.raises(ConfigException):
            providers.check({"k": "${env:HOME}"})


def test_scrub_data_masks_secrets_in_keys_and_values() -> None:
    secrets._SECRETS.add("hooks-path-secret-1")
    progress = {"targets": {"https://h/services/hooks-path-secret-1": {"queued": 1}}, "n": [2]}
    assert secrets.scrub_data(progress) == {
        "targets": {f"https://h/services/{PASSWORD_MASK}": {"queued": 1}},
        "n": [2],
    }


def test_openapi_description_names_v1_as_kafka_tooling_base_url() -> None:
    from sluice.rest.app import create_app

    info = create_app(None).openapi()["info"]  # type: ignore[arg-type]
    assert "Kafka Connect tooling: use `/v1` as the base URL" in info["description"]
