"""Client options that load code are refused over REST before any client is built (issue 34).

A harmless marker library, built here with gcc (its constructor writes a marker file), is first
shown to run when librdkafka is handed it (`plugin.library.paths`, `ssl.engine.location`) in a
process of the test's own. Then the shared worker is asked to create and to validate Kafka source
and sink connectors that name it, on both REST faces: every answer refuses the exact key the user
typed, and the marker never appears. That worker sets no `file.allowed.dirs`, so the library's
folder is an allowed one: the refusal does not depend on where the library lies. The options of
the other families that load code, run things or read files for the server (JDBC and CDC URL
parameters) are refused the same way, and MQTT and NATS refuse options in their URLs, which
they would otherwise drop. (File options outside `file.allowed.dirs` for every family:
`tests/e2e/test_ops_security.py`, whose worker confines files.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

KAFKA = {
    "source": (
        "KafkaSourceConnector",
        "source.kafka.",
        {"source.bootstrap.servers": "127.0.0.1:9", "source.topics": "t"},
    ),
    "sink": (
        "KafkaSinkConnector",
        "target.kafka.",
        {"target.bootstrap.servers": "127.0.0.1:9", "connect.topicnames": "t"},
    ),
}
#: the code-loading options under test, with what makes librdkafka act on each
LOADERS = {
    "plugin.library.paths": {},
    "ssl.engine.location": {"security.protocol": "ssl"},
}

_MARKER_C = """
#include <stdio.h>
__attribute__((constructor)) static void sluice_marker(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("loaded\\n", f); fclose(f); }
}
"""


@pytest.fixture(scope="module")
def marker_lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the library, the marker file it writes when loaded), the library proved to load."""
    folder = tmp_path_factory.mktemp("allowed")
    source, lib, marker = folder / "marker.c", folder / "libmarker.so", folder / "marker"
    source.write_text(_MARKER_C)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib), str(source), f'-DMARKER="{marker}"'],
        check=True,
        capture_output=True,
    )
    for option, extra in LOADERS.items():  # what the worker did before the policy
        conf = {"group.id": "g", "bootstrap.servers": "127.0.0.1:9", option: str(lib), **extra}
        probe = f"import confluent_kafka as k\ntry: k.Consumer({conf!r})\nexcept Exception: pass"
        subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, timeout=60)
        assert marker.exists(), f"librdkafka did not load the library through {option}"
        marker.unlink()
    return lib, marker


def _config(kind: str, option: str, lib: Path) -> tuple[str, dict[str, str]]:
    cls, prefix, base = KAFKA[kind]
    extra = {prefix + name: value for name, value in LOADERS[option].items()}
    return prefix + option, {
        "connector.class": cls,
        **base,
        **extra,
        prefix + option: str(lib),
    }


def _refused_at_create(worker: WorkerProcess, name: str, config: dict[str, str], key: str) -> str:
    """Both faces' create: a 400 whose errors name `key`; ``key: message`` of that error."""
    v1 = worker.request("POST", "/v1/connectors", json={"name": name, "config": config})
    assert v1.status_code == 400, v1.text
    rocket = worker.request("POST", f"/connectors/{name}", content=json.dumps(config))
    assert rocket.status_code == 400, rocket.text
    messages = []
    for response in (v1, rocket):
        mine = [e for e in response.json()["errors"] if e["key"] == key]
        assert mine, response.text
        messages.append(f"{key}: {mine[0]['message']}")
    assert worker.request("GET", f"/v1/connectors/{name}").status_code == 404
    return messages[0]


def _refused_at_validate(worker: WorkerProcess, config: dict[str, str], key: str) -> str:
    """Both faces' validation: the report has an error on `key`; its text."""
    cls = config["connector.class"]
    v1 = worker.request("PUT", f"/v1/connector-plugins/{cls}/config/validate", json=config)
    assert v1.status_code == 200, v1.text
    quoted = urllib.parse.quote(json.dumps(config))
    rocket = worker.body(f"/plugin/config/validate?config={quoted}")
    texts = []
    for report in (v1.json(), rocket):
        assert report["error_count"] >= 1
        by_key: dict[str, Any] = {c["value"]["name"]: c["value"] for c in report["configs"]}
        assert by_key[key]["errors"], report
        texts.append(by_key[key]["errors"][0])
    return texts[0]


@pytest.mark.parametrize("option", list(LOADERS))
@pytest.mark.parametrize("kind", list(KAFKA))
def test_kafka_options_that_load_code_are_refused_and_never_loaded(
    worker: WorkerProcess, marker_lib: tuple[Path, Path], kind: str, option: str
) -> None:
    lib, marker = marker_lib
    key, config = _config(kind, option, lib)
    # the refusal comes before any client is built: a client is what loads the library
    try:
        message = _refused_at_create(worker, f"loader-{kind}", config, key)
        report = _refused_at_validate(worker, config, key)
    finally:
        assert not marker.exists(), "the worker loaded the library"
    assert message.startswith(f"{key}: librdkafka is never given this option"), message
    assert "native code" in message
    assert report.startswith(f"{key}: librdkafka is never given this option"), report


def test_an_unlisted_kafka_option_says_how_an_operator_allows_it(worker: WorkerProcess) -> None:
    _key, config = _config("source", "plugin.library.paths", Path("/nowhere.so"))
    del config["source.kafka.plugin.library.paths"]
    config["source.kafka.debug"] = "all"
    response = worker.request("POST", "/v1/connectors", json={"name": "dbg", "config": config})
    assert response.status_code == 400, response.text
    [error] = [e for e in response.json()["errors"] if e["key"] == "source.kafka.debug"]
    assert "not an option this worker passes to librdkafka" in error["message"]
    assert "connector.client.config.override.allowlist" in error["suggestion"]


@pytest.mark.parametrize(
    ("cls", "config", "refused"),
    [
        (
            "JdbcSourceConnector",
            {
                "connection.url": "postgresql://u@127.0.0.1:9/db?sslkeylogfile=/tmp/keys",
                "mode": "bulk",
                "connect.topicname": "t",
            },
            "URL parameter 'sslkeylogfile': libpq (psycopg) is never given this option",
        ),
        (
            "JdbcSinkConnector",
            {
                "connection.url": "mysql+pymysql://u@127.0.0.1:9/db?local_infile=1",
                "connect.topicnames": "t",
            },
            "URL parameter 'local_infile': PyMySQL is never given this option",
        ),
        (
            "PostgresCdcSourceConnector",
            {
                "connection.url": "postgresql://u@127.0.0.1:9/db?sslkey=pkcs11:token",
                "topic.prefix": "p",
            },
            "URL parameter 'sslkey': 'pkcs11:token' is refused",
        ),
        (
            "MySqlCdcSourceConnector",
            {
                "connection.url": "mysql+pymysql://u@127.0.0.1:9/db?read_default_file=/etc/my.cnf",
                "topic.prefix": "p",
                "table.include.list": "db.t",
            },
            "URL parameter 'read_default_file': PyMySQL is never given this option",
        ),
    ],
)
def test_database_url_parameters_that_load_code_or_leak_files_are_refused(
    worker: WorkerProcess, cls: str, config: dict[str, str], refused: str
) -> None:
    config = {"connector.class": cls, **config}
    message = _refused_at_create(worker, f"url-{cls}", config, "connection.url")
    assert message.startswith(f"connection.url: {refused}"), message
    report = _refused_at_validate(worker, config, "connection.url")
    assert report.startswith(f"connection.url: {refused}"), report


@pytest.mark.parametrize(
    ("cls", "config", "key"),
    [
        (
            "MqttSinkConnector",
            {"mqtt.url": "tcp://127.0.0.1:1883?ca_certs=/etc/shadow"},
            "mqtt.url",
        ),
        ("NatsSinkConnector", {"nats.url": "tls://127.0.0.1:4222?tls_key=/etc/shadow"}, "nats.url"),
    ],
)
def test_mqtt_and_nats_refuse_options_in_their_url(
    worker: WorkerProcess, cls: str, config: dict[str, str], key: str
) -> None:
    config = {"connector.class": cls, "connect.topicnames": "t", **config}
    message = _refused_at_create(worker, f"url-{cls}", config, key)
    assert "sluice passes no client options from the URL" in message, message
