"""How the JDBC source's columns become optional fields, and how it tells its table changed."""

from __future__ import annotations

import pytest

from sluice.connectors._sql.dialects.mysql import DIALECT as MYSQL
from sluice.connectors._sql.dialects.mysql import mysql_column
from sluice.connectors._sql.dialects.postgres import DIALECT as POSTGRES
from sluice.connectors._sql.dialects.postgres import pg_column
from sluice.connectors.jdbc.source import column_changes


def _pg(name: str, base: str = "int8", nullable: bool = False, **kw) -> object:
    return pg_column(name, base, base, nullable, "b", kw.pop("auto", False), **kw)


@pytest.mark.parametrize(
    ("nullable", "has_default", "auto", "optional"),
    [
        (True, False, False, True),
        (False, False, False, False),
        (False, True, False, True),  # ADD COLUMN … NOT NULL DEFAULT v: backward compatible
        (False, True, True, False),  # serial / AUTO_INCREMENT: a default, but always set
    ],
)
def test_not_null_with_a_default_is_an_optional_field(nullable, has_default, auto, optional):
    pg = POSTGRES.map_column(_pg("c", nullable=nullable, has_default=has_default, auto=auto))
    extra = "auto_increment" if auto else ""
    my = MYSQL.map_column(
        mysql_column(
            "c", "bigint", "bigint(20)", nullable, None, None, extra, has_default=has_default
        )
    )
    assert pg.schema.optional is optional
    assert my.schema.optional is optional


def test_column_changes_names_added_removed_retyped_and_loosened_columns() -> None:
    planned = [POSTGRES.map_column(_pg(n)) for n in ("id", "qty", "gone")]
    same = [_pg("id"), _pg("qty"), _pg("gone")]
    assert column_changes(planned, same, POSTGRES) == ""
    now = [_pg("id"), _pg("qty", "int4"), _pg("updated", "timestamptz", has_default=True)]
    assert column_changes(planned, now, POSTGRES) == ("added: updated; removed: gone; changed: qty")
    loosened = [_pg("id"), _pg("qty", nullable=True), _pg("gone")]
    assert column_changes(planned, loosened, POSTGRES) == "changed: qty"
    unmappable = [_pg("id"), _pg("qty"), pg_column("gone", "int4", "integer[]", True, "b", False)]
    assert column_changes(planned, unmappable, POSTGRES) == "changed: gone"
    # a field planned optional to share a topic (NOT NULL in the table) is not a change
    shared = [POSTGRES.map_column(_pg("id", nullable=True))]
    assert column_changes(shared, [_pg("id")], POSTGRES) == ""


def test_a_changed_table_is_a_failure_the_runtime_restarts_by_itself() -> None:
    from sluice.connectors.jdbc.source import SCHEMA_CHANGED
    from sluice.runtime.herder.restarts import is_transient
    from sluice.sdk import RestartRequested

    asked = RestartRequested(f"table 'shop.orders' {SCHEMA_CHANGED} (added: x)")
    assert is_transient(f"ConnectException: {asked}")
