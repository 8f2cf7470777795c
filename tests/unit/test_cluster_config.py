"""Worker config for a Spark cluster: the store root must be a path, and which masters get a
loopback driver (pure logic, no Spark)."""

from __future__ import annotations

import pytest

from sluice.engine.session import loopback_master
from sluice.runtime.worker_config import WORKER_KEYS, WorkerConfig
from sluice.sdk import ConfigException


@pytest.mark.parametrize("root", ["hdfs://namenode:8020/sluice", "s3a://bucket/sluice"])
def test_store_root_uri_is_refused_naming_the_key(root: str) -> None:
    with pytest.raises(ConfigException) as info:
        WorkerConfig.from_properties({"storePathRootDir": root})
    assert info.value.key == "storePathRootDir"
    assert "must be a file system path" in str(info.value)
    assert "docs/spark-cluster.md" in str(info.value)


def test_shared_path_check_keys_are_typed_and_validated(tmp_path) -> None:
    values = WORKER_KEYS.parse({"storePathRootDir": str(tmp_path)})
    assert values["cluster.shared.path.check"] is True
    assert values["cluster.shared.path.check.timeout.ms"] == 120_000
    with pytest.raises(ConfigException) as info:
        WorkerConfig.from_properties(
            {"storePathRootDir": str(tmp_path), "cluster.shared.path.check": "yes please"}
        )
    assert info.value.key == "cluster.shared.path.check"


@pytest.mark.parametrize(
    ("master", "loopback"),
    [
        ("local[*]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077,127.0.0.2:7078", True),
        ("spark://[::1]:7077", True),
        ("spark://127.0.0.1:7077,spark-2.example.com:7077", False),
        ("spark://10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://127.0.0.1:6443", False),
    ],
)
def test_loopback_master(master: str, loopback: bool) -> None:
    assert loopback_master(master) is loopback
