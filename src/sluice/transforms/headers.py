"""Transforms that add or remove record headers (the `headers` map<string,string> column)."""

from __future__ import annotations

from typing import Any

from sluice.sdk import ConfigDef, ConfigKey, SqlStep, Transform, literal, quote

# Lambda parameter names for map_filter: they shadow columns only inside the lambda.
_KEEP_ALL_BUT = "map_filter({headers}, (hk, hv) -> NOT array_contains(array({names}), hk))"


def _without(headers: str, names: list[str]) -> str:
    return _KEEP_ALL_BUT.format(headers=headers, names=", ".join(map(literal, names)))


class InsertHeader(Transform):
    """Sets a header to a constant (Kafka's `InsertHeader`).

    Options: `header` (name), `value.literal` (the value). Headers here are a map, so an existing
    header of that name is replaced (Kafka would add a second one). Compiles to SQL (`map_concat`).
    """

    config_def = ConfigDef(
        ConfigKey("header", doc="name of the header to set"),
        ConfigKey("value.literal", doc="the header's value"),
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        name = self.options["header"]
        # Spark rejects duplicate keys in map_concat, so drop the old value first.
        empty = "CAST(map() AS MAP<STRING, STRING>)"
        current = _without(f"coalesce({quote('headers')}, {empty})", [name])
        added = f"map({literal(name)}, {literal(self.options['value.literal'])})"
        return SqlStep(columns={"headers": f"map_concat({current}, {added})"})


class DropHeaders(Transform):
    """Removes headers by name (Kafka's `DropHeaders`).

    Options: `headers` (list of names). Records without headers keep NULL. Compiles to SQL
    (`map_filter`).
    """

    config_def = ConfigDef(ConfigKey("headers", type="list", doc="names of headers to remove"))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        return SqlStep(columns={"headers": _without(quote("headers"), self.options["headers"])})
