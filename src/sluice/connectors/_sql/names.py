"""A table's name as the JDBC connectors and the CDC connectors take it (a leaf: the config, the
dialects and the CDC connectors all use it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableName:
    """A table as `schema.table` (MySQL: `database.table`); `schema` empty = the default one."""

    schema: str
    name: str

    @staticmethod
    def parse(text: str) -> TableName:
        # The first dot separates the schema: table names may contain dots, schema names not.
        schema, dot, name = text.strip().partition(".")
        if not dot:
            return TableName("", text.strip())
        return TableName(schema, name)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name
