"""The connector pages show each connector three ways — a properties file, the CLI and curl — and
the three agree and use only keys the connector knows; the shipped worker configs are current."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from sluice.engine.settings import check_config
from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.validation import kind_of
from sluice.runtime.worker_config import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *(f"docs/{p}.md" for p in ("jdbc", "cdc", "http", "redis", "replicators"))]
_FORMS = re.compile(
    r"```properties\n# (?P<name>[\w-]+)\.properties\n(?P<props>.*?)\n```\n\n```bash\n"
    r"sluice connectors create (?P=name) -f (?P=name)\.properties[^\n]*\n"
    r"curl -s -X POST http://127\.0\.0\.1:8082/connectors/(?P=name) \\\n"
    r"[^\n]*<<'EOF'[^\n]*\n(?P<json>\{.*?\n\})\nEOF\n```",
    re.S,
)


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    return {key: value for key, value in pairs}


@pytest.mark.parametrize("page", PAGES)
def test_each_page_shows_properties_cli_and_curl_that_agree(page: str) -> None:
    found = list(_FORMS.finditer((ROOT / page).read_text()))
    assert found, f"{page} shows no connector as properties + CLI + curl"
    registry = PluginRegistry()
    for match in found:
        config = _properties(match["props"])
        assert json.loads(match["json"]) == config, match["name"]
        cls = registry.connector(config["connector.class"])
        report = check_config(
            config,
            kind=kind_of(cls),
            connector_keys=cls.config_def,
            resolve_transform=registry.transform,
            aliases=cls.key_aliases,
        )
        assert (match["name"], report.errors, report.warnings) == (match["name"], [], [])


@pytest.mark.parametrize("name", ["connect-standalone.conf", "connect-distributed.conf"])
def test_the_shipped_worker_configs_have_only_known_keys(name: str, caplog) -> None:
    text = (ROOT / "conf" / name).read_text()
    with caplog.at_level(logging.WARNING):
        WorkerConfig.from_properties(_properties_of_conf(text), str(ROOT))
    assert [r.getMessage() for r in caplog.records] == []


def _properties_of_conf(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in lines)}
