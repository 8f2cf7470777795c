"""Built-in transforms. Each compiles to Spark SQL (see `sluice.sdk.Transform`).

`BUILTIN_TRANSFORMS` maps every accepted class name (short name, `sluice.transforms.…`, and the
RocketMQ Connect / Kafka Connect names with their `$Key`/`$Value` suffixes) to its class.
"""

from __future__ import annotations

from sluice.sdk import Transform
from sluice.transforms.routing import RegexRouter
from sluice.transforms.sql import Sql

BUILTIN_TRANSFORMS: dict[str, type[Transform]] = {}


def register(cls: type[Transform], *aliases: str) -> None:
    """Accept `cls` under its own names and `aliases`."""
    for name in (cls.__name__, f"sluice.transforms.{cls.__name__}", *aliases):
        BUILTIN_TRANSFORMS[name] = cls


register(Sql, "sql", "SqlTransform")
register(
    RegexRouter,
    "org.apache.kafka.connect.transforms.RegexRouter",
    "org.apache.rocketmq.connect.transforms.RegexRouter",
)

__all__ = ["BUILTIN_TRANSFORMS", "RegexRouter", "Sql", "register"]
