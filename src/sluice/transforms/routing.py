"""Transforms that change where a record goes (its topic)."""

from __future__ import annotations

from typing import Any

from sluice.sdk import ConfigDef, ConfigKey, SqlStep, Transform, literal


class RegexRouter(Transform):
    """Renames the topic when the whole topic name matches `regex` (`replacement` may use `$1`)."""

    config_def = ConfigDef(
        ConfigKey("regex", doc="Java regular expression matched against the whole topic"),
        ConfigKey("replacement", doc="the new topic; $1… refer to the regex's groups"),
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        pattern = literal(f"^(?:{self.options['regex']})$")
        replacement = literal(self.options["replacement"])
        return SqlStep(
            columns={
                "topic": f"CASE WHEN topic RLIKE {pattern} "
                f"THEN regexp_replace(topic, {pattern}, {replacement}) ELSE topic END"
            }
        )
