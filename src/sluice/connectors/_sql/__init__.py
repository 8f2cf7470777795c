"""What the SQL connectors share: the JDBC source and sink and the CDC sources of PostgreSQL and
MySQL/MariaDB all connect, name tables, map column types and read pages the same way.

A private leaf of `sluice.connectors` (it imports nothing of the connector packages that use
it): `connection` (the `connection.*` keys and URLs), `db` (a connection pool with retries),
`names` (quoted table names), `dialect` and `dialects` (each database's types, SQL and fast
paths), `values` (column values to and from Arrow) and `pages` (a page of rows read in bulk).
"""
