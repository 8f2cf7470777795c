"""The plugin list names every kind of plugin: connectors, transforms, converters, predicates."""

from __future__ import annotations

from sluice.runtime.plugins import default_registry


def test_every_kind_is_listed_once_with_its_aliases() -> None:
    plugins = {p.class_name: p for p in default_registry().plugins()}
    json = plugins["sluice.converters._json.JsonConverter"]
    assert json.type == "converter"
    assert "org.apache.rocketmq.connect.runtime.converter.record.json.JsonConverter" in json.aliases
    assert "org.apache.kafka.connect.json.JsonConverter" in json.aliases
    tombstone = plugins["sluice.transforms.filters.RecordIsTombstone"]
    assert tombstone.type == "predicate"
    assert "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone" in tombstone.aliases
    kinds = {p.type for p in plugins.values()}
    assert kinds == {"source", "sink", "transform", "converter", "predicate"}
    assert len(plugins) == len(default_registry().plugins())  # one entry per class
