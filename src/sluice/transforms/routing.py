"""Transforms that change where a record goes (its topic)."""

from __future__ import annotations

from typing import Any

from sluice.sdk import ConfigDef, ConfigKey, SqlStep, Transform, literal


class RegexRouter(Transform):
    """Renames the topic when the whole topic name matches `regex` (`replacement` may use `$1`)."""

    topic_only = True
    config_def = ConfigDef(
        ConfigKey("regex", doc="Java regular expression matched against the whole topic"),
        ConfigKey("replacement", doc="the new topic; $1… refer to the regex's groups"),
    )

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        # Anchored, the pattern matches the whole topic or nothing, so `regexp_replace` alone
        # renames a matching topic and leaves the others as they are. It reads the topic once:
        # Spark inlines each step into the next, and a step reading it three times (a CASE WHEN
        # around the replace) made a chain of n routers a tree of 3^n nodes to plan.
        pattern = literal(f"^(?:{self.options['regex']})$")
        replacement = literal(self.options["replacement"])
        return SqlStep(columns={"topic": f"regexp_replace(topic, {pattern}, {replacement})"})
