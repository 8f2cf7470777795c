"""Worker config parsing, the config/status stores and the plugin registry (no Spark)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.properties_file import parse_properties
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import ConfigException
from sluice.store.configs import SqliteConfigStore
from sluice.store.counters import SqliteCounters
from sluice.store.positions import SqlitePositionStore
from sluice.store.statuses import SqliteStatusStore


def test_properties_parse_comments_separators_and_blank_lines() -> None:
    text = "# comment\n! also a comment\n\nworkerId = w1\nhttpPort:9000\nspark.master=local[2]\n"
    assert parse_properties(text) == {
        "workerId": "w1",
        "httpPort": "9000",
        "spark.master": "local[2]",
    }


def test_properties_errors_name_the_file_and_line() -> None:
    # java.util.Properties reads a line without a separator as a key with an empty value (it was
    # an error here, unlike the CLI and Java: issue 19); what is still refused names the line.
    assert parse_properties("a=1\noops\n", "w.conf") == {"a": "1", "oops": ""}
    with pytest.raises(ConfigException, match=r"^w.conf:2: malformed \\u escape"):
        parse_properties("a=1\nb=\\u12x4\n", "w.conf")
    with pytest.raises(ConfigException, match=r"^w.conf:1: an entry has no key"):
        parse_properties("=value\n", "w.conf")


def test_worker_config_defaults_paths_and_spark_pass_through(tmp_path: Path) -> None:
    conf = WorkerConfig.from_properties(
        {"storePathRootDir": "store", "pluginPaths": "p1, p2", "spark.master": "local[1]"},
        base_dir=str(tmp_path),
    )
    assert conf.rest.port == 8082 and conf.worker_id == "standalone-worker"
    assert conf.store_root == str(tmp_path / "store")
    assert conf.plugin_paths == (str(tmp_path / "p1"), str(tmp_path / "p2"))
    assert conf.spark == {"spark.master": "local[1]"}
    assert conf.bus.retention_bytes is None and conf.trigger_interval_ms == 100


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"httpPort": "eighty"}, "httpPort: expected an integer, got 'eighty'"),
        ({"bus": "pulsar"}, "bus: must be one of embedded, rocketmq, kafka, got 'pulsar'"),
        ({"bus": "kafka"}, "bootstrap.servers: required key is missing (bus=kafka)"),
        ({"offsetCommitIntervalMsConfig": "-5"}, "offsetCommitIntervalMsConfig: must be at least"),
    ],
)
def test_worker_config_errors_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigException) as info:
        WorkerConfig.from_properties(props)
    assert str(info.value).startswith(message)


def test_unreadable_worker_config_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match="cannot read worker config"):
        WorkerConfig.load(str(tmp_path / "missing.conf"))


def test_config_store_round_trip_and_target_states(tmp_path: Path) -> None:
    store = SqliteConfigStore(tmp_path / "configs.sqlite")
    store.put("b", {"connector.class": "X"})
    store.put("a", {"connector.class": "Y", "k": "v"}, "PAUSED")
    store.set_task_configs("a", [{"task": "0"}])
    assert store.names() == ["a", "b"]
    assert store.all() == [store.get("a"), store.get("b")]  # one read, same answers
    a = store.get("a")
    assert a is not None and a.target_state == "PAUSED" and a.task_configs == [{"task": "0"}]
    store.put("a", {"connector.class": "Y", "k": "w"}, "STARTED")  # a new config: tasks re-planned
    again = SqliteConfigStore(tmp_path / "configs.sqlite").get("a")  # a fresh process sees it
    assert again is not None and again.config["k"] == "w" and again.task_configs == []
    store.delete("a")
    assert store.get("a") is None
    with pytest.raises(ValueError, match="target state 'RUNNING' is not one of"):
        store.set_target_state("b", "RUNNING")


def test_status_store_replaces_task_rows(tmp_path: Path) -> None:
    store = SqliteStatusStore(tmp_path / "statuses.sqlite")
    store.put("c", "RUNNING", "w1", tasks=3)
    own, tasks = store.get("c")
    assert own is not None and own.state == "RUNNING" and [t.task for t in tasks] == [0, 1, 2]
    store.put("b", "PAUSED", "w2", tasks=1)
    assert store.all() == {"b": store.get("b"), "c": store.get("c")}
    store.put("c", "FAILED", "w1", trace="Boom: it broke", tasks=1)
    own, tasks = store.get("c")
    assert own is not None and own.trace == "Boom: it broke"
    assert [(t.task, t.state) for t in tasks] == [(0, "FAILED")]
    store.delete("c")
    assert store.get("c") == (None, [])


def test_counters_and_positions_read_for_every_connector_at_once(tmp_path: Path) -> None:
    counters = SqliteCounters(tmp_path / "counters.sqlite")
    counters.add("a", {"records-total": 3})
    counters.add("a", {"records-total": 2, "batches-total": 1})
    counters.add("b", {"total-retries": 1})
    assert counters.all() == {"a": counters.get("a"), "b": {"total-retries": 1}}
    assert counters.get("a") == {"records-total": 5, "batches-total": 1}
    positions = SqlitePositionStore(tmp_path / "positions.sqlite")
    positions.save("a", {'{"f":"x"}': {"position": 4}})
    positions.save("b", {'{"q":"0"}': {"queueOffset": 7}, '{"q":"1"}': {"queueOffset": 0}})
    assert positions.load_all() == {"a": positions.load("a"), "b": positions.load("b")}
    assert positions.load("b")['{"q":"0"}'] == {"queueOffset": 7}


PLUGIN = textwrap.dedent(
    '''
    from sluice.connectors.file import FileSinkConnector


    class FileSinkConnector(FileSinkConnector):
        """Same short name as a built-in: must not shadow it."""


    class ExtraSink(FileSinkConnector):
        """A plugin sink."""
    '''
)


def test_plugin_folder_scan_reload_and_no_shadowing(tmp_path: Path) -> None:
    folder = tmp_path / "plugins"
    folder.mkdir()
    registry = PluginRegistry([str(folder)])
    with pytest.raises(ConfigException, match="unknown connector class 'ExtraSink'"):
        registry.connector("ExtraSink")
    (folder / "unit_extra_plugin.py").write_text(PLUGIN)
    (folder / "unit_broken_plugin.py").write_text("import does_not_exist\n")
    registry.reload()
    assert registry.connector("ExtraSink").__module__ == "unit_extra_plugin"
    assert registry.connector("unit_extra_plugin.ExtraSink") is registry.connector("ExtraSink")
    assert registry.connector("FileSinkConnector").__module__ == "sluice.connectors.file.sink"
    assert "ModuleNotFoundError" in registry.errors[str(folder / "unit_broken_plugin.py")]
    kinds = {p.class_name: p.type for p in registry.plugins()}
    assert kinds["unit_extra_plugin.ExtraSink"] == "sink"
    assert kinds["sluice.transforms.sql.Sql"] == "transform"


def test_missing_plugin_folder_is_reported(tmp_path: Path) -> None:
    registry = PluginRegistry([str(tmp_path / "nope")])
    assert registry.errors == {str(tmp_path / "nope"): "plugin path is not a directory"}


def test_worker_keys_are_parsed_once_into_typed_fields(tmp_path: Path) -> None:
    secret = tmp_path / "secret.properties"
    secret.write_text("password=s3cret\n")
    config = WorkerConfig.from_properties(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "cluster.shared.path.check": "false",
            "cluster.shared.path.check.timeout.ms": "5000",
            "file.allowed.dirs": str(tmp_path),
            "bus": "rocketmq",
            "namesrvAddr": "127.0.0.1:9876",
            "config.providers": "file",
            "config.providers.file.param.allowed.paths": str(tmp_path),
            "rest.auth": "none",
        }
    )
    assert (
        config.cluster.shared_path_check is False
        and config.cluster.shared_path_check_timeout_ms == 5000
    )
    assert config.client_policy.allowed_dirs == (str(tmp_path.resolve()),)
    # the bus backends' keys only: the bus chosen parses them
    assert config.bus.props == {"namesrvAddr": "127.0.0.1:9876"}
    resolved = config.providers.resolve({"p": f"${{file:{secret}:password}}"}, frozenset())
    assert resolved == {"p": "s3cret"}
    assert WorkerConfig.from_properties({}).cluster.shared_path_check is True


def test_an_unreadable_worker_config_names_the_file(tmp_path: Path) -> None:
    from sluice.runtime.properties_file import read_properties

    with pytest.raises(ConfigException) as caught:
        read_properties(str(tmp_path / "nope.properties"))
    assert caught.value.key == "-c" and "nope.properties" in str(caught.value)
