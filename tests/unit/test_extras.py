"""Optional extras: each family's client library is an extra of pyproject.toml, declared by the
classes that need it, imported only on their code path, and a missing one is a clear error
naming the install line (at create, in the client code, at worker start for `bus=kafka`).

A library is made "missing" with ``sys.modules[name] = None``, which makes both
`importlib.util.find_spec` and `import` behave as if it were not installed. The same story in a
real venv without extras: tests/e2e/test_core_install.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from sluice.bus import create_bus
from sluice.converters import converter_from_config
from sluice.runtime.herder import BadRequest, validation
from sluice.runtime.plugins import BUILTIN_CONNECTORS, default_registry
from sluice.sdk import ConfigException, extras
from sluice.sdk.extras import Requirement, problem, require

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = PYPROJECT["optional-dependencies"]
REQUIREMENTS = [v for v in vars(extras).values() if isinstance(v, Requirement)]

#: What each built-in connector needs beyond the core install (README, "Dependencies").
EXPECTED = {
    "FileSourceConnector": None,
    "FileSinkConnector": None,
    "JdbcSourceConnector": None,
    "JdbcSinkConnector": None,
    "PostgresCdcSourceConnector": None,
    "MySqlCdcSourceConnector": "cdc",
    "RocketMQSourceConnector": None,
    "RocketMQSinkConnector": None,
    "KafkaSourceConnector": "kafka",
    "KafkaSinkConnector": "kafka",
    "RedisStreamSourceConnector": "redis",
    "RedisListSourceConnector": "redis",
    "RedisSinkConnector": "redis",
    "RabbitMQStreamSourceConnector": "rabbitmq",
    "RabbitMQSourceConnector": "rabbitmq",
    "RabbitMQSinkConnector": "rabbitmq",
    "MqttSourceConnector": "mqtt",
    "MqttSinkConnector": "mqtt",
    "NatsSourceConnector": "nats",
    "NatsSinkConnector": "nats",
    "ParquetSinkConnector": None,
    "DeltaSinkConnector": "lake",
    "IcebergSinkConnector": "lake",
    "HttpSinkConnector": "http",
}


def _extra_of(requirement: Requirement) -> str:
    match = re.fullmatch(r"pip install 'sluice\[(\w+)\]'", requirement.install)
    assert match, requirement.install
    return match.group(1)


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[=<>~ ]", r, maxsplit=1)[0].lower() for r in requirements}


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `modules` look uninstalled for this test."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


# -- the SDK helper -------------------------------------------------------------------------------
def test_require_imports_the_module_or_names_the_install_line(monkeypatch) -> None:
    json_requirement = Requirement("json", "the JSON module", "pip install nothing")
    assert require(json_requirement, "X") is json
    missing = Requirement("sluice_no_such_client", "the demo client", "pip install 'sluice[x]'")
    assert not missing.available()
    assert problem([json_requirement, missing], "DemoSink") == (
        "DemoSink needs the demo client: pip install 'sluice[x]'"
    )
    assert problem([json_requirement], "DemoSink") is None
    with pytest.raises(ConfigException) as caught:
        require(missing, "DemoSink")
    assert caught.value.key == "connector.class"
    assert str(caught.value) == (
        "connector.class: DemoSink needs the demo client: pip install 'sluice[x]'"
    )
    dotted = Requirement("sluice_no_such_pkg.client", "a client", "pip install it")
    assert not dotted.available()  # its parent package is missing: not an error of its own
    with pytest.raises(ConfigException, match=r"bus: bus=x needs a client: pip install it$"):
        require(dotted, "bus=x", key="bus")


def test_require_says_why_when_the_library_is_there_but_fails_to_import(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "sluice_broken_client.py").write_text("import sluice_missing_native_part\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = Requirement("sluice_broken_client", "the broken client", "pip install it")
    assert broken.available()  # found: a create goes through, the task then says why it failed
    with pytest.raises(ConfigException) as caught:
        require(broken, "BrokenSink")
    assert "BrokenSink needs the broken client: pip install it" in str(caught.value)
    assert "No module named 'sluice_missing_native_part'" in str(caught.value)


# -- pyproject's extras and the declarations ------------------------------------------------------
def test_every_built_in_connector_declares_the_extra_of_its_client_library() -> None:
    declared = {
        name: [_extra_of(r) for r in cls.requires]
        for name, cls in BUILTIN_CONNECTORS.items()
        if "." not in name and name in EXPECTED
    }
    short = {n for n in BUILTIN_CONNECTORS if "." not in n and not n.startswith("FileStream")}
    assert short == set(EXPECTED), "a new built-in connector: say which extra it needs"
    assert declared == {n: [e] if e else [] for n, e in EXPECTED.items()}


def test_each_extra_installs_the_module_its_requirement_imports() -> None:
    providers = packages_distributions()  # top-level module -> distributions
    for requirement in REQUIREMENTS:
        extra = _extra_of(requirement)
        assert extra in EXTRAS, f"{requirement.install}: pyproject has no extra {extra!r}"
        top = requirement.module.split(".")[0]
        dists = {d.lower() for d in providers.get(top, [])}
        assert dists & _names(EXTRAS[extra]), (requirement.module, extra, dists)


def test_the_core_carries_no_extra_and_all_and_dev_carry_every_extra() -> None:
    core = _names(PYPROJECT["dependencies"])
    families = {k: v for k, v in EXTRAS.items() if k not in ("all", "dev")}
    for extra, packages in families.items():
        assert not core & _names(packages), extra
    assert EXTRAS["all"] == [f"sluice[{','.join(families)}]"]
    assert "sluice[all]" in EXTRAS["dev"]  # `pip install -e '.[dev]'` keeps running every test
    assert families["rocketmq"] == []  # sluice speaks RocketMQ's protocol itself


def test_readme_says_which_extra_each_connector_needs() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Dependencies") :]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    for name, extra in EXPECTED.items():
        row = next((r for r in rows if f"`{name}`" in r), None)
        assert row is not None, f"README's extras table does not name {name}"
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == (f"`{extra}`" if extra else "core"), row


# -- where a missing library is reported ----------------------------------------------------------
def test_a_connector_whose_extra_is_missing_is_a_400_naming_the_install_line(monkeypatch) -> None:
    hide(monkeypatch, "redis")
    config = {"connector.class": "RedisSinkConnector", "connect.topicnames": "t"}
    for check in (validation.check, validation.validation_result):
        with pytest.raises(BadRequest) as caught:
            check(default_registry(), config)
        assert caught.value.status == 400
        assert caught.value.key == "connector.class"
        assert str(caught.value) == (
            "connector.class: RedisSinkConnector needs the redis client (redis-py): "
            "pip install 'sluice[redis]'"
        )
    # the client code says the same if a stored config reaches it
    from sluice.connectors.redis._client import redis_module

    with pytest.raises(ConfigException, match=re.escape("pip install 'sluice[redis]'")):
        redis_module()


def test_a_missing_extra_of_another_family_leaves_a_connector_alone(monkeypatch) -> None:
    hide(monkeypatch, "redis", "pika", "confluent_kafka", "deltalake", "fastavro")
    config = {"connector.class": "FileSinkConnector", "connect.topicnames": "t", "filename": "x"}
    report, cls = validation.check(default_registry(), config)
    assert cls.__name__ == "FileSinkConnector"
    assert [p.key for p in report.errors if p.key == "connector.class"] == []


def test_the_avro_converter_without_fastavro_names_its_key_and_extra(monkeypatch) -> None:
    hide(monkeypatch, "fastavro")
    with pytest.raises(ConfigException) as caught:
        converter_from_config({"value.converter": "AvroConverter"}, "value")
    assert str(caught.value) == (
        "value.converter: AvroConverter needs the Avro library (fastavro): "
        "pip install 'sluice[avro]'"
    )


def test_bus_kafka_without_confluent_kafka_names_the_bus_key(monkeypatch, tmp_path) -> None:
    hide(monkeypatch, "confluent_kafka")
    with pytest.raises(ConfigException) as caught:
        create_bus("kafka", {"bootstrap.servers": "127.0.0.1:9092"}, tmp_path)
    assert caught.value.key == "bus"
    assert "pip install 'sluice[kafka]'" in str(caught.value)


def test_a_worker_on_bus_kafka_without_confluent_kafka_exits_2_naming_bus(tmp_path) -> None:
    """The worker's own start path, in a fresh interpreter that cannot import confluent_kafka."""
    conf = tmp_path / "worker.conf"
    conf.write_text(
        f"storePathRootDir={tmp_path / 'store'}\nhttpPort=1\nbus=kafka\n"
        "bootstrap.servers=127.0.0.1:9092\n"
    )
    code = (
        "import sys\nsys.modules['confluent_kafka'] = None\n"
        "from sluice.worker_main import run_worker\n"
        f"sys.exit(run_worker({str(conf)!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        f"error: worker config {conf}: bus: bus=kafka needs the Kafka client (confluent-kafka): "
        "pip install 'sluice[kafka]'"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_nothing_of_sluice_imports_a_client_library_until_it_is_used() -> None:
    """In a fresh interpreter: the worker, REST, CLI, engine, every connector package, the
    converters and the plugin listing load none of the extras' libraries."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import sluice\n"
        "skip = ('__main__', 'zygote', 'worker_daemon')\n"
        "for m in pkgutil.walk_packages(sluice.__path__, 'sluice.'):\n"
        "    if not m.name.endswith(skip):\n"
        "        importlib.import_module(m.name)\n"
        "from sluice.runtime.plugins import default_registry\n"
        "listed = {p.class_name.rsplit('.', 1)[-1] for p in default_registry().plugins()}\n"
        "print(json.dumps([sorted(listed), sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    listed, loaded = json.loads(done.stdout.splitlines()[-1])
    assert set(EXPECTED) <= set(listed)  # the plugin list names every built-in connector
    clients = {r.module.split(".")[0] for r in REQUIREMENTS}
    assert clients & set(loaded) == set()
