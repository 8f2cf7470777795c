"""The connector-level keys (sluice.engine.settings) and the create-time checks built on them
(sluice.runtime.herder.validation): every bad key reported, unknown keys warned, aliases renamed."""

from __future__ import annotations

import json

import pytest

from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSourceConnector
from sluice.engine.errors import DeadLetter, ErrorPolicy, ErrorReporter
from sluice.engine.settings import TopicUse, canonical_keys, check_config, parse_settings, topic_use
from sluice.runtime.herder import BadRequest, Conflict, validation
from sluice.runtime.plugins import PluginRegistry
from sluice.sdk import ConfigException


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry()


def _source(tmp_path, **extra: str) -> dict[str, str]:
    src = tmp_path / "in.txt"
    src.write_text("")
    return {
        "connector.class": "FileSourceConnector",
        "filename": str(src),
        "connect.topicname": "t",
        **extra,
    }


def test_a_good_config_gives_typed_settings(registry: PluginRegistry, tmp_path) -> None:
    report, _ = validation.check(
        registry,
        {
            "connector.class": "FileSinkConnector",
            "filename": str(tmp_path / "out"),
            "topics": "a;b",
            "tasks.max": "3",
            "pipeline.fused": "false",
            "read.max.rows": "10",
            "task.group.id": "g1",
        },
    )
    assert report.ok and report.warnings == []
    settings = report.settings
    assert settings is not None
    assert (settings.kind, settings.max_tasks, settings.read_max_rows) == ("sink", 3, 10)
    assert settings.topics == ("a", "b")
    assert settings.pipeline_fused is False
    assert settings.task_group_id == "g1"
    assert settings.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    # Kafka's names are renamed, so the rest of the runtime reads one name per setting
    assert report.config["max.tasks"] == "3" and "tasks.max" not in report.config
    assert report.config["connect.topicnames"] == "a;b" and "topics" not in report.config
    # what the runner reads when it starts the query: the same settings from the same config
    assert parse_settings(report.config, "sink") == settings
    with pytest.raises(ConfigException, match=r"^read\.max\.rows: "):
        parse_settings({**report.config, "read.max.rows": "many"}, "sink")


def test_every_bad_key_is_reported_not_only_the_first(registry: PluginRegistry, tmp_path) -> None:
    report, _ = validation.check(
        registry,
        _source(
            tmp_path,
            **{
                "pipeline.fused": "flase",
                "max.tasks": "0",
                "key.converter": "NoSuchConverter",
                "errors.tolerance": "some",
            },
        ),
    )
    by_key = {p.key: p for p in report.errors}
    assert set(by_key) == {"pipeline.fused", "max.tasks", "key.converter", "errors.tolerance"}
    assert by_key["pipeline.fused"].message == "expected a boolean (true/false), got 'flase'"
    assert by_key["key.converter"].message.startswith("unknown converter 'NoSuchConverter'")
    assert all(p.code == "connect.config" for p in report.errors)
    with pytest.raises(BadRequest) as raised:
        validation.accepted(registry, "c", _source(tmp_path, **{"pipeline.fused": "flase"}))
    assert raised.value.key == "pipeline.fused"
    assert raised.value.errors == [
        {
            "code": "connect.config",
            "key": "pipeline.fused",
            "message": "expected a boolean (true/false), got 'flase'",
            "suggestion": None,
        }
    ]


def test_pipeline_fused_is_a_boolean_where_the_engine_reads_it() -> None:
    assert not parse_settings({"connector.class": "x", "pipeline.fused": "false"}, "source").fused
    assert parse_settings({"connector.class": "x"}, "source").fused
    assert not parse_settings(
        {"connector.class": "x", "transforms": "t", "transforms.t.type": "x"}, "source"
    ).fused
    with pytest.raises(ConfigException, match=r"pipeline\.fused: expected a boolean"):
        parse_settings(
            {"connector.class": "x", "pipeline.fused": "flase"}, "source"
        )  # it used to mean true


def test_unknown_keys_are_warnings_with_did_you_mean(registry: PluginRegistry, tmp_path) -> None:
    config = _source(
        tmp_path,
        **{
            "transforms": "d",
            "transforms.d.type": "ReplaceFieldValue",
            "transforms.d.exlcude": "a",
            "transforms.e.exclude": "b",
            "erors.tolerance": "all",
            "completely.different": "x",
            "key.converter.schemas.enable": "false",  # a converter option: not unknown
        },
    )
    report, _ = validation.check(registry, config)
    assert report.ok
    by_key = {p.key: p for p in report.warnings}
    assert set(by_key) == {
        "transforms.d.exlcude",
        "transforms.e.exclude",
        "erors.tolerance",
        "completely.different",
    }
    assert by_key["transforms.d.exlcude"].suggestion == "did you mean transforms.d.exclude?"
    assert by_key["erors.tolerance"].suggestion == "did you mean errors.tolerance?"
    assert by_key["completely.different"].suggestion is None
    assert by_key["transforms.e.exclude"].message == "transforms.e is not in transforms= (d)"
    assert {p.code for p in report.warnings} == {"connect.config.unknown"}


def test_a_misspelled_connector_key_is_warned(registry: PluginRegistry) -> None:
    # the connector's own keys, without its validate (which would connect to the database)
    report = check_config(
        {
            "connector.class": "JdbcSinkConnector",
            "connection.url": "jdbc:postgresql://h/db",
            "insert.mdoe": "upsert",
            "topics": "t",
        },
        kind="sink",
        connector_keys=JdbcSinkConnector.config_def,
        resolve_transform=registry.transform,
    )
    [warning] = report.warnings
    assert (warning.key, warning.suggestion) == ("insert.mdoe", "did you mean insert.mode?")


def test_aliases_that_contradict_are_an_error() -> None:
    conf, errors = canonical_keys({"tasks.max": "2", "max.tasks": "3"})
    assert conf == {"max.tasks": "3"}
    [error] = errors
    assert error.key == "tasks.max" and error.suggestion == "set only max.tasks"
    assert canonical_keys({"tasks.max": "2", "max.tasks": "2"}) == ({"max.tasks": "2"}, [])


def test_kafka_file_connectors_and_their_keys(registry: PluginRegistry, tmp_path) -> None:
    (tmp_path / "in").write_text("")
    report, cls = validation.check(
        registry,
        {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(tmp_path / "in"),
            "topic": "t",
            "tasks.max": "1",
        },
    )
    assert report.ok and report.warnings == [] and cls.__name__ == "FileSourceConnector"
    assert report.config["filename"] == str(tmp_path / "in")
    assert report.config["connect.topicname"] == "t"
    sink = registry.connector("org.apache.kafka.connect.file.FileStreamSinkConnector")
    assert sink.__name__ == "FileSinkConnector"


def test_plugin_keys_list_the_connector_level_keys_too() -> None:
    from sluice.connectors.file import FileSinkConnector

    names = [k["name"] for k in validation.plugin_keys(FileSinkConnector)]
    assert names[:2] == ["filename", "connect.topicnames"]  # the connector's own first
    for key in ("max.tasks", "pipeline.fused", "value.converter", "transforms", "task.group.id"):
        assert key in names
    assert names.count("connect.topicnames") == 1


def test_plugin_keys_show_defaults_as_a_user_types_them() -> None:
    """The console's placeholders and `/plugin/config` show `true`, not Python's `True`."""
    from sluice.connectors.file import FileSinkConnector

    defaults = {k["name"]: k["default_value"] for k in validation.plugin_keys(FileSinkConnector)}
    assert defaults["pipeline.fused"] == "true"
    assert defaults["errors.log.enable"] == "false"
    assert validation.shown_default(["a", "b"]) == "a,b"
    assert validation.shown_default(5) == "5"


def test_a_plugin_summary_is_its_docstrings_first_line() -> None:
    from sluice.connectors.file import FileSinkConnector
    from sluice.runtime.plugins import summary_of

    class Undocumented(FileSinkConnector):
        pass

    class Documented(FileSinkConnector):
        """

        Writes somewhere.
        More detail.
        """

    assert summary_of(Documented) == "Writes somewhere."
    assert summary_of(Undocumented) == ""  # not its base's: the summary is the class's own
    assert summary_of(FileSinkConnector)


def test_positions_keys_cannot_change_in_place() -> None:
    old = {"mode": "incrementing", "incrementing.column.name": "id"}
    new = {"mode": "timestamp", "timestamp.column.name": "ts"}
    validation.check_position_keys(JdbcSourceConnector, old, new, has_positions=False)
    with pytest.raises(Conflict) as raised:
        validation.check_position_keys(JdbcSourceConnector, old, new, has_positions=True)
    assert raised.value.key == "mode"
    assert "reset its offsets" in (raised.value.suggestion or "")


def test_offsets_partitions_are_matched_or_refused() -> None:
    stored = {json.dumps({"queueId": "4", "topic": "t"}, sort_keys=True): {"queueOffset": 1}}
    entry = {"partition": {"topic": "t", "queueId": 4}, "offset": {"queueOffset": 0}}
    [matched] = validation.match_partitions([entry], stored)
    assert matched["partition"] == {"queueId": "4", "topic": "t"}  # the stored form
    with pytest.raises(BadRequest, match=r"offsets\[0\].partition: .* is none of"):
        validation.match_partitions(
            [{"partition": {"topic": "t", "queueId": 5}, "offset": None}], stored
        )
    assert validation.match_partitions([entry], {}) == [entry]  # nothing stored: as given


def _letter(value: bytes) -> DeadLetter:
    return DeadLetter(
        key=b"k-1",
        value=value,
        timestamp=None,
        headers={},
        topic="t",
        partition="0",
        offset="7",
        stage="VALUE_CONVERTER",
        class_name="JsonConverter",
        exception_class="DataException",
        message="value is not valid JSON: " + value.decode(),
    )


def test_the_log_line_hides_the_record_unless_asked() -> None:
    secret = b"card=4111-1111-1111-1111"
    hidden = ErrorReporter(ErrorPolicy(tolerate=True, log=True), "c").describe(_letter(secret), 0)
    assert "4111" not in hidden
    assert "record data hidden: errors.log.include.messages=false" in hidden
    assert "task c-0" in hidden
    short = ErrorReporter(ErrorPolicy(tolerate=True, log=True), "c").describe(_letter(b"{x"), 0)
    assert "JSON: {x." not in short
    shown = ErrorReporter(ErrorPolicy(tolerate=True, log=True, log_messages=True), "c")
    assert "4111" in shown.describe(_letter(secret), 0)


_PLUGIN = '''
from sluice.sdk import ConfigDef, ConfigKey, SourceConnector, SourceTask


class OwnValidateSource(SourceConnector):
    """A plugin whose validate forgets the SDK's."""

    config_def = ConfigDef(
        ConfigKey("mode", "string", "a", check=lambda v: None if v in ("a", "b") else "a or b"),
    )

    def validate(self, config):
        pass

    def task_class(self):
        return SourceTask

    def task_configs(self, max_tasks):
        return [{}]
'''


def test_every_keys_check_runs_when_validate_skips_the_sdks(tmp_path) -> None:
    (tmp_path / "own_validate_plugin.py").write_text(_PLUGIN)
    registry = PluginRegistry([str(tmp_path)])
    config = {"connector.class": "OwnValidateSource", "connect.topicname": "t", "mode": "c"}
    report, _ = validation.check(registry, config)
    assert [(p.key, p.message) for p in report.errors] == [("mode", "a or b")]
    # the check sees the config as prepared (references resolved), not as stored
    report, _ = validation.check(
        registry, {**config, "mode": "${x}"}, prepare=lambda c, cls: {**c, "mode": "b"}
    )
    assert report.errors == []


def test_a_config_is_shown_under_the_names_its_user_typed() -> None:
    from sluice.engine.settings import POSTED_NAMES_KEY, as_posted, posted_names

    typed = {"connector.class": "FileStreamSinkConnector", "topics": "t", "tasks.max": "2"}
    typed |= {"file": "/tmp/out"}
    canonical, errors = canonical_keys(typed, {"file": "filename"})
    assert not errors
    names = posted_names(typed, canonical, {"file": "filename"})
    assert names == "connect.topicnames=topics,filename=file,max.tasks=tasks.max"
    assert as_posted({**canonical, POSTED_NAMES_KEY: names}) == typed
    # sluice's own names typed: nothing to remember, nothing renamed
    own = {"connect.topicnames": "t", "max.tasks": "1"}
    assert posted_names(own, own, None) == "" and as_posted(own) == own
    # both an alias and its name typed (equal values): stored and shown under sluice's name
    both = {"topics": "t", "connect.topicnames": "t"}
    assert posted_names(both, canonical_keys(both)[0], None) == ""
    # a forged or stale entry never drops or overwrites a key
    forged = {"a": "1", "b": "2", POSTED_NAMES_KEY: "a=b,zz=y,=x,c"}
    assert as_posted(forged) == {"a": "1", "b": "2"}


def test_a_password_put_back_masked_under_its_alias_keeps_the_stored_value() -> None:
    # shown as posted, RocketMQ Connect's `mqttSecretKey` comes back as `********`: it must keep
    # the stored `mqtt.password`, not become it
    from sluice.connectors.mqtt.source import MqttSourceConnector
    from sluice.runtime.herder.base import _stored_as_typed
    from sluice.runtime.secrets import PASSWORD_MASK, keep_masked

    stored = {"mqtt.url": "tcp://h:1883", "mqtt.password": "real", "mqtt.username": "u"}
    shown = {"mqttBrokerUrl": "tcp://h:1883", "mqttSecretKey": PASSWORD_MASK, "mqttAccessKey": "u"}
    aliases = MqttSourceConnector.key_aliases
    old, secret = _stored_as_typed(stored, shown, ["mqtt.password"], aliases)
    assert keep_masked(shown, old, secret)["mqttSecretKey"] == "real"
    changed = {**shown, "mqttSecretKey": "new"}
    assert keep_masked(changed, old, secret)["mqttSecretKey"] == "new"


def test_the_topics_a_config_names_are_read_as_when_it_runs() -> None:
    sink = {"connector.class": "FileSinkConnector", "topics": " a ; b,, c ", "filename": "/x"}
    assert topic_use(sink) == TopicUse(reads=("a", "b", "c"))  # Kafka's alias, `;` or `,`
    source = {
        "connector.class": "FileSourceConnector",
        "connect.topicname": " lines ",
        "errors.deadletterqueue.topic.name": "dlq",
    }
    use = topic_use(source)
    assert use == TopicUse(writes="lines", dead_letters="dlq")
    assert use.names("lines") and use.names("dlq") and not use.names("a")
    assert not topic_use({"connector.class": "FileSinkConnector"}).names("")


def _names_key(node: object, keys: set[str]) -> bool:
    import ast

    return isinstance(node, ast.Constant) and node.value in keys


def _hand_reads(tree: object, keys: set[str], where: str) -> list[str]:
    """Where a module parses a declaration of connector-level keys, builds a policy from a raw
    config, or reads one of `keys` out of a mapping (`conf.get("transforms")`, `conf["…"]`)."""
    import ast

    declarations = {"RUNTIME_KEYS", "COMMON_KEYS", "SINK_KEYS", "PIPELINE_KEYS", "ERROR_KEYS"}
    found = []
    for node in ast.walk(tree):  # type: ignore[arg-type]
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = getattr(node.func.value, "id", "")
            if node.func.attr == "parse" and owner in declarations:
                found.append(f"{at} parses {owner}")
            if node.func.attr == "from_config" and owner in ("ErrorPolicy", "RetryPolicy"):
                found.append(f"{at} calls {owner}.from_config")
            first = node.args[0] if node.args else None
            if node.func.attr in ("get", "pop") and _names_key(first, keys):
                found.append(f"{at} reads {first.value!r}")  # type: ignore[union-attr]
        elif isinstance(node, ast.Subscript) and _names_key(node.slice, keys):
            found.append(f"{at} reads {node.slice.value!r}")  # type: ignore[attr-defined]
    return found


def test_no_module_reads_a_connector_level_key_outside_the_settings_owner() -> None:
    """Issue 28: the connector-level keys are parsed once, by `sluice.engine.settings`, and
    passed down as `ConnectorSettings` (or asked of it: `topic_use`, `restart_policy`). The
    engine, runtime, REST API, bus and stores neither parse their declarations again nor read
    one of those keys out of a config by hand. `connector.class` is the exception: it picks the
    plugin, which says the kind the settings are parsed for."""
    import ast
    from pathlib import Path

    from sluice.engine.settings import ALIASES, key_definitions
    from sluice.sdk import ConfigDef

    src = Path(__file__).resolve().parents[2] / "src" / "sluice"
    owner = {src / "engine" / "settings.py", src / "engine" / "keys.py"}
    # the worker's own properties (its `schema.compatibility` is the worker-wide default)
    owner.add(src / "runtime" / "worker_config.py")
    keys = (set(key_definitions("sink", ConfigDef())) | set(ALIASES)) - {"connector.class", "name"}
    found = []
    for folder in ("engine", "runtime", "rest", "bus", "store"):
        for path in sorted((src / folder).rglob("*.py")):
            if path in owner:
                continue
            tree = ast.parse(path.read_text(), str(path))
            found += _hand_reads(tree, keys, str(path.relative_to(src)))
    assert found == []
