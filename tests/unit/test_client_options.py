"""The client-option policy (pure logic): never options, reserved options, the allowlist and how an
operator widens it, file options inside `file.allowed.dirs`, value checks, and what each built-in
connector declares it passes through (`Connector.client_options`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.connectors._sql.connection import parse_connection
from sluice.connectors.cdc.mysql import MySqlCdcSourceConnector
from sluice.connectors.cdc.postgres import PostgresCdcSourceConnector
from sluice.connectors.jdbc.sink import JdbcSinkConnector
from sluice.connectors.jdbc.source import JdbcSourceConnector
from sluice.connectors.kafka._client import pass_through
from sluice.connectors.kafka.sink import KafkaSinkConnector
from sluice.connectors.kafka.source import FAMILY as KAFKA_SOURCE
from sluice.connectors.kafka.source import KafkaSourceConnector
from sluice.connectors.lake.iceberg import IcebergSinkConnector, catalog_client_options
from sluice.connectors.mqtt._config import CONNECTION_KEYS as MQTT_KEYS
from sluice.connectors.mqtt._config import Settings as MqttSettings
from sluice.connectors.nats._config import CONNECTION_KEYS as NATS_KEYS
from sluice.connectors.nats._config import Settings as NatsSettings
from sluice.connectors.rabbitmq._config import CONNECTION_KEYS as RABBIT_KEYS
from sluice.connectors.rabbitmq._config import Settings as RabbitSettings
from sluice.connectors.rabbitmq.sink import RabbitMQSinkConnector
from sluice.connectors.rabbitmq.source import RabbitMQSourceConnector
from sluice.connectors.redis._config import CONNECTION_KEYS as REDIS_KEYS
from sluice.connectors.redis._config import Settings as RedisSettings
from sluice.connectors.redis.sink import RedisSinkConnector
from sluice.connectors.redis.source import RedisListSourceConnector, RedisStreamSourceConnector
from sluice.connectors.rocketmq.sink import RocketMQSinkConnector
from sluice.connectors.rocketmq.source import RocketMQSourceConnector
from sluice.runtime.file_access import check_client_options
from sluice.runtime.herder.validation import check
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.worker_config import WorkerConfig
from sluice.sdk import (
    KAFKA_CLIENT,
    POSTGRESQL_CLIENT,
    ClientOption,
    ClientPolicy,
    ConfigDef,
    ConfigException,
    InvalidConfig,
    prefixed_options,
    refuse_unsafe,
)

ALLOWLIST = "connector.client.config.override.allowlist"
POLICY = "connector.client.config.override.policy"


def kafka(name: str, value: str = "x") -> ClientOption:
    return ClientOption(KAFKA_CLIENT, f"source.kafka.{name}", name, value)


def refusal(policy: ClientPolicy, option: ClientOption) -> ConfigException:
    problem = policy.problem(option)
    assert problem is not None, f"{option.name}={option.value} was allowed"
    return problem


@pytest.mark.parametrize(
    "name",
    [
        "plugin.library.paths",
        "ssl.engine.location",
        "ssl.engine.id",
        "ssl_engine_callback_data",
        "ssl.providers",
        "sasl.kerberos.kinit.cmd",
        "interceptors",
        "offset.store.path",
        "error_cb",
        "ssl.certificate.verify_cb",
    ],
)
@pytest.mark.parametrize("mode", ["allowlist", "all", "none"])
def test_code_loading_options_are_never_allowed(name: str, mode: str) -> None:
    # not by mode=all, not by the operator's allowlist naming them
    policy = ClientPolicy(mode, frozenset({name, f"kafka:{name}"}))
    problem = refusal(policy, kafka(name, "/allowed/marker.so"))
    assert problem.key == f"source.kafka.{name}"
    assert problem.message.startswith(f"source.kafka.{name}: librdkafka is never given")
    assert problem.suggestion == "remove it; no worker setting allows it"
    with pytest.raises(ConfigException) as caught:
        refuse_unsafe([kafka(name)])
    assert caught.value.key == f"source.kafka.{name}"


def test_unlisted_options_are_refused_with_how_to_allow_them() -> None:
    problem = refusal(ClientPolicy(), kafka("debug", "all"))
    assert problem.key == "source.kafka.debug"
    assert "not an option this worker passes to librdkafka" in problem.message
    assert f"add kafka:debug to {ALLOWLIST}" in str(problem.suggestion)
    assert f"{POLICY}=all" in str(problem.suggestion)
    # the operator's additions, by family:option or by name; or every option with `all`
    assert ClientPolicy(extra=frozenset({"kafka:debug"})).problem(kafka("debug")) is None
    assert ClientPolicy(extra=frozenset({"debug"})).problem(kafka("debug")) is None
    assert ClientPolicy(extra=frozenset({"redis:debug"})).problem(kafka("debug")) is not None
    assert ClientPolicy("all").problem(kafka("debug")) is None
    # listed options pass; `none` passes nothing
    assert ClientPolicy().problem(kafka("security.protocol", "sasl_ssl")) is None
    none = refusal(ClientPolicy("none"), kafka("security.protocol", "sasl_ssl"))
    assert f"({POLICY}=none)" in none.message


def test_options_sluice_sets_itself_are_refused_under_every_policy() -> None:
    option = ClientOption(KAFKA_SOURCE, "source.kafka.group.id", "group.id", "g")
    for mode in ("allowlist", "all"):
        problem = refusal(ClientPolicy(mode, frozenset({"group.id"})), option)
        assert "sluice sets this librdkafka option itself" in problem.message
    servers = ClientOption(KAFKA_SOURCE, "source.kafka.bootstrap.servers", "bootstrap.servers", "")
    assert "set source.bootstrap.servers" in refusal(ClientPolicy("all"), servers).message
    # reserved is the policy's matter: a stored config with one still builds its client
    refuse_unsafe([option])


def test_file_options_stay_inside_file_allowed_dirs(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "ca.pem").write_text("")
    (inside / "escape").symlink_to(outside)
    policy = ClientPolicy(allowed_dirs=(os.path.realpath(inside),))
    assert policy.problem(kafka("ssl.ca.location", str(inside / "ca.pem"))) is None
    problem = refusal(policy, kafka("ssl.key.location", str(outside / "key.pem")))
    assert problem.key == "source.kafka.ssl.key.location"
    assert "is outside the folders this worker allows (file.allowed.dirs=" in problem.message
    refusal(policy, kafka("ssl.ca.location", str(inside / "escape" / "ca.pem")))  # a symlink out
    refusal(policy, kafka("ssl.ca.location", str(inside / ".." / "out" / "ca.pem")))
    # `probe` names no file; with mode=all an unlisted *.location option is still confined
    assert policy.problem(kafka("ssl.ca.location", "probe")) is None
    everything = ClientPolicy("all", allowed_dirs=policy.allowed_dirs)
    refusal(everything, kafka("some.future.location", str(outside / "f")))
    # no file.allowed.dirs: no limit on files (as for `type="path"` keys)
    assert ClientPolicy().problem(kafka("ssl.key.location", str(outside / "key.pem"))) is None


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("sasl.kerberos.principal", "me; touch /tmp/pwned", "kinit shell command"),
        ("sasl.kerberos.keytab", '/k" ; id ; "', "kinit shell command"),
        ("sasl.oauthbearer.token.endpoint.url", "file:///etc/shadow", "http:// or https://"),
    ],
)
def test_values_librdkafka_would_misuse_are_refused(name: str, value: str, why: str) -> None:
    for mode in ("allowlist", "all"):
        assert why in refusal(ClientPolicy(mode), kafka(name, value)).message
    with pytest.raises(ConfigException):
        refuse_unsafe([kafka(name, value)])
    assert ClientPolicy().problem(kafka("sasl.kerberos.principal", "sluice/h@EXAMPLE.COM")) is None


def test_url_parameters_name_the_url_key_once_with_every_refused_parameter() -> None:
    options = [
        ClientOption(POSTGRESQL_CLIENT, "connection.url", "sslkey", "pkcs11:key", in_url=True),
        ClientOption(POSTGRESQL_CLIENT, "connection.url", "sslmode", "verify-full", in_url=True),
        ClientOption(POSTGRESQL_CLIENT, "connection.url", "service", "prod", in_url=True),
        kafka("plugin.library.paths"),
    ]
    with pytest.raises(InvalidConfig) as caught:
        ClientPolicy().check(options)
    url, lib = caught.value.problems
    assert url.key == "connection.url"
    assert "URL parameter 'sslkey'" in url.message and "OpenSSL engine" in url.message
    assert "URL parameter 'service'" in url.message and "sslmode" not in url.message
    assert lib.key == "source.kafka.plugin.library.paths"


def test_the_worker_config_parses_the_policy_and_refuses_bad_values(tmp_path: Path) -> None:
    props = {
        "storePathRootDir": str(tmp_path),
        "file.allowed.dirs": f"{tmp_path}/a,{tmp_path}/b",
        ALLOWLIST: "kafka:debug, statistics.interval.ms",
    }
    policy = WorkerConfig.from_properties(props).client_policy
    assert policy == ClientPolicy(
        "allowlist",
        frozenset({"kafka:debug", "statistics.interval.ms"}),
        (os.path.realpath(tmp_path / "a"), os.path.realpath(tmp_path / "b")),
    )
    with pytest.raises(ConfigException) as caught:
        WorkerConfig.from_properties({**props, POLICY: "everything"})
    assert caught.value.key == POLICY
    with pytest.raises(ConfigException) as caught:
        WorkerConfig.from_properties({**props, ALLOWLIST: "kafka:a:b"})
    assert caught.value.key == ALLOWLIST and "'kafka:a:b'" in caught.value.message


def test_the_kafka_connectors_declare_their_prefixed_options() -> None:
    config = {
        "source.bootstrap.servers": "k:9092",
        "source.kafka.security.protocol": "ssl",
        "source.kafka.plugin.library.paths": "/x.so",
        "target.kafka.linger.ms": "50",
    }
    found = {(o.key, o.name) for o in KafkaSourceConnector.client_options(config)}
    assert found == {
        ("source.kafka.security.protocol", "security.protocol"),
        ("source.kafka.plugin.library.paths", "plugin.library.paths"),
    }
    assert [o.name for o in KafkaSinkConnector.client_options(config)] == ["linger.ms"]
    # the client is never built with a code-loading option, whatever called for it
    with pytest.raises(ConfigException) as caught:
        pass_through(config, "source.kafka.", KAFKA_SOURCE)
    assert caught.value.key == "source.kafka.plugin.library.paths"
    assert prefixed_options(KAFKA_CLIENT, {"source.kafka.": "x"}, "source.kafka.") == []


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("postgresql://u@h/db?sslkey=/a:b", "'sslkey'"),
        ("postgresql+psycopg://u@h/db?sslkeylogfile=/tmp/keys", "'sslkeylogfile'"),
        ("postgresql://u@h/db?servicefile=/etc/pg_service.conf&service=x", "'servicefile'"),
        ("mysql+pymysql://u@h/db?local_infile=1", "'local_infile'"),
        ("mysql+pymysql://u@h/db?read_default_file=/etc/mysql/my.cnf", "'read_default_file'"),
        ("mysql+pymysql://u@h/db?plugin=anything", "'plugin'"),
    ],
)
def test_jdbc_url_parameters_that_load_code_or_read_files_are_refused(
    url: str, refused: str
) -> None:
    config = {"connection.url": url}
    with pytest.raises(ConfigException) as caught:
        parse_connection(config)
    assert caught.value.key == "connection.url" and f"URL parameter {refused}" in str(caught.value)
    for cls in (JdbcSourceConnector, JdbcSinkConnector):
        with pytest.raises(ConfigException):
            check_client_options(cls, config, ClientPolicy("all"))


def test_jdbc_url_parameters_follow_the_policy() -> None:
    safe = {"connection.url": "postgresql://u@h/db?sslmode=verify-full&application_name=x"}
    check_client_options(JdbcSourceConnector, safe, ClientPolicy())
    odd = {"connection.url": "postgresql://u@h/db?client_encoding=LATIN1"}
    with pytest.raises(ConfigException) as caught:
        check_client_options(JdbcSinkConnector, odd, ClientPolicy())
    assert "postgresql:client_encoding" in str(caught.value.suggestion)
    check_client_options(
        JdbcSinkConnector, odd, ClientPolicy(extra=frozenset({"postgresql:client_encoding"}))
    )
    # a jdbc: URL's parameters are the Java driver's: only those with a meaning here are passed
    jdbc = {"connection.url": "jdbc:postgresql://h/db?currentSchema=s&sslfactory=x.Y"}
    assert [(o.name, o.value) for o in JdbcSourceConnector.client_options(jdbc)] == [
        ("options", "-c search_path=s")
    ]
    # a URL the connector cannot read is left to its own validate, which names the problem
    check_client_options(JdbcSourceConnector, {"connection.url": "nope://h"}, ClientPolicy())


def test_cdc_connectors_apply_the_policy_to_their_connection_url(tmp_path: Path) -> None:
    policy = ClientPolicy(allowed_dirs=(os.path.realpath(tmp_path),))
    pg = {
        "connection.url": "postgresql://u@h/db?sslrootcert=/etc/ssl/ca.pem",
        "topic.prefix": "p",
    }
    with pytest.raises(ConfigException) as caught:
        check_client_options(PostgresCdcSourceConnector, pg, policy)
    assert caught.value.key == "connection.url" and "outside the folders" in str(caught.value)
    mysql = {
        "connection.url": "mysql+pymysql://u@h/db?local_infile=1",
        "topic.prefix": "p",
        "table.include.list": "db.t",
    }
    with pytest.raises(ConfigException) as caught:
        check_client_options(MySqlCdcSourceConnector, mysql, ClientPolicy("all"))
    assert "LOAD DATA LOCAL INFILE" in str(caught.value)
    # the Debezium keys make a URL without parameters
    keys = {"database.hostname": "h", "topic.prefix": "p", "table.include.list": "db.t"}
    assert MySqlCdcSourceConnector.client_options(keys) == []


def test_redis_url_parameters_follow_the_policy(tmp_path: Path) -> None:
    policy = ClientPolicy(allowed_dirs=(os.path.realpath(tmp_path),))
    for cls in (RedisSinkConnector, RedisStreamSourceConnector, RedisListSourceConnector):
        ok = {"redis.url": f"rediss://h:6380/0?ssl_ca_certs={tmp_path}/ca.pem&db=2"}
        check_client_options(cls, ok, policy)
        out = {"redis.url": "rediss://h:6380/0?ssl_certfile=/etc/shadow"}
        with pytest.raises(ConfigException) as caught:
            check_client_options(cls, out, policy)
        assert caught.value.key == "redis.url" and "'ssl_certfile'" in str(caught.value)
    socket = {"redis.url": "unix:///var/run/docker.sock"}
    with pytest.raises(ConfigException) as caught:
        check_client_options(RedisSinkConnector, socket, policy)
    assert "URL parameter 'path'" in str(caught.value)
    timeout = {"redis.url": "redis://h/0?socket_timeout=0.001"}
    with pytest.raises(ConfigException) as caught:
        check_client_options(RedisSinkConnector, timeout, ClientPolicy("all"))
    assert "set redis.timeout.ms" in str(caught.value)
    values = ConfigDef(*REDIS_KEYS).parse({"redis.url": "redis://h/0?connection_class=x.Y"})
    with pytest.raises(ConfigException, match="never given"):
        RedisSettings.of(values)


def test_rabbitmq_url_parameters_and_ssl_options_follow_the_policy(tmp_path: Path) -> None:
    policy = ClientPolicy(allowed_dirs=(os.path.realpath(tmp_path),))
    ok = f"amqps://h/%2F?ssl_options={{'cafile': '{tmp_path}/ca.pem'}}&channel_max=16"
    for cls in (RabbitMQSinkConnector, RabbitMQSourceConnector):
        check_client_options(cls, {"rabbitmq.url": ok}, policy)
        bad = "amqps://h/%2F?ssl_options={'certfile': '/root/client.pem'}"
        with pytest.raises(ConfigException) as caught:
            check_client_options(cls, {"rabbitmq.url": bad}, policy)
        assert "URL parameter 'ssl_options.certfile'" in str(caught.value)
    with pytest.raises(ConfigException, match=r"set rabbitmq\.heartbeat\.s"):
        check_client_options(
            RabbitMQSinkConnector, {"rabbitmq.url": "amqp://h/%2F?heartbeat=1"}, policy
        )
    values = ConfigDef(*RABBIT_KEYS).parse({"rabbitmq.url": "amqps://h/?ssl_options=open('x')"})
    with pytest.raises(ConfigException, match="must be a dict literal"):
        RabbitSettings.of(values)


def test_iceberg_catalog_url_follows_the_sql_families() -> None:
    uri = "postgresql://u@h/cat?sslkeylogfile=/tmp/k"
    with pytest.raises(ConfigException, match="TLS session keys"):
        check_client_options(IcebergSinkConnector, {"iceberg.catalog.uri": uri}, ClientPolicy())
    assert catalog_client_options("sqlite:////lake/catalog.db") == []
    # a file: URI would name a file past the check of the URL's path
    uri = "sqlite:///file:/etc/passwd?uri=true&mode=ro"
    with pytest.raises(ConfigException, match="'uri': sqlite3"):
        check_client_options(IcebergSinkConnector, {"iceberg.catalog.uri": uri}, ClientPolicy())
    timeout = "sqlite:////lake/catalog.db?timeout=30"
    check_client_options(IcebergSinkConnector, {"iceberg.catalog.uri": timeout}, ClientPolicy())
    with pytest.raises(ConfigException, match="unsupported catalog database"):
        catalog_client_options("oracle+oracledb://u@h/x?config_dir=/x")
    assert IcebergSinkConnector.client_options({}) == []


@pytest.mark.parametrize(
    ("keys", "settings", "key", "url"),
    [
        (MQTT_KEYS, MqttSettings, "mqtt.url", "tcp://h:1883?ca_certs=/etc/shadow"),
        (MQTT_KEYS, MqttSettings, "mqtt.url", "tcp://h:1883/extra"),
        (NATS_KEYS, NatsSettings, "nats.url", "tls://h:4222?tls_ca=/etc/shadow"),
    ],
)
def test_mqtt_and_nats_refuse_options_in_their_url(
    keys: tuple, settings: type, key: str, url: str
) -> None:
    with pytest.raises(ConfigException) as caught:
        settings.of(ConfigDef(*keys).parse({key: url}))
    assert caught.value.key == key and "sluice passes no client options" in str(caught.value)


def test_connectors_without_pass_through_declare_none() -> None:
    # RocketMQ's client is sluice's own: only declared keys (name server, group, ACL) reach it
    config = {"source.namesrv": "h:9876", "source.rocketmq.plugin.library.paths": "/x.so"}
    assert RocketMQSourceConnector.client_options(config) == []
    assert RocketMQSinkConnector.client_options(config) == []


def test_prefixed_client_options_are_no_unknown_keys() -> None:
    config = {
        "connector.class": "KafkaSourceConnector",
        "source.bootstrap.servers": "127.0.0.1:9",
        "source.topics": "t",
        "source.kafka.security.protocol": "ssl",
        "source.kafak.typo": "1",
    }
    policy = ClientPolicy()
    report, _cls = check(PluginRegistry(), config, lambda c, cls: _checked(cls, c, policy))
    assert [w.key for w in report.warnings] == ["source.kafak.typo"]
    # the worker's policy ran before the connector's validate (which cannot reach 127.0.0.1:9)
    assert [p.key for p in report.errors] == ["source.bootstrap.servers"]
    denied = {**config, "source.kafka.plugin.library.paths": "/x.so"}
    report, _cls = check(PluginRegistry(), denied, lambda c, cls: _checked(cls, c, policy))
    assert [p.key for p in report.errors] == ["source.kafka.plugin.library.paths"]


def _checked(cls: type, config: dict[str, str], policy: ClientPolicy) -> dict[str, str]:
    check_client_options(cls, config, policy)
    return config
