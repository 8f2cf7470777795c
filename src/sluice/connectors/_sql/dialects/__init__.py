"""One module per database, each defining ``DIALECT`` (a `sluice.connectors._sql.dialect.Dialect`):
`postgres` (PostgreSQL) and `mysql` (MySQL and MariaDB). `dialect_for` finds them all, so a third
database is one new module here."""

from __future__ import annotations

import importlib
import pkgutil

from sluice.connectors._sql.dialect import Dialect

_DIALECTS: dict[str, Dialect] = {}


def _registry() -> dict[str, Dialect]:
    """Every dialect of this package, by name: a module here with a ``DIALECT`` is all a new
    database needs (imported on first use: each loads its database's ways of reading pages)."""
    found: dict[str, Dialect] = {}
    for module in pkgutil.iter_modules(__path__):
        dialect = importlib.import_module(f"{__name__}.{module.name}").DIALECT
        found[dialect.name] = dialect
    return found


def dialect_for(name: str) -> Dialect:
    """The dialect called ``name`` (``Connection.dialect``)."""
    if not _DIALECTS:
        _DIALECTS.update(_registry())
    return _DIALECTS[name]


def dialect_for_scheme(scheme: str) -> Dialect | None:
    """The dialect of a connection URL's scheme (``postgresql``, ``mariadb+pymysql``, …)."""
    dialect_for("postgresql")  # loads the registry
    return next((d for d in _DIALECTS.values() if scheme in d.schemes), None)
