"""Errors that name what the user typed (docs/config.md, *Errors*): a misspelt class or key is
answered with the name it is close to, and an error names the key as written (an alias, not
the sluice name it is renamed to)."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from sluice.cli import main
from sluice.cli._errors import ServerError
from sluice.rest._auth import RestSecurity, add_credential
from sluice.rest.app import create_app
from sluice.runtime.herder import BadRequest, validation
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.worker_config import CLUSTER_ONLY_KEYS, WORKER_KEYS, WorkerConfig
from sluice.sdk import ConfigException
from sluice.sdk._config import closest
from tests.conftest import wait_until

KAFKA_FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
KAFKA_ROUTER = "org.apache.kafka.connect.transforms.RegexRouter"


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry()


def _source(tmp_path: Path, **extra: str) -> dict[str, str]:
    src = tmp_path / "in.txt"
    src.write_text("")
    return {"connector.class": "FileSourceConnector", "filename": str(src), **extra}


def _refused(registry: PluginRegistry, config: dict[str, str]) -> BadRequest:
    with pytest.raises(BadRequest) as raised:
        validation.accepted(registry, "c", config)
    return raised.value


def test_closest_is_the_one_did_you_mean() -> None:
    assert closest("erors.tolerance", ["errors.tolerance", "errors.log.enable"]) == (
        "errors.tolerance"
    )
    assert closest("completely.different", ["errors.tolerance"]) is None


@pytest.mark.parametrize("typed", [KAFKA_ROUTER + "r", "RegexRoutr"])
def test_a_misspelt_transform_class_is_named_under_its_key(
    registry: PluginRegistry, tmp_path: Path, typed: str
) -> None:
    config = _source(
        tmp_path,
        **{"connect.topicname": "t", "transforms": "r", "transforms.r.type": typed},
    )
    refused = _refused(registry, config)
    near = KAFKA_ROUTER if "." in typed else "RegexRouter"
    assert refused.key == "transforms.r.type"
    assert str(refused) == (
        f"transforms.r.type: unknown transform class {typed!r}; did you mean {near}?"
    )
    assert "ModuleNotFoundError" not in str(refused)
    # Kafka's `type` or sluice's `class`: the key named is the one in the config
    del config["transforms.r.type"]
    config["transforms.r.class"] = typed
    assert _refused(registry, config).key == "transforms.r.class"


@pytest.mark.parametrize(
    "typed",
    ["FileStreamSourceConnecter", "org.apache.kafka.connect.file.FileStreamSourceConnecter"],
)
def test_a_misspelt_connector_class_gets_did_you_mean_not_a_list(
    registry: PluginRegistry, typed: str
) -> None:
    refused = _refused(registry, {"connector.class": typed})
    assert str(refused) == (
        f"connector.class: unknown connector class {typed!r}; did you mean {KAFKA_FILE_SOURCE}?"
    )


def test_far_from_any_name_the_known_classes_are_listed(registry: PluginRegistry) -> None:
    with pytest.raises(ConfigException) as raised:
        registry.connector("Nope")
    assert "known: " in str(raised.value) and "did you mean" not in str(raised.value)
    with pytest.raises(ConfigException, match=r"cannot load 'no\.such\.module\.Thing'"):
        registry.connector("no.such.module.Thing")  # a plugin of the user's, not a typo


def test_a_plugin_that_fails_to_import_is_not_taken_for_a_typo(
    registry: PluginRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module that exists under a name close to a built-in alias, missing a dependency: the
    # user must read why it does not load, not a suggestion
    package = tmp_path / "org" / "apache" / "kafka" / "connect"
    package.mkdir(parents=True)
    for folder in (package, *package.parents[:3]):
        (folder / "__init__.py").write_text("")
    (package / "file.py").write_text("import sluice_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "org" or m.startswith("org.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        with pytest.raises(ConfigException) as raised:
            registry.connector(KAFKA_FILE_SOURCE + "r")
    finally:
        for name in [m for m in sys.modules if m == "org" or m.startswith("org.")]:
            del sys.modules[name]
    assert str(raised.value) == (
        f"connector.class: cannot load {KAFKA_FILE_SOURCE + 'r'!r}: ModuleNotFoundError: "
        "No module named 'sluice_missing_dependency'"
    )


def test_an_error_names_the_alias_typed(registry: PluginRegistry, tmp_path: Path) -> None:
    refused = _refused(registry, _source(tmp_path, **{"connect.topicname": "t", "tasks.max": "x"}))
    assert (refused.key, str(refused)) == ("tasks.max", "tasks.max: expected an integer, got 'x'")
    # sluice's own name typed: named as typed too
    refused = _refused(registry, _source(tmp_path, **{"connect.topicname": "t", "max.tasks": "x"}))
    assert refused.key == "max.tasks"
    # a connector's own alias (Kafka's `topic` of the file source), judged by the bus's rule
    report, _ = validation.check(
        registry,
        {
            "connector.class": KAFKA_FILE_SOURCE,
            "file": str(tmp_path / "in.txt"),
            "topic": "no good",
        },
        topic_problem=lambda topic: "no spaces" if " " in topic else None,
    )
    assert [(p.key, p.message) for p in report.errors] == [("topic", "no spaces")]


def test_a_missing_required_key_names_its_typo(registry: PluginRegistry, tmp_path: Path) -> None:
    refused = _refused(registry, _source(tmp_path, **{"connect.topicnmae": "t"}))
    assert refused.key == "connect.topicname"
    assert str(refused) == (
        "connect.topicname: required key is missing; connect.topicnmae is set, and looks like "
        "a typo of connect.topicname"
    )
    assert refused.suggestion == "rename connect.topicnmae to connect.topicname"
    # Kafka's name of the key is compared too
    kafka = {"connector.class": KAFKA_FILE_SOURCE, "file": str(tmp_path / "in.txt"), "topik": "t"}
    assert "topik is set, and looks like a typo of topic" in str(_refused(registry, kafka))
    # nothing close: the error alone
    far = _refused(registry, _source(tmp_path, **{"destination": "t"}))
    assert str(far) == "connect.topicname: required key is missing"


# -- the worker's config ---------------------------------------------------------------------


def test_a_misspelt_worker_key_gets_did_you_mean(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.runtime.worker_config"):
        WorkerConfig.from_properties({"storePathRootDir": str(tmp_path), "httpPrt": "8083"})
    assert caplog.messages == [
        "worker config: unknown key 'httpPrt' ignored (did you mean httpPort?)"
    ]


@pytest.mark.parametrize("key", CLUSTER_ONLY_KEYS)
def test_each_cluster_key_without_a_store_url_is_refused(tmp_path: Path, key: str) -> None:
    value = WORKER_KEYS.keys[key].default
    with pytest.raises(ConfigException) as raised:
        WorkerConfig.from_properties({"storePathRootDir": str(tmp_path), key: str(value)})
    assert raised.value.key == "cluster.store.url"
    assert str(raised.value) == (
        f"cluster.store.url: required key is missing: {key} is set, which only a distributed "
        "worker reads (set cluster.store.url as docs/distributed.md shows, or remove it to run "
        "a standalone worker)"
    )


def test_sluice_worker_refuses_cluster_keys_with_a_misspelt_store_url(tmp_path: Path) -> None:
    # the config: a typo in the store URL, cluster keys set; it booted standalone
    conf = tmp_path / "worker.conf"
    conf.write_text(
        f"storePathRootDir={tmp_path / 'store'}\n"
        "cluster.store.ulr=postgresql://sluice@127.0.0.1:5432/sluice\n"
        "cluster.name=prod\nallocTaskStrategy=consistent-hash\nvirtualNode=8\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "worker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "cluster.store.url: required key is missing: cluster.name, allocTaskStrategy, virtualNode "
        "are set, which only a distributed worker reads; cluster.store.ulr is set, and looks "
        "like a typo of cluster.store.url (rename cluster.store.ulr to cluster.store.url)"
    ) in done.stderr
    assert "did you mean cluster.store.url?" in done.stderr  # the unknown key's warning
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was created


# -- the CLI against an authenticated worker -----------------------------------------------------

BASIC_HOW = "log in: --user NAME and --password, or SLUICE_USER and SLUICE_PASSWORD"
TOKEN_HOW = "give a token: --token or SLUICE_TOKEN"


@pytest.mark.parametrize(
    ("challenge", "credentials", "hint"),
    [
        ('Basic realm="sluice"', False, BASIC_HOW),
        ('Bearer realm="sluice"', False, TOKEN_HOW),
        (None, False, f"{BASIC_HOW}; or {TOKEN_HOW}"),
        ('Bearer realm="sluice"', True, f"the credentials given were refused; {TOKEN_HOW}"),
    ],
)
def test_a_401_says_how_to_authenticate(
    challenge: str | None, credentials: bool, hint: str
) -> None:
    headers = {"www-authenticate": challenge} if challenge else {}
    body = {"error_code": 401, "message": "authentication required", "suggestion": None}
    response = httpx.Response(401, json=body, headers=headers)
    error = ServerError.from_response(response, credentials=credentials)
    assert error.message == f"401 authentication required ({hint})"
    assert ServerError.from_response(httpx.Response(403, json=body)).message == (
        "403 authentication required"  # only a 401 asks for credentials
    )


@pytest.fixture(scope="module")
def basic_app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The REST app's authentication (rest.auth=basic) served over HTTP on a free port: what
    the CLI meets at a worker with credentials on (the herder is never reached)."""
    path = str(tmp_path_factory.mktemp("auth") / "users")
    add_credential(path, "ops", "admin", "s3cret-pass")
    security = RestSecurity.from_properties({"rest.auth": "basic", "rest.auth.file": path})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(None, security), host="127.0.0.1", port=port, log_level="error")  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=30, what="the REST app to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_cli_without_credentials_says_how_to_give_them(
    basic_app_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SLUICE_USER", "SLUICE_PASSWORD", "SLUICE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--url", basic_app_url, "connectors", "list"]) == 1
    assert capsys.readouterr().err == f"error: 401 authentication required ({BASIC_HOW})\n"
    wrong = ["--url", basic_app_url, "--user", "ops", "--password", "nope", "connectors", "list"]
    assert main(wrong) == 1
    refused = (
        f"error: 401 authentication required (the credentials given were refused; {BASIC_HOW})"
    )
    assert capsys.readouterr().err == refused + "\n"


@pytest.mark.parametrize(
    "typed",
    [
        "NoSuchConnector",  # shares `S…Connector` with NatsSourceConnector, nothing more
        "MySourceConnector",
        "io.confluent.connect.hdfs.HdfsSinkConnector",  # not the JDBC sink, though 0.86 close
    ],
)
def test_a_class_sharing_only_common_parts_is_no_typo(registry: PluginRegistry, typed: str) -> None:
    with pytest.raises(ConfigException) as raised:
        registry.connector(typed)
    assert "did you mean" not in str(raised.value)
