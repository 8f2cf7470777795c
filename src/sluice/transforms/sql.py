"""`sql`: any Spark SQL over the records.

    transforms=s
    transforms.s.class=sql
    transforms.s.query=SELECT topic, key, upper(value) AS value, timestamp, headers
                       FROM records WHERE value NOT LIKE '#%'

The query reads the view `records` (columns `topic, key, value, timestamp, headers`; a struct
value's fields are `value.<field>`) and must return the same record columns. Other columns the
runtime carries (`partition_hash` on the source side) come back as NULL when the query does not
select them: without `partition_hash`, records without a key are spread round-robin over the
topic's queues instead of keeping their source partition's order.
"""

from __future__ import annotations

from typing import Any

from sluice.sdk import ConfigDef, ConfigKey, SqlStep, Transform


class Sql(Transform):
    """Replaces the records with the result of a `SELECT … FROM records`."""

    config_def = ConfigDef(ConfigKey("query", doc="SELECT … FROM records [WHERE …]"))

    def to_sql(self, schema: dict[str, Any]) -> SqlStep:
        return SqlStep(query=self.options["query"])
