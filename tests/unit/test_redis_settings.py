"""Pure logic of the Redis connectors: connection settings, error mapping, entry ids, shares."""

from __future__ import annotations

import pytest
import redis

from sluice.connectors._messaging import shares
from sluice.connectors.redis._client import failure
from sluice.connectors.redis._config import CONNECTION_KEYS, Settings
from sluice.connectors.redis.source import _id
from sluice.sdk import ConfigDef, ConfigException, ConnectException, RetriableException

KEYS = ConfigDef(*CONNECTION_KEYS)


def settings(**config: str) -> Settings:
    return Settings.of(KEYS.parse(config))


def test_url_or_rocketmq_keys() -> None:
    s = settings(**{"redis.url": "redis://u:secret@h:7000/2", "redis.timeout.ms": "500"})
    assert (s.url, s.key, s.timeout_s) == ("redis://u:secret@h:7000/2", "redis.url", 0.5)
    assert s.where == "redis://u:********@h:7000/2"  # never the password
    s = settings(redisAddr="h", redisPort="7001", redisPassword="pw", timeout="2000")
    assert (s.url, s.key, s.password, s.timeout_s) == ("redis://h:7001/0", "redisAddr", "pw", 2.0)
    with pytest.raises(ConfigException, match=r"redis.url: required key is missing"):
        settings()
    with pytest.raises(ConfigException, match=r"redis.url: expected redis://"):
        settings(**{"redis.url": "h:6379"})
    with pytest.raises(ConfigException, match=r"redisPort: expected an integer"):
        settings(redisAddr="h", redisPort="x")


def test_failures_are_typed() -> None:
    s = settings(**{"redis.url": "redis://h:1/0"})
    auth = failure(s, "reading", redis.AuthenticationError("WRONGPASS"))
    assert isinstance(auth, ConfigException) and auth.key == "redis.password"
    gone = failure(s, "reading", redis.ConnectionError("refused"))
    assert isinstance(gone, RetriableException) and "redis.url=redis://h:1/0: reading" in str(gone)
    other = failure(s, "XADD x", redis.ResponseError("WRONGTYPE"))
    assert type(other) is ConnectException and "XADD x: WRONGTYPE" in str(other)


def test_entry_ids_compare_as_numbers() -> None:
    assert _id(b"1700000000000-12") > _id("1700000000000-9") > _id("999-0")
    assert _id("5") == (5, 0)


def test_shares_spread_names_over_at_most_max_tasks() -> None:
    assert shares(["a", "b", "c"], 2) == [["a", "c"], ["b"]]
    assert shares(["a"], 4) == [["a"]]
