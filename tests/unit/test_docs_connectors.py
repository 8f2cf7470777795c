"""The connector pages show each connector three ways — a properties file, the CLI and curl — and
the three agree and use only keys the connector knows; every other connector config a page shows
(a JSON block, a `sluice connectors create … -c key=value` command, a curl body) names a known
connector class and only its keys; the shipped worker configs are current."""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path

import pytest

from sluice.engine.settings import check_config
from sluice.runtime.plugins import PluginRegistry, plugin_kind
from sluice.runtime.properties_file import parse_properties
from sluice.runtime.worker_config import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    *(f"docs/{p}.md" for p in ("jdbc", "cdc", "http", "redis", "replicators", "lake")),
]
_FORMS = re.compile(
    r"```properties\n# (?P<name>[\w-]+)\.properties\n(?P<props>.*?)\n```\n\n```bash\n"
    r"sluice connectors create (?P=name) -f (?P=name)\.properties[^\n]*\n"
    r"curl -s -X POST http://127\.0\.0\.1:8082/connectors/(?P=name) \\\n"
    r"[^\n]*<<'EOF'[^\n]*\n(?P<json>\{.*?\n\})\nEOF\n```",
    re.S,
)


ALL_PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
_CURL_BODY = re.compile(r"-d '(?P<json>\{.*?\})'", re.S)


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
            kind=plugin_kind(cls),
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


def _configs_shown(page: str) -> list[tuple[str, dict[str, str]]]:
    """Every connector config a page shows outside the three-way forms, with where it is."""
    found = []
    for block in _BLOCK.finditer((ROOT / page).read_text()):
        body = block["body"]
        if "connector.class" not in body:
            continue
        if block["lang"] == "json":
            shown = json.loads(body)
            found.append((f"{page}: json block", shown.get("config", shown)))
            continue
        for curl in _CURL_BODY.finditer(body):
            found.append((f"{page}: curl -d", json.loads(curl["json"])))
        for line in body.replace("\\\n", " ").splitlines():
            if "connectors create" in line and "connector.class=" in line:
                found.append((f"{page}: {line.strip()[:60]}", _cli_config(line)))
    # an illustration with elided keys ("…": "…") is not a config to type
    return [(where, c) for where, c in found if "…" not in json.dumps(c, ensure_ascii=False)]


def _cli_config(line: str) -> dict[str, str]:
    words = shlex.split(line, comments=True)
    values = [words[i + 1] for i, word in enumerate(words) if word == "-c"]
    return dict(value.split("=", 1) for value in values)


@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_config_a_page_shows_is_valid(page: str) -> None:
    registry = PluginRegistry([str(ROOT / "docs" / "examples")])  # the SDK page's example plugin
    for where, config in _configs_shown(page):
        cls = registry.connector(config["connector.class"])
        report = check_config(
            {k: str(v) for k, v in config.items()},
            kind=plugin_kind(cls),
            connector_keys=cls.config_def,
            resolve_transform=registry.transform,
            aliases=cls.key_aliases,
        )
        assert (where, report.errors, report.warnings) == (where, [], [])


def test_the_docs_show_configs_of_every_kind() -> None:
    """The scan above finds what it is meant to (a regex that stops matching would pass it)."""
    where = [w for page in ALL_PAGES for w, _ in _configs_shown(page)]
    assert any("json block" in w for w in where)
    assert any("curl -d" in w for w in where)
    assert sum("connectors create" in w for w in where) >= 8


@pytest.mark.parametrize("page", ALL_PAGES)
def test_no_properties_block_has_a_comment_after_a_value(page: str) -> None:
    """java.util.Properties has no end-of-line comments: `bus=kafka   # or rocketmq` is the value
    `kafka   # or rocketmq`, which the worker refuses (the README's broker quickstart did that)."""
    for block in _BLOCK.finditer((ROOT / page).read_text()):
        if block["lang"] == "properties":
            entries = parse_properties(block["body"])
            assert [k for k, v in entries.items() if re.search(r"\s#", v)] == [], page
