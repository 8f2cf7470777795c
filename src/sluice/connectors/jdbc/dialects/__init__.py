"""One module per database, each defining ``DIALECT`` (a `sluice.connectors.jdbc._dialect.Dialect`):
`postgres` (PostgreSQL) and `mysql` (MySQL and MariaDB). `dialect_for` finds them all, so a third
database is one new module here."""
